"""Hermes Agent, unmodified, for real: a daemon process, the sclate-hermes sandbox,
the embedded model, capture, simulated days, its own cron job ticked on simulated time."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
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
# Daily at 13:00 UTC: it comes due between the two days, while nothing else is busy.
DAILY = {"schedule": "0 13 * * *", "prompt": "Say the word tick.", "name": "daily-tick"}


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
            run.agent.options.update({**FAST, "session_scope": "run", "cron_jobs": [DAILY]})
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
            # Hermes's own job came due on simulated time: 13:00 on day 1 (day 2 ends before its 13:00).
            assert len(ticks) == 1, [f.event_id for f in fires]
            (tick,) = ticks
            assert tick.due_time.ToDatetime().hour == 13 and tick.due_time.ToDatetime().minute == 0
        calls = await _calls(state, "local/hermes-mc")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    # In the order they were made (the store keeps the order records arrived in).
    agent = sorted(
        (c for c in calls if c["role"] == "agent" and c["method"] == "POST"), key=lambda c: c["timings"]["start_ns"]
    )
    memory = [c for c in calls if c["role"] == "memory"]
    assert agent and memory
    # Every call in tokens.
    assert all(c["prompt_token_ids"] and c["completions"] and c["completions"][0]["token_ids"] for c in calls)
    # The cron job's calls came through the memory listener, its prompt Hermes's cron prompt.
    assert any("Say the word tick." in json.dumps(c["request"]) for c in memory)
    assert not any("Say the word tick." in json.dumps(c["request"]) for c in agent)
    # The conversation continued across the day boundary: the last prompt carries day 1's first message.
    first_user = _user_texts(agent[0])[-1]
    last = agent[-1]
    assert first_user in _user_texts(last)[:-1]


async def _first_turn_ended(stub: pb_grpc.SclateStub, name: str) -> str:
    async for ev in stub.WatchRun(pb.WatchRunRequest(name=name)):
        if ev.WhichOneof("kind") == "turn" and ev.turn.phase == "ended":
            return str(ev.turn.session)
        if ev.WhichOneof("kind") == "state":
            assert ev.state.state in (pb.PENDING, pb.RUNNING), ev.state.reason
    raise AssertionError("the run ended before its first turn did")


async def _names(*names: str) -> AsyncIterator[str]:
    for name in names:
        yield name


async def _final(stub: pb_grpc.SclateStub, name: str) -> pb.Run:
    async for _ in stub.WatchRun(pb.WatchRunRequest(name=name)):
        pass
    run: pb.Run = await stub.GetRun(pb.GetRunRequest(name=name))
    return run


async def test_longmemeval_tiny_with_hermes_snapshot_and_branch(tmp_path: Path) -> None:
    """A snapshot after the first turn: the branch resumes the same Hermes conversation
    (session_scope=run: every haystack session and the question in one)."""
    state = tmp_path / "state"
    proc, ready = await start_daemon_process(state)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(name="longmemeval", scenario="tiny", subset=["lme_tiny_ku_2"]),
                agent=pb.AgentSpec(harness="hermes"),
            )
            run.agent.options.update({**FAST, "session_scope": "run"})
            src = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id="hermes-lme"))
            session = await _first_turn_ended(stub, src.name)
            snap = await stub.SaveSnapshot(pb.SaveSnapshotRequest(run=src.name, snapshot_id="after-first-turn"))
            branch = await stub.RestoreSnapshot(
                pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id="hermes-lme-branch")
            )
            done_src = await _final(stub, src.name)
            done_branch = await _final(stub, branch.name)
            errors = [
                (name, ev.turn.round_id, ev.turn.harness_error)
                async for name in _names(src.name, branch.name)
                async for ev in stub.WatchRun(pb.WatchRunRequest(name=name))
                if ev.WhichOneof("kind") == "turn" and ev.turn.harness_error
            ]
            for done in (done_src, done_branch):
                assert done.state == pb.SUCCEEDED, done.state_reason
                assert done.results.rounds_graded == done.results.rounds >= 1
                assert done.results.capture.calls_lost == 0 and done.results.capture.drain == "ok"
            src_calls = await _calls(state, "local/hermes-lme")
            branch_calls = await _calls(state, "local/hermes-lme-branch")
            # Deleting the runs removes their snapshot image (nothing left on the engine).
            for name in (branch.name, src.name):
                await stub.DeleteRun(pb.DeleteRunRequest(name=name))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    assert session
    for calls in (src_calls, branch_calls):
        assert calls and all(c["prompt_token_ids"] and c["completions"][0]["token_ids"] for c in calls)
    # Every turn reached the model (a turn Hermes failed before calling it would say why here).
    assert not errors, errors
    first_text = _user_texts(min(src_calls, key=lambda c: c["timings"]["start_ns"]))[-1]
    # The branch keeps the calls made before the snapshot (the same records); its own come after.
    kept = {c["call_id"] for c in src_calls}
    branch_own = sorted(
        (c for c in branch_calls if c["role"] == "agent" and c["call_id"] not in kept),
        key=lambda c: c["timings"]["start_ns"],
    )
    assert len(branch_own) < len(branch_calls)
    # The branch's first call of its own continues the Hermes session the snapshot
    # kept: the message from before the snapshot is in its history, not sent anew.
    assert first_text in _user_texts(branch_own[0])[:-1]
