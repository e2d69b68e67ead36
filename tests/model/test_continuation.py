"""Token-faithful multi-turn prompts through the HTTP APIs, against the real SmolLM2-135M.

A harness sends the conversation back with the server's reply in it; the next
prompt must then start with the previous prompt's ids and the ids the model
sampled, exactly (what the capture needs to extend one branch). Anything else
is rendered whole, as the tokenizer renders it. Generations are short (2 cores).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from sclated.model import ChatRenderer, ModelServerConfig, RunningModelServer, default_gguf_path, start_model_server
from sclated.model._common import Fields
from sclated.model._openai import parse_chat_messages, parse_openai_tools

from .helpers import post_json, post_sse

llama_cpp = pytest.importorskip("llama_cpp")

pytestmark = [pytest.mark.model, pytest.mark.asyncio(loop_scope="module")]

IM_END = 2

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
CALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"const": "get_weather"},
        "arguments": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
        },
    },
    "required": ["name", "arguments"],
}
"""A tool call the grammar forces: the 135M model does not call tools on its own."""


async def start(**config: Any) -> RunningModelServer:
    return await start_model_server(ModelServerConfig(port=0, n_ctx=2048, n_threads=2, embeddings=False, **config))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[RunningModelServer]:
    running = await start()
    try:
        yield running
    finally:
        await running.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return llama_cpp.Llama(str(default_gguf_path()), vocab_only=True, verbose=False)


def whole(tokenizer: Any, body: dict[str, Any]) -> list[int]:
    """A chat request's prompt rendered whole and tokenized (what it was before continuation)."""
    renderer = ChatRenderer(tokenizer.metadata["tokenizer.chat_template"])
    tools, mode, forced = parse_openai_tools(Fields(body))
    text = renderer.render(parse_chat_messages(body["messages"]), tools, mode, forced)
    return [int(i) for i in tokenizer.tokenize(text.encode(), add_bos=False, special=True)]


