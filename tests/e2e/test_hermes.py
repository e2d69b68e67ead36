"""Hermes Agent, unmodified, for real: a daemon process, the sclate-hermes sandbox,
the embedded model, capture, simulated days, its own cron job ticked on simulated time."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench import start_daemon_process
from sclated.store import Store

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.model]

FAST: dict[str, Any] = {"max_tokens": 24, "max_turns": 2}
HOURLY = {"schedule": "every 6h", "prompt": "Say the word tick.", "name": "six-hourly"}


def _user_texts(record: dict[str, Any]) -> list[str]:
    request = record.get("request") or {}
    out: list[str] = []
    for m in request.get("messages", []) if isinstance(request, dict) else []:
        if m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str):
            out.append(m["content"])
    return out


async def _calls(state: Path, run: str) -> list[dict[str, Any]]:
    store = Store(state / "sclated.db")
    await store.open()
    try:
        return await store.calls(run)
    finally:
        await store.close()


async def test_metaclaw_tiny_with_hermes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc, ready = await start_daemon_process(state)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(name="metaclaw", scenario="tiny", subset=["day01", "day02"]),
                agent=pb.AgentSpec(harness="hermes"),
            )
            run.agent.options.update({**FAST, "session_scope": "run", "cron_jobs": [HOURLY]})
            created = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id="hermes-mc"))
            events = [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name))]
            final = await stub.GetRun(pb.GetRunRequest(name=created.name))
            assert final.state == pb.SUCCEEDED, final.state_reason
            r = final.results
            s = r.scheduler
            assert s.events_fired == s.events_scheduled and s.in_order
            assert s.deliveries == s.deliveries_checked > 0
            assert s.out_of_order == 0 and s.early_deliveries == 0 and s.negative_delays == 0
            cap = r.capture
            assert cap.calls_lost == 0 and cap.calls_unleased == 0 and cap.drain == "ok", cap
            fires = [e.fire for e in events if e.WhichOneof("kind") == "fire"]
            ticks = [f for f in fires if f.event_id.startswith("hermes:cron:")]
            # Hermes's own job came due on simulated time (every 6 h over two days).
            assert len(ticks) >= 2, [f.event_id for f in fires]
        calls = await _calls(state, "hermes-mc")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    agent = [c for c in calls if c["role"] == "agent" and c["method"] == "POST"]
    memory = [c for c in calls if c["role"] == "memory"]
    assert agent and memory
    # Every call in tokens.
    assert all(c["prompt_token_ids"] and c["completions"] and c["completions"][0]["token_ids"] for c in calls)
    # The cron job's calls came through the memory listener, its prompt Hermes's cron prompt.
    assert any("Say the word tick." in json.dumps(c["request"]) for c in memory)
    assert not any("Say the word tick." in json.dumps(c["request"]) for c in agent)
    # The conversation continued across the day boundary: the last prompt carries day 1's first message.
    first_user = _user_texts(agent[0])[-1]
    last = max(agent, key=lambda c: c["timings"]["start_ns"])
    assert first_user in _user_texts(last)[:-1]
