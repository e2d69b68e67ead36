"""The server against the real SmolLM2-135M GGUF: shapes, token data, streaming.

Answers are not judged; plumbing is. Generations are kept short for 2 cores.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from sclated.model import (
    ModelServerConfig,
    RunningModelServer,
    default_gguf_path,
    start_model_server,
)

from .helpers import post_json, post_sse

llama_cpp = pytest.importorskip("llama_cpp")

pytestmark = [pytest.mark.model, pytest.mark.asyncio(loop_scope="module")]

SYSTEM = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
          "Face<|im_end|>\n")
QUESTION = [{"role": "user", "content": "Name three colours."}]
QUESTION_PROMPT = (f"{SYSTEM}<|im_start|>user\nName three colours.<|im_end|>\n"
                   "<|im_start|>assistant\n")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[RunningModelServer]:
    running = await start_model_server(ModelServerConfig(port=0, n_ctx=2048, n_threads=2))
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
    """An independent vocab-only load: what 'tokenizing the prompt' means."""
    return llama_cpp.Llama(str(default_gguf_path()), vocab_only=True, verbose=False)


def counts(usage: dict[str, Any]) -> tuple[int, int, int]:
    """The token counts of a usage object (what is cached depends on the call before)."""
    return usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]


def chat_body(**extra: Any) -> dict[str, Any]:
    return {"model": "smol", "messages": QUESTION, "max_tokens": 12, "temperature": 0, **extra}


async def test_health_and_models(server: RunningModelServer,
                                 session: aiohttp.ClientSession) -> None:
    assert server.url == f"http://127.0.0.1:{server.port}" and server.port > 0
    async with session.get(f"{server.url}/health") as r:
        assert r.status == 200 and (await r.json())["status"] == "ok"
    async with session.get(f"{server.url}/v1/models") as r:
        models = await r.json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "SmolLM2-135M-Instruct.Q4_1"


async def test_chat_token_data_matches_tokenizer(server: RunningModelServer,
                                                 session: aiohttp.ClientSession,
                                                 tokenizer: Any) -> None:
    out = await post_json(session, f"{server.url}/v1/chat/completions",
                          chat_body(logprobs=True, top_logprobs=3))
    assert out["object"] == "chat.completion" and out["model"] == "smol"
    choice = out["choices"][0]
    ids, content = choice["token_ids"], choice["logprobs"]["content"]
    assert len(ids) == out["usage"]["completion_tokens"] == len(content) > 0
    expected_prompt = tokenizer.tokenize(QUESTION_PROMPT.encode(), add_bos=False, special=True)
    assert out["prompt_token_ids"] == expected_prompt
    assert out["usage"]["prompt_tokens"] == len(expected_prompt)
    assert out["usage"]["total_tokens"] == len(expected_prompt) + len(ids)
    eos = tokenizer.token_eos()
    text_ids = [i for i in ids if i != eos]
    assert tokenizer.detokenize(text_ids).decode() == choice["message"]["content"]
    for entry, tid in zip(content, ids, strict=True):
        assert entry["bytes"] == list(tokenizer.detokenize([tid], special=True))
        assert entry["logprob"] <= 0
        tops = entry["top_logprobs"]
        assert len(tops) == 3
        assert [t["logprob"] for t in tops] == sorted((t["logprob"] for t in tops), reverse=True)
        # Greedy decoding: the chosen token is the model's most likely one.
        assert tops[0]["token"] == entry["token"] and tops[0]["logprob"] == entry["logprob"]
    assert choice["finish_reason"] in ("stop", "length")
    if choice["finish_reason"] == "length":
        assert len(ids) == 12


async def test_token_fields_only_on_request(server: RunningModelServer,
                                            session: aiohttp.ClientSession) -> None:
    out = await post_json(session, f"{server.url}/v1/chat/completions", chat_body(max_tokens=2))
    assert "prompt_token_ids" not in out and "token_ids" not in out["choices"][0]
    assert out["choices"][0]["logprobs"] is None
    assert out["usage"]["completion_tokens"] == 2
    out = await post_json(session, f"{server.url}/v1/chat/completions",
                          chat_body(max_tokens=2, return_token_ids=True))
    assert len(out["choices"][0]["token_ids"]) == 2 and out["prompt_token_ids"]
    assert out["choices"][0]["logprobs"] is None


async def test_chat_stream_equals_whole_and_chunks_carry_tokens(
        server: RunningModelServer, session: aiohttp.ClientSession) -> None:
    body = chat_body(logprobs=True, max_tokens=10, ignore_eos=True)
    whole = await post_json(session, f"{server.url}/v1/chat/completions", body)
    events, _ = await post_sse(session, f"{server.url}/v1/chat/completions", body)
    assert events[-1].data == "[DONE]"
    chunks = [e.data for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    with_choice = [c["choices"][0] for c in chunks if c["choices"]]
    ids = [t for c in with_choice for t in c["token_ids"]]
    assert ids == whole["choices"][0]["token_ids"]
    assert len(ids) == 10
    for c in with_choice:
        n_logprobs = len(c["logprobs"]["content"]) if c["logprobs"] else 0
        assert n_logprobs == len(c["token_ids"])
    text = "".join(c["delta"].get("content") or "" for c in with_choice)
    assert text == whole["choices"][0]["message"]["content"]
    assert with_choice[-1]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == []
    assert counts(chunks[-1]["usage"]) == counts(whole["usage"])


async def test_seeded_sampling_is_reproducible_across_modes(
        server: RunningModelServer, session: aiohttp.ClientSession) -> None:
    body = chat_body(temperature=0.9, top_p=0.95, seed=1234, max_tokens=8, ignore_eos=True,
                     return_token_ids=True)
    a = await post_json(session, f"{server.url}/v1/chat/completions", body)
    events, _ = await post_sse(session, f"{server.url}/v1/chat/completions", body)
    streamed = [t for e in events[:-1] if e.data["choices"]
                for t in e.data["choices"][0]["token_ids"]]
    assert streamed == a["choices"][0]["token_ids"]
    others = [await post_json(session, f"{server.url}/v1/chat/completions", {**body, "seed": s})
              for s in (1, 2, 3)]
    # Different seeds must be able to change the sample (any of three differing).
    assert any(o["choices"][0]["token_ids"] != a["choices"][0]["token_ids"] for o in others)


async def test_a_request_without_a_seed_gets_the_same_sample_for_the_same_prompt(
        server: RunningModelServer, session: aiohttp.ClientSession) -> None:
    """No seed: it comes from the prompt, so a replayed run gets the same answers, and a
    different prompt another sample."""
    body = chat_body(temperature=0.9, top_p=0.95, max_tokens=8, ignore_eos=True, return_token_ids=True)
    first = await post_json(session, f"{server.url}/v1/chat/completions", body)
    again = await post_json(session, f"{server.url}/v1/chat/completions", body)
    assert again["choices"][0]["token_ids"] == first["choices"][0]["token_ids"]
    seeded = [await post_json(session, f"{server.url}/v1/chat/completions", {**body, "seed": s})
              for s in (1, 2, 3)]
    # A request's own seed still picks its sample.
    assert any(o["choices"][0]["token_ids"] != first["choices"][0]["token_ids"] for o in seeded)


async def test_stream_arrives_incrementally(server: RunningModelServer,
                                            session: aiohttp.ClientSession) -> None:
    body = chat_body(max_tokens=48, ignore_eos=True, return_token_ids=True)
    events, start = await post_sse(session, f"{server.url}/v1/chat/completions", body)
    token_events = [e for e in events if e.data != "[DONE]" and e.data["choices"]
                    and e.data["choices"][0]["token_ids"]]
    assert len(token_events) == 48
    total = events[-1].at - start
    spread = token_events[-1].at - token_events[0].at
    # Generated everything first and then replayed, the spread would be ~0.
    assert spread > 0.3 * total, (spread, total)
    assert spread > 0.02


async def test_client_hangup_frees_the_model(server: RunningModelServer,
                                             session: aiohttp.ClientSession) -> None:
    body = {**chat_body(max_tokens=1500, ignore_eos=True), "stream": True}
    async with session.post(f"{server.url}/v1/chat/completions", json=body) as response:
        await response.content.readline()
    started = time.monotonic()
    out = await asyncio.wait_for(
        post_json(session, f"{server.url}/v1/chat/completions", chat_body(max_tokens=2)), 30)
    assert out["usage"]["completion_tokens"] == 2
    # 1500 tokens would take several seconds; the abandoned run stopped early.
    assert time.monotonic() - started < 5


async def test_completions_with_text_and_token_prompts(server: RunningModelServer,
                                                       session: aiohttp.ClientSession,
                                                       tokenizer: Any) -> None:
    body = {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0,
            "logprobs": 2}
    out = await post_json(session, f"{server.url}/v1/completions", body)
    assert out["object"] == "text_completion"
    choice = out["choices"][0]
    lp = choice["logprobs"]
    assert len(choice["token_ids"]) == out["usage"]["completion_tokens"] == len(lp["tokens"])
    assert len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"])
    assert all(len(t) <= 2 for t in lp["top_logprobs"])
    expected = tokenizer.tokenize(b"The capital of France is", add_bos=False, special=True)
    assert out["prompt_token_ids"] == expected == choice["prompt_token_ids"]

    by_ids = await post_json(session, f"{server.url}/v1/completions",
                             {**body, "prompt": expected, "return_token_ids": True})
    assert by_ids["choices"][0]["token_ids"] == choice["token_ids"]

    events, _ = await post_sse(session, f"{server.url}/v1/completions", body)
    assert events[-1].data == "[DONE]"
    chunks = [e.data for e in events[:-1] if e.data["choices"]]
    assert chunks[0]["prompt_token_ids"] == expected
    assert [t for c in chunks for t in c["choices"][0]["token_ids"]] == choice["token_ids"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == choice["text"]
    assert counts(events[-2].data["usage"]) == counts(out["usage"])


async def test_stop_sequences_cut_the_text(server: RunningModelServer,
                                           session: aiohttp.ClientSession) -> None:
    base = {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 12, "temperature": 0}
    free = await post_json(session, f"{server.url}/v1/completions", base)
    text = free["choices"][0]["text"]
    assert len(text) > 3
    stop = text[2:4]
    out = await post_json(session, f"{server.url}/v1/completions", {**base, "stop": [stop]})
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["choices"][0]["text"] == text[: text.index(stop)]


async def test_responses_api(server: RunningModelServer, session: aiohttp.ClientSession,
                             tokenizer: Any) -> None:
    body = {"model": "codex-model", "input": "Name three colours.", "max_output_tokens": 6,
            "temperature": 0, "top_logprobs": 1, "ignore_eos": True}
    out = await post_json(session, f"{server.url}/v1/responses", body)
    assert out["object"] == "response" and out["model"] == "codex-model"
    assert out["status"] == "incomplete"
    assert out["incomplete_details"] == {"reason": "max_output_tokens"}
    (message,) = out["output"]
    part = message["content"][0]
    assert message["type"] == "message" and part["type"] == "output_text"
    assert out["usage"]["output_tokens"] == len(out["token_ids"]) == len(part["logprobs"]) == 6
    assert out["prompt_token_ids"] == tokenizer.tokenize(QUESTION_PROMPT.encode(), add_bos=False,
                                                         special=True)

    events, _ = await post_sse(session, f"{server.url}/v1/responses", body)
    kinds = [e.event for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.incomplete"]
    deltas = [e.data for e in events if e.event == "response.output_text.delta"]
    assert "".join(d["delta"] for d in deltas) == part["text"]
    assert [t for d in deltas for t in d["token_ids"]] == out["token_ids"]
    assert events[0].data["response"]["prompt_token_ids"] == out["prompt_token_ids"]


async def test_anthropic_messages(server: RunningModelServer,
                                  session: aiohttp.ClientSession) -> None:
    body = {"model": "claude-x", "max_tokens": 6, "temperature": 0, "ignore_eos": True,
            "system": "Be brief.", "messages": [{"role": "user", "content": "Say hi."}],
            "return_token_ids": True}
    out = await post_json(session, f"{server.url}/v1/messages", body)
    assert out["type"] == "message" and out["role"] == "assistant"
    assert out["stop_reason"] == "max_tokens" and out["model"] == "claude-x"
    assert out["content"][0]["type"] == "text" and out["content"][0]["text"]
    assert out["usage"]["output_tokens"] == len(out["token_ids"]) == 6
    assert out["usage"]["input_tokens"] == len(out["prompt_token_ids"])

    events, _ = await post_sse(session, f"{server.url}/v1/messages", body)
    kinds = [e.event for e in events]
    assert kinds[0] == "message_start" and kinds[1] == "ping"
    assert kinds[2] == "content_block_start"
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[3:-3]) == {"content_block_delta"}
    text = "".join(e.data["delta"]["text"] for e in events if e.event == "content_block_delta")
    assert text == out["content"][0]["text"]
    final = events[-2].data
    assert final["delta"]["stop_reason"] == "max_tokens"
    assert final["token_ids"] == out["token_ids"]
    async with session.post(f"{server.url}/v1/messages/count_tokens", json=body) as r:
        assert (await r.json())["input_tokens"] == out["usage"]["input_tokens"]


async def test_tools_reach_the_real_prompt(server: RunningModelServer,
                                           session: aiohttp.ClientSession,
                                           tokenizer: Any) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather",
                                               "parameters": {"type": "object"}}}]
    out = await post_json(session, f"{server.url}/v1/chat/completions",
                          chat_body(tools=tools, max_tokens=24, return_token_ids=True))
    prompt = tokenizer.detokenize(out["prompt_token_ids"], special=True).decode()
    assert "<tools>" in prompt and '"name": "get_weather"' in prompt
    message = out["choices"][0]["message"]
    # Whatever the small model says, the answer is well formed one way or the other.
    if out["choices"][0]["finish_reason"] == "tool_calls":
        assert message["tool_calls"][0]["function"]["name"] == "get_weather"
    else:
        assert "tool_calls" not in message and isinstance(message["content"], str)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/chat/completions", {"max_tokens": 4}, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]},
         "messages[0].content"),
        ("/v1/chat/completions", {"messages": QUESTION, "max_tokens": "4"}, "max_tokens"),
        ("/v1/chat/completions", {"messages": QUESTION, "temperature": 5}, "temperature"),
        ("/v1/chat/completions", {"messages": QUESTION, "n": 2}, "n"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 3000}]},
         "messages"),
        ("/v1/completions", {"prompt": [1, "x"]}, "prompt"),
        ("/v1/completions", {"prompt": [10**9]}, "prompt"),
        ("/v1/responses", {"input": 5}, "input"),
        ("/v1/responses", {"input": [{"type": "image_generation_call"}]}, "input[0].type"),
    ],
)
async def test_bad_input_is_400_naming_the_field(server: RunningModelServer,
                                                 session: aiohttp.ClientSession, path: str,
                                                 body: dict[str, Any], field: str) -> None:
    out = await post_json(session, f"{server.url}{path}", body, 400)
    assert out["error"]["param"] == field, out
    assert out["error"]["type"] == "invalid_request_error"


async def test_anthropic_prompt_too_long(server: RunningModelServer,
                                         session: aiohttp.ClientSession) -> None:
    body = {"max_tokens": 4, "messages": [{"role": "user", "content": "word " * 3000}]}
    out = await post_json(session, f"{server.url}/v1/messages", body, 400)
    assert out["error"]["type"] == "invalid_request_error"
    assert out["error"]["message"].startswith("prompt is too long: ")
    # The limit in OpenAI's words (clients parse it), and the field that outgrew it.
    assert "maximum context length is 2048 tokens" in out["error"]["message"]
    assert "'messages' resulted in" in out["error"]["message"]
