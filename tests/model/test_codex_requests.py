"""What Codex 0.171.0 really sends to ``/v1/responses``, served by the real embedded model.

The fixtures (``fixtures/codex/``) are request bodies recorded from the unmodified
Codex CLI: ``first_turn`` and ``resumed_thread`` through a real sclate run (the
capture store's records; the capture's own token-id fields taken off),
``default_tools`` from Codex with its default tools (a ``namespace`` of subagent
tools and the hosted ``web_search``, which sclate's harness turns off). Codex sends
the whole thread every time (``store: false``, no ``previous_response_id``), with
``include: ["reasoning.encrypted_content"]``, ``reasoning: {}``, a
``prompt_cache_key`` (its thread id), ``client_metadata`` and developer messages.
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
from sclated.model._common import Fields
from sclated.model._responses import parse_responses_input

from .helpers import post_sse

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "codex"
NAMES = ("first_turn", "resumed_thread", "default_tools")


def _fixture(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return body


@pytest.mark.parametrize("name", NAMES)
def test_codex_requests_parse(name: str) -> None:
    body = _fixture(name)
    assert body["store"] is False and "previous_response_id" not in body and body["stream"] is True
    messages = parse_responses_input(Fields(body))
    # Codex's instructions arrive as developer messages (system here), then the thread.
    assert messages[0].role == "system" and "Codex" in messages[0].content
    assert messages[-1].role == "user"


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
async def test_codex_requests_stream_what_codex_reads(server: RunningModelServer, name: str) -> None:
    # Codex sets no output bound; the test does, to stay short on 2 cores. The rest is as recorded.
    body = {**_fixture(name), "max_output_tokens": 8}
    async with aiohttp.ClientSession() as session:
        events, _ = await post_sse(session, f"{server.url}/v1/responses", body)
    kinds = [e.data["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete"), kinds
    assert [e.data["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1].data["response"]
    # Codex reads the usage of the final event, and each item from its output_item.done.
    assert final["usage"]["input_tokens"] > 1000 and final["usage"]["output_tokens"] <= 8
    done = [e.data["item"] for e in events if e.data["type"] == "response.output_item.done"]
    assert done and done == final["output"]
