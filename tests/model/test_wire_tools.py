"""Tool-call wire shapes of all three APIs, driven by a scripted model.

A 135M model does not call tools on demand, so a backend that replays fixed
tokens stands in for it; everything above the backend (templates, gate,
parser, SSE shapes) is the production code.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from sclated.model import (
    ChatRenderer,
    ContextInfo,
    Finish,
    PromptStats,
    SamplingParams,
    ServerContext,
    TokenStep,
    build_app,
)

from .helpers import post_json, post_sse
from .test_units import SMOL_TEMPLATE

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
PIECES = ["Let", " me", " check", ".", "\n", *[CALL[i : i + 7] for i in range(0, len(CALL), 7)]]


class ScriptedBackend:
    """Emits PIECES one token each (ids 100, 101, ...) then an end-of-turn token."""

    n_ctx = 4096

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.context = ContextInfo(self.n_ctx, self.n_ctx)
        self.stats = PromptStats()

    async def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]:
        self.prompts.append(text)
        return [ord(c) % 50 for c in text]

    def check_prompt(self, prompt_ids: Sequence[int], field: str = "prompt") -> None:
        assert prompt_ids

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[TokenStep | Finish, None]:
        for i, piece in enumerate(PIECES):
            yield TokenStep(100 + i, piece.encode(), -0.5, (), piece, False)
        yield TokenStep(2, b"<|im_end|>", -0.1, (), "", True)
        yield Finish("stop")


TOOLS_OPENAI = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, ScriptedBackend]]:
    backend = ScriptedBackend()
    app: web.Application = build_app(ServerContext(backend, ChatRenderer(SMOL_TEMPLATE), "smol"))
    test_server = TestServer(app)
    await test_server.start_server()
    try:
        yield str(test_server.make_url("")).rstrip("/"), backend
    finally:
        await test_server.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def test_chat_tool_calls(server: tuple[str, ScriptedBackend],
                               session: aiohttp.ClientSession) -> None:
    url, backend = server
    body = {"messages": [{"role": "user", "content": "weather in Paris?"}], "tools": TOOLS_OPENAI,
            "return_token_ids": True}
    out = await post_json(session, f"{url}/v1/chat/completions", body)
    assert "<tools>" in backend.prompts[-1] and '"get_weather"' in backend.prompts[-1]
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    # Text before the call is kept verbatim, so streamed and whole answers agree.
    assert choice["message"]["content"] == "Let me check.\n"
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert choice["token_ids"] == [*range(100, 100 + len(PIECES)), 2]

    events, _ = await post_sse(session, f"{url}/v1/chat/completions", body)
    chunks = [e.data for e in events if e.data != "[DONE]"]
    assert events[-1].data == "[DONE]"
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert content == "Let me check.\n"  # streamed text keeps its newline; the call is held back
    tool_deltas = [d for c in chunks if c["choices"]
                   for d in c["choices"][0]["delta"].get("tool_calls", [])]
    assert len(tool_deltas) == 1
    assert tool_deltas[0]["index"] == 0 and tool_deltas[0]["function"]["name"] == "get_weather"
    assert json.loads(tool_deltas[0]["function"]["arguments"]) == {"city": "Paris"}
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert reasons[-1] == "tool_calls"
    ids = [t for c in chunks if c["choices"] for t in c["choices"][0]["token_ids"]]
    assert ids == choice["token_ids"]


async def test_tool_choice_none_leaves_the_text_alone(server: tuple[str, ScriptedBackend],
                                                       session: aiohttp.ClientSession) -> None:
    url, backend = server
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS_OPENAI,
            "tool_choice": "none"}
    out = await post_json(session, f"{url}/v1/chat/completions", body)
    assert "<tools>" not in backend.prompts[-1]
    assert out["choices"][0]["message"]["content"] == "Let me check.\n" + CALL
    assert "tool_calls" not in out["choices"][0]["message"]


async def test_responses_function_call_items(server: tuple[str, ScriptedBackend],
                                             session: aiohttp.ClientSession) -> None:
    url, backend = server
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
             {"type": "web_search"}]
    body = {"input": [
        {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
        {"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_9", "output": "rainy"},
    ], "instructions": "Be brief.", "tools": tools}
    out = await post_json(session, f"{url}/v1/responses", body)
    assert "<tool_response>\nrainy\n</tool_response>" in backend.prompts[-1]
    assert out["object"] == "response" and out["status"] == "completed"
    message, call = out["output"]
    assert message["type"] == "message"
    assert message["content"][0] == {"type": "output_text", "text": "Let me check.\n",
                                     "annotations": []}
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert call["call_id"].startswith("call_") and call["id"].startswith("fc_")
    assert json.loads(call["arguments"]) == {"city": "Paris"}

    events, _ = await post_sse(session, f"{url}/v1/responses", body)
    kinds = [e.event for e in events]
    assert all(e.event == e.data["type"] for e in events)
    assert [e.data["sequence_number"] for e in events] == list(range(len(events)))
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert kinds.index("response.function_call_arguments.done") > kinds.index(
        "response.output_text.done")
    added = [e.data["item"]["type"] for e in events if e.event == "response.output_item.added"]
    assert added == ["message", "function_call"]
    final = events[-1].data["response"]
    assert [o["type"] for o in final["output"]] == ["message", "function_call"]
    assert final["usage"]["output_tokens"] == len(PIECES) + 1


async def test_anthropic_tool_use_blocks(server: tuple[str, ScriptedBackend],
                                         session: aiohttp.ClientSession) -> None:
    url, backend = server
    tools = [{"name": "get_weather", "description": "w",
              "input_schema": {"type": "object", "properties": {}}}]
    body = {"max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}], "tools": tools,
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                     "input": {"city": "Rome"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
            ]}
    out = await post_json(session, f"{url}/v1/messages", body)
    prompt = backend.prompts[-1]
    assert '{"name": "get_weather", "arguments": {"city": "Rome"}}' in prompt
    assert "<tool_response>\nsunny\n</tool_response>" in prompt
    assert out["type"] == "message" and out["stop_reason"] == "tool_use"
    text, tool = out["content"]
    assert text == {"type": "text", "text": "Let me check.\n"}
    assert tool["type"] == "tool_use" and tool["id"].startswith("toolu_")
    assert tool["name"] == "get_weather" and tool["input"] == {"city": "Paris"}

    events, _ = await post_sse(session, f"{url}/v1/messages", body)
    kinds = [e.event for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e.data for e in events if e.event == "content_block_start"]
    assert [s["content_block"]["type"] for s in starts] == ["text", "tool_use"]
    assert starts[1]["content_block"]["input"] == {} and starts[1]["index"] == 1
    json_deltas = [e.data["delta"]["partial_json"] for e in events
                   if e.event == "content_block_delta" and e.data["index"] == 1]
    assert json.loads("".join(json_deltas)) == {"city": "Paris"}
    assert [e.data["index"] for e in events if e.event == "content_block_stop"] == [0, 1]
    delta = next(e.data for e in events if e.event == "message_delta")
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"]["output_tokens"] == len(PIECES) + 1


async def test_errors_in_each_api_shape(server: tuple[str, ScriptedBackend],
                                        session: aiohttp.ClientSession) -> None:
    url, _ = server
    out = await post_json(session, f"{url}/v1/chat/completions", {"messages": [
        {"role": "user", "content": "x"}], "tool_choice": {"type": "function",
                                                           "function": {"name": "nope"}}}, 400)
    assert out["error"]["param"] == "tool_choice"
    out = await post_json(session, f"{url}/v1/messages",
                          {"max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]}, 400)
    assert out["type"] == "error" and out["error"]["type"] == "invalid_request_error"
    assert "messages[0].role" in out["error"]["message"]
    out = await post_json(session, f"{url}/v1/responses",
                          {"input": "x", "previous_response_id": "resp_1"}, 400)
    assert out["error"]["param"] == "previous_response_id"
    async with session.post(f"{url}/v1/chat/completions", data=b"{nope") as response:
        assert response.status == 400
        assert (await response.json())["error"]["param"] == "body"
    async with session.get(f"{url}/v1/nothing") as response:
        assert response.status == 404
        assert (await response.json())["error"]["type"] == "not_found_error"
    async with session.get(f"{url}/v1/chat/completions") as response:
        assert response.status == 405
