"""The reference harness with a memory system: recall before a turn, store after it.

A test double stands in for Hindsight's REST API here (the real server runs in
the end-to-end tests); the agent process itself is real.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from adapters import ProxyEndpoints
from adapters.memory import HINDSIGHT, MEM0, MEMORY_SYSTEMS, memory_environment, memory_image, memory_system
from adapters.reference_harness import DECLARATION, ReferenceHarness, ReferenceHarnessAdapter, SubprocessTransport
from sclated.errors import InvalidArgument
from sclated.scheduler import DeliverPrompt
from tests.adapters.test_reference_harness import FakeOpenAIServer, _env, answer


class FakeHindsight:
    """Test double for Hindsight's REST API: recall returns ``memories``, retain records items."""

    def __init__(self) -> None:
        self.memories: list[str] = []
        self.retained: list[dict[str, Any]] = []
        self.recalls: list[dict[str, Any]] = []
        self.fail_with: int | None = None
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if double.fail_with is not None:
                    self.send_response(double.fail_with)
                    self.end_headers()
                    return
                if self.path == "/v1/default/banks/agent/memories/recall":
                    double.recalls.append(body)
                    payload: Any = {"results": [{"id": str(i), "text": t} for i, t in enumerate(double.memories)]}
                elif self.path == "/v1/default/banks/agent/memories":
                    double.retained.extend(body["items"])
                    payload = {"success": True}
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def model() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def hindsight() -> Iterator[FakeHindsight]:
    double = FakeHindsight()
    yield double
    double.close()


@pytest.fixture
async def adapter(
    model: FakeOpenAIServer, hindsight: FakeHindsight, tmp_path: Path
) -> AsyncIterator[ReferenceHarnessAdapter]:
    ws, mem = tmp_path / "ws", tmp_path / "mem"
    ws.mkdir()
    mem.mkdir()
    env = _env(model, (ws, mem), AGENT_MEMORY_SYSTEM="hindsight", AGENT_HINDSIGHT_URL=hindsight.url)
    transport = await SubprocessTransport.start(env=env)
    try:
        yield ReferenceHarnessAdapter(transport, turn_timeout_s=60)
    finally:
        assert await transport.close() == 0


async def test_recalled_memories_reach_the_prompt_and_the_exchange_is_stored(
    adapter: ReferenceHarnessAdapter, model: FakeOpenAIServer, hindsight: FakeHindsight
) -> None:
    hindsight.memories = ["The user's cat is named Miso."]
    model.script = [answer("Your cat is Miso.")]
    result = await adapter.deliver(DeliverPrompt("What is my cat's name?", session="s1", round_id="q1"))
    assert result.reply == "Your cat is Miso."
    assert hindsight.recalls[0]["query"] == "What is my cat's name?"
    # Recalled into the turn's message (the session's system prompt stays as it was).
    asked = model.requests[0]["messages"][-1]["content"]
    assert "What you remember about this" in asked and "Miso" in asked and asked.endswith("What is my cat's name?")
    assert "Miso" not in model.requests[0]["messages"][0]["content"]
    (item,) = hindsight.retained
    assert item["content"] == "user: What is my cat's name?\nassistant: Your cat is Miso."
    assert item["context"] == "conversation s1" and item["timestamp"]
    report = result.details["memory"]
    assert report["system"] == "hindsight" and report["recalled"] == ["The user's cat is named Miso."]
    assert report["stored"] == 1 and report["store_ms"] >= 0 and "store_error" not in report


async def test_a_failing_memory_system_is_reported_and_the_turn_goes_on(
    adapter: ReferenceHarnessAdapter, model: FakeOpenAIServer, hindsight: FakeHindsight
) -> None:
    hindsight.fail_with = 500
    model.script = [answer("Hello.")]
    result = await adapter.deliver(DeliverPrompt("hi", session="s1", round_id="r1"))
    assert result.reply == "Hello."
    report = result.details["memory"]
    assert "HTTP 500" in report["recall_error"] and "HTTP 500" in report["store_error"]
    assert all("What you remember" not in m["content"] for m in model.requests[0]["messages"])


def test_a_run_names_a_memory_system_the_harness_offers() -> None:
    offered = DECLARATION.memory_systems
    assert offered[0] == "native" and {"mem0", "hindsight"} <= set(offered)
    assert memory_system("", offered, "reference") is None
    assert memory_system("mem0", offered, "reference") is MEM0
    with pytest.raises(InvalidArgument, match="does not run with memory system 'letta'") as e:
        memory_system("letta", offered, "reference")
    assert e.value.field == "run.agent.memory"
    with pytest.raises(InvalidArgument, match="it offers: native"):
        memory_system("mem0", ("native",), "codex")


def test_a_memory_system_is_reached_through_the_memory_listener() -> None:
    endpoints = ProxyEndpoints(
        agent="http://127.0.0.1:4001",
        memory="http://127.0.0.1:4002",
        aux="http://127.0.0.1:4003",
        api_key="sk-run",
        memory_system="http://127.0.0.1:4004",
        model="tiny",
    )
    env = memory_environment(HINDSIGHT, endpoints)
    assert (
        env["SCLATE_MEMORY_SYSTEM_BASE_URL"] == "http://127.0.0.1:4004/v1"
        and env["SCLATE_MEMORY_SYSTEM"] == "hindsight"
    )
    harness_env = ReferenceHarness({}, MEM0).environment(endpoints)
    assert harness_env["AGENT_MEMORY_SYSTEM"] == "mem0"
    assert memory_environment(MEM0, endpoints)["SCLATE_MEMORY_SYSTEM_BASE_URL"] == "http://127.0.0.1:4004/v1"
    assert harness_env["OPENAI_BASE_URL"] == "http://127.0.0.1:4001/v1"  # the agent's own calls stay the agent's
    assert "AGENT_MEMORY_SYSTEM" not in ReferenceHarness({}).environment(endpoints)
    assert memory_image("sclate-reference-agent", MEM0) == "sclate-reference-agent-mem0"
    assert set(MEMORY_SYSTEMS) == {"mem0", "hindsight"}


def test_hindsight_consolidates_nightly_on_the_scheduler_and_mem0_has_nothing_to_schedule() -> None:
    from adapters.memory import memory_routines

    assert memory_routines(MEM0) == [] and memory_routines(None) == []
    (source,) = memory_routines(HINDSIGHT)
    assert source.name == "hindsight:consolidate"
    env = memory_environment(HINDSIGHT, ProxyEndpoints("a", "m", "x", "k", "tiny"), embedded_model=True)
    # The embedded model cannot extract facts for Hindsight: it retains chunks instead.
    assert env["HINDSIGHT_API_RETAIN_EXTRACTION_MODE"] == "chunks"
    assert "HINDSIGHT_API_RETAIN_EXTRACTION_MODE" not in memory_environment(
        HINDSIGHT, ProxyEndpoints("a", "m", "x", "k", "tiny")
    )
