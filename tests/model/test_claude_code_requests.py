"""What Claude Code 2.1.332 really sends to ``/v1/messages``, served by the real embedded model.

The fixtures (``fixtures/claude_code/``) are request bodies recorded from the
unmodified Claude Code through a real sclate run (the capture store's records;
the capture's own token-id fields taken off): ``first_turn`` (a session's first
message), ``continued_turn`` (its next call after the output bound cut an answer)
and ``resumed_next_day`` (the session resumed a simulated day later, with its
"The date has changed" reminder). Claude Code sends its system prompt as text
blocks with ``cache_control``, its environment and date as a ``system``-role
message inside ``messages``, its tools with a ``DeferredToolPlaceholder``
(``defer_loading``), ``thinking: {"type": "adaptive"}``, ``context_management``,
``output_config`` and ``metadata``, streamed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from sclated.model import ModelServerConfig, RunningModelServer, start_model_server
from sclated.model._anthropic import parse_anthropic_messages
from sclated.model._common import Fields

from .helpers import post_sse

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "claude_code"
NAMES = ("first_turn", "continued_turn", "resumed_next_day")


def _fixture(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return body


@pytest.mark.parametrize("name", NAMES)
def test_claude_code_requests_parse(name: str) -> None:
    body = _fixture(name)
    assert body["stream"] is True and any("cache_control" in b for b in body["system"])
    assert any(m["role"] == "system" for m in body["messages"])
    messages = parse_anthropic_messages(Fields(body))
    # The system blocks first, then the conversation with its system-role message kept in place.
    assert messages[0].role == "system" and "Claude" in messages[0].content
    inner = [m for m in messages[1:] if m.role == "system"]
    assert inner and "Today's date is" in inner[0].content
    # Its reminders may come after the user's message: the last turn is still the user's.
    assert [m for m in messages if m.role != "system"][-1].role == "user"
    if name == "resumed_next_day":
        assert any("The date has changed" in m.content for m in messages)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[RunningModelServer]:
    running = await start_model_server(ModelServerConfig(port=0, n_ctx=16384, n_threads=2))
    try:
        yield running
    finally:
        await running.close()


@pytest.mark.model
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("name", NAMES)
async def test_claude_code_requests_stream_what_claude_code_reads(server: RunningModelServer, name: str) -> None:
    # A smaller output bound than recorded (256), to stay short on 2 cores. The rest is as recorded.
    body = {**_fixture(name), "max_tokens": 8}
    async with aiohttp.ClientSession() as session:
        events, _ = await post_sse(session, f"{server.url}/v1/messages?beta=true", body)
    kinds = [e.data["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    assert "content_block_start" in kinds and "message_delta" in kinds
    delta = next(e.data for e in events if e.data["type"] == "message_delta")
    # Claude Code reads the stop reason and usage from message_delta.
    assert delta["delta"]["stop_reason"] in ("end_turn", "max_tokens", "tool_use")
    start = events[0].data["message"]
    assert start["usage"]["input_tokens"] > 3000
    assert delta["usage"]["output_tokens"] <= 8