async def chat(
    session: aiohttp.ClientSession, server: RunningModelServer, messages: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    body = {"messages": messages, "max_tokens": 24, "temperature": 0, "return_token_ids": True, **extra}
    return await post_json(session, f"{server.url}/v1/chat/completions", body)


def kept(out: dict[str, Any]) -> list[int]:
    """A chat response's prompt ids and sampled ids: what the next prompt must start with."""
    return [*out["prompt_token_ids"], *out["choices"][0]["token_ids"]]


async def continuation(session: aiohttp.ClientSession, server: RunningModelServer) -> dict[str, Any]:
    async with session.get(f"{server.url}/health") as r:
        body: dict[str, Any] = (await r.json())["continuation"]
        return body


async def test_chat_turns_extend_the_exact_ids_streamed_or_not(
    server: RunningModelServer, session: aiohttp.ClientSession, tokenizer: Any
) -> None:
    before = await continuation(session, server)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Say hello."}]
    first = await chat(session, server, messages, max_tokens=48)
    assert first["prompt_token_ids"] == whole(tokenizer, {"messages": messages})  # nothing to extend
    assert first["choices"][0]["finish_reason"] == "stop" and first["choices"][0]["token_ids"][-1] == IM_END
    messages += [first["choices"][0]["message"], {"role": "user", "content": "Now say goodbye."}]
    second = await chat(session, server, messages, max_tokens=6)
    ids = second["prompt_token_ids"]
    assert ids[: len(kept(first))] == kept(first)
    # The template's newline after the sampled <|im_end|>, then the new user turn.
    assert tokenizer.detokenize(ids[len(kept(first)) :], special=True).decode() == (
        "\n<|im_start|>user\nNow say goodbye.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert second["usage"]["prompt_tokens"] == len(ids)

    # Cut by max_tokens (no <|im_end|> sampled): the template's closing is added, streamed alike.
    assert second["choices"][0]["finish_reason"] == "length"
    messages += [second["choices"][0]["message"], {"role": "user", "content": "Thanks."}]
    events, _ = await post_sse(
        session,
        f"{server.url}/v1/chat/completions",
        {"messages": messages, "max_tokens": 4, "temperature": 0, "return_token_ids": True},
    )
    third = events[0].data["prompt_token_ids"]
    assert third[: len(kept(second))] == kept(second)
    assert third[len(kept(second))] == IM_END

    after = await continuation(session, server)
    assert after["continued"] - before["continued"] == 2 and after["fallbacks"] == before["fallbacks"]


async def test_without_a_seed_a_continued_prompt_samples_the_same_again(
    server: RunningModelServer, session: aiohttp.ClientSession
) -> None:
    """The seed comes from the prompt ids, here the continued ones: a retry gets the same answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Name a fruit."}]
    first = await chat(session, server, messages, temperature=0.9, max_tokens=8)
    messages += [first["choices"][0]["message"], {"role": "user", "content": "Another one."}]
    a = await chat(session, server, messages, temperature=0.9, max_tokens=8)
    b = await chat(session, server, messages, temperature=0.9, max_tokens=8)
    assert a["prompt_token_ids"] == b["prompt_token_ids"]
    assert a["prompt_token_ids"][: len(kept(first))] == kept(first)
    assert a["choices"][0]["token_ids"] == b["choices"][0]["token_ids"]


async def test_an_edited_earlier_message_is_rendered_whole(
    server: RunningModelServer, session: aiohttp.ClientSession, tokenizer: Any
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Pick a colour."}]
    first = await chat(session, server, messages, max_tokens=8)
    edited = [
        {"role": "user", "content": "Pick a colour!"},
        first["choices"][0]["message"],
        {"role": "user", "content": "Why?"},
    ]
    out = await chat(session, server, edited, max_tokens=2)
    assert out["prompt_token_ids"] == whole(tokenizer, {"messages": edited})


async def test_a_reply_other_than_the_sampled_one_is_rendered_whole(
    server: RunningModelServer, session: aiohttp.ClientSession, tokenizer: Any
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Pick an animal."}]
    first = await chat(session, server, messages, max_tokens=8)
    reply = first["choices"][0]["message"]["content"]
    for other in (reply + " Really.", "A cat."):
        changed = [*messages, {"role": "assistant", "content": other}, {"role": "user", "content": "Why?"}]
        out = await chat(session, server, changed, max_tokens=2)
        assert out["prompt_token_ids"] == whole(tokenizer, {"messages": changed})
    # The same reply with the whitespace around it trimmed (harnesses do) is still the sampled one.
    same = [*messages, {"role": "assistant", "content": f"  {reply}\n"}, {"role": "user", "content": "Why?"}]
    out = await chat(session, server, same, max_tokens=2)
    assert out["prompt_token_ids"][: len(kept(first))] == kept(first)


async def test_a_tool_call_turn_and_its_result_extend_the_sampled_call(
    server: RunningModelServer, session: aiohttp.ClientSession, tokenizer: Any
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Paris?"}]
    forced = {"type": "json_schema", "json_schema": {"name": "call", "schema": CALL_SCHEMA}}
    first = await chat(session, server, messages, tools=TOOLS, response_format=forced, max_tokens=48)
    message = first["choices"][0]["message"]
    assert first["choices"][0]["finish_reason"] == "tool_calls", message
    (call,) = message["tool_calls"]
    messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": "Sunny, 21 C"}]
    second = await chat(session, server, messages, tools=TOOLS, max_tokens=2)
    ids = second["prompt_token_ids"]
    assert ids[: len(kept(first))] == kept(first)
    assert tokenizer.detokenize(ids[len(kept(first)) :], special=True).decode() == (
        "\n<|im_start|>user\n<tool_response>\nSunny, 21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    # The call as the template writes it is not the sampled text: rendered whole, it would differ.
    assert ids != whole(tokenizer, {"messages": messages, "tools": TOOLS})
    # Arguments re-serialised by the harness are the same call.
    call["function"]["arguments"] = json.dumps(json.loads(call["function"]["arguments"]), indent=2)
    again = await chat(session, server, messages, tools=TOOLS, max_tokens=2)
    assert again["prompt_token_ids"] == ids


async def test_anthropic_messages_turns_extend_the_exact_ids(
    server: RunningModelServer, session: aiohttp.ClientSession
) -> None:
    url = f"{server.url}/v1/messages"
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}]
    body = {"system": "Be brief.", "max_tokens": 12, "temperature": 0, "return_token_ids": True}
    first = await post_json(session, url, {**body, "messages": messages})
    messages += [{"role": "assistant", "content": first["content"]}, {"role": "user", "content": "Again, streamed."}]
    events, _ = await post_sse(session, url, {**body, "messages": messages, "max_tokens": 3})
    start = next(e.data for e in events if e.event == "message_start")
    ids = start["message"]["prompt_token_ids"]
    want = [*first["prompt_token_ids"], *first["token_ids"]]
    assert ids[: len(want)] == want and len(ids) > len(want)
    final = next(e.data for e in events if e.event == "message_delta")
    assert final["prompt_token_ids"] == ids


async def test_responses_turns_extend_the_exact_ids_tool_calls_included(
    server: RunningModelServer, session: aiohttp.ClientSession
) -> None:
    url = f"{server.url}/v1/responses"
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "What is the weather in Paris?"}]
    tools = [{"type": "function", **TOOLS[0]["function"]}]
    fmt = {"format": {"type": "json_schema", "name": "call", "schema": CALL_SCHEMA}}
    body = {"instructions": "Use the tools.", "tools": tools, "temperature": 0, "return_token_ids": True}
    first = await post_json(session, url, {**body, "input": items, "text": fmt, "max_output_tokens": 48})
    calls = [o for o in first["output"] if o["type"] == "function_call"]
    assert len(calls) == 1, first["output"]
    items += [*first["output"], {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "Sunny"}]
    second = await post_json(session, url, {**body, "input": items, "max_output_tokens": 8})
    want = [*first["prompt_token_ids"], *first["token_ids"]]
    assert second["prompt_token_ids"][: len(want)] == want
    items += [*second["output"], {"type": "message", "role": "user", "content": "Thanks."}]
    events, _ = await post_sse(session, url, {**body, "input": items, "max_output_tokens": 2})
    done = next(e.data for e in events if e.event in ("response.completed", "response.incomplete"))
    want = [*second["prompt_token_ids"], *second["token_ids"]]
    assert done["response"]["prompt_token_ids"][: len(want)] == want


async def test_evicted_exchanges_are_rendered_whole_and_off_means_off(
    session: aiohttp.ClientSession, tokenizer: Any
) -> None:
    small = await start(continuation_entries=1)
    try:
        a = [{"role": "user", "content": "Say yes."}]
        b = [{"role": "user", "content": "Say no."}]
        first_a = await chat(session, small, a, max_tokens=4)
        first_b = await chat(session, small, b, max_tokens=4)  # evicts a's exchange
        a += [first_a["choices"][0]["message"], {"role": "user", "content": "Why?"}]
        b += [first_b["choices"][0]["message"], {"role": "user", "content": "Why?"}]
        second_b = await chat(session, small, b, max_tokens=1)
        assert second_b["prompt_token_ids"][: len(kept(first_b))] == kept(first_b)
        assert (await chat(session, small, a, max_tokens=1))["prompt_token_ids"] == whole(tokenizer, {"messages": a})
        stats = await continuation(session, small)
        assert stats["entries"] == 1 and stats["evicted"] == 3 and stats["continued"] == 1
    finally:
        await small.close()
    off = await start(token_continuation=False)
    try:
        c = [{"role": "user", "content": "Say maybe."}]
        first_c = await chat(session, off, c, max_tokens=4)
        c += [first_c["choices"][0]["message"], {"role": "user", "content": "Why?"}]
        assert (await chat(session, off, c, max_tokens=1))["prompt_token_ids"] == whole(tokenizer, {"messages": c})
        stats = await continuation(session, off)
        assert not stats["enabled"] and stats["entries"] == 0
    finally:
        await off.close()
