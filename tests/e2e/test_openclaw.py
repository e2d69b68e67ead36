"""OpenClaw, unmodified, for real: a daemon process, the sclate-openclaw sandbox with
its gateway, the embedded model (a context long enough for OpenClaw's prompts),
capture, simulated days, MetaClaw's seeded sessions, its own cron job run on
simulated time, and a snapshot branched with its sessions intact."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from adapters import ScenarioConfig
from adapters.metaclaw import MetaClawBenchmark
from sclated.bench import start_daemon_process
from sclated.store import Store

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.model]

# OpenClaw's first prompt is ~9k tokens (its system prompt and the "coding" tools).
N_CTX = ("--model-n-ctx", "16384")
FAST: dict[str, Any] = {"max_tokens": 24}
# Daily at 13:00 UTC: it comes due between the two days, while nothing else is busy.
DAILY = {"schedule": "0 13 * * *", "message": "Say the word tick.", "name": "daily-tick"}


def _texts(record: dict[str, Any]) -> list[tuple[str, str]]:
    request = record.get("request") or {}
    out: list[tuple[str, str]] = []
    for m in request.get("messages", []) if isinstance(request, dict) else []:
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if m.get("role") in ("user", "assistant") and isinstance(content, str):
            out.append((m["role"], content))
    return out


async def _calls(state: Path, run: str) -> list[dict[str, Any]]:
    store = Store(state / "sclated.db")
    await store.open()
    try:
        calls = await store.calls(run)
    finally:
        await store.close()
    # In the order they were made (the store keeps the order records arrived in).
    return sorted(calls, key=lambda c: c["timings"]["start_ns"])


async def test_metaclaw_tiny_with_openclaw_upstream_protocol(tmp_path: Path) -> None:
    scenario = MetaClawBenchmark().load(ScenarioConfig(scenario="tiny"))
    openings = {d.day: d.openings for d in scenario.days}
    state = tmp_path / "state"
    proc, ready = await start_daemon_process(state, *N_CTX)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(name="metaclaw", scenario="tiny", subset=["day01", "day02"]),
                agent=pb.AgentSpec(harness="openclaw"),
            )
            run.agent.options.update({**FAST, "cron_jobs": [DAILY]})
            created = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id="openclaw-mc"))
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
            # Upstream's protocol: the transcripts' messages are history, never delivered as turns.
            assert not [f.event_id for f in fires if "opening" in f.event_id]
            ticks = [f for f in fires if f.event_id.startswith("openclaw:cron:")]
            # OpenClaw's own job came due on simulated time: 13:00 on day 1 (day 2 ends before its 13:00).
            assert len(ticks) == 1, [f.event_id for f in fires]
            (tick,) = ticks
            assert tick.due_time.ToDatetime().hour == 13 and tick.due_time.ToDatetime().minute == 0
        calls = await _calls(state, "local/openclaw-mc")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    assert calls and all(c["method"] == "POST" for c in calls)
    # Every call in tokens.
    assert all(c["prompt_token_ids"] and c["completions"] and c["completions"][0]["token_ids"] for c in calls)
    agent = [c for c in calls if c["role"] == "agent"]
    memory = [c for c in calls if c["role"] == "memory"]
    assert agent and memory
    # The cron job's calls came through the memory listener.
    assert any("Say the word tick." in json.dumps(c["request"]) for c in memory)
    assert not any("Say the word tick." in json.dumps(c["request"]) for c in agent)
    # Each day's seeded transcript is its session's history: day 1's first call already
    # holds the recorded user message and the recorded assistant reply (no model call made them).
    for day in ("day01", "day02"):
        first_text = openings[day][0].text
        day_calls = [c for c in agent if first_text in json.dumps(c["request"])]
        assert day_calls, f"no call carries {day}'s seeded message"
        history = _texts(day_calls[0])
        assert history[0][0] == "user" and history[0][1].startswith(first_text)
        assert history[1][0] == "assistant"
    # A fresh session per day, as upstream: day 2's calls do not carry day 1's transcript.
    day2 = [c for c in agent if openings["day02"][0].text in json.dumps(c["request"])]
    assert not any(openings["day01"][0].text in json.dumps(c["request"]) for c in day2)


async def _first_turn_ended(stub: pb_grpc.SclateStub, name: str) -> None:
    async for ev in stub.WatchRun(pb.WatchRunRequest(name=name)):
        if ev.WhichOneof("kind") == "turn" and ev.turn.phase == "ended":
            return
        if ev.WhichOneof("kind") == "state":
            assert ev.state.state in (pb.PENDING, pb.RUNNING), ev.state.reason
    raise AssertionError("the run ended before its first turn did")


async def _final(stub: pb_grpc.SclateStub, name: str) -> pb.Run:
    async for _ in stub.WatchRun(pb.WatchRunRequest(name=name)):
        pass
    run: pb.Run = await stub.GetRun(pb.GetRunRequest(name=name))
    return run


async def test_longmemeval_tiny_with_openclaw_one_conversation_snapshot_and_branch(tmp_path: Path) -> None:
    """session_scope=run: every haystack session (on its own simulated day) and the
    question in one OpenClaw session. A snapshot after the first turn: the branch's
    gateway starts on the restored state directory and continues that session."""
    state = tmp_path / "state"
    proc, ready = await start_daemon_process(state, *N_CTX)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(name="longmemeval", scenario="tiny", subset=["lme_tiny_ku_2"]),
                agent=pb.AgentSpec(harness="openclaw"),
            )
            run.agent.options.update({**FAST, "session_scope": "run"})
            src = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id="openclaw-lme"))
            await _first_turn_ended(stub, src.name)
            snap = await stub.SaveSnapshot(pb.SaveSnapshotRequest(run=src.name, snapshot_id="after-first-turn"))
            branch = await stub.RestoreSnapshot(
                pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id="openclaw-lme-branch")
            )
            done_src = await _final(stub, src.name)
            done_branch = await _final(stub, branch.name)
            for done in (done_src, done_branch):
                assert done.state == pb.SUCCEEDED, done.state_reason
                assert done.results.rounds_graded == done.results.rounds >= 1
                assert done.results.capture.calls_lost == 0 and done.results.capture.drain == "ok"
            src_calls = await _calls(state, "local/openclaw-lme")
            branch_calls = await _calls(state, "local/openclaw-lme-branch")
            # Deleting the runs removes their snapshot image (nothing left on the engine).
            for name in (branch.name, src.name):
                await stub.DeleteRun(pb.DeleteRunRequest(name=name))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    for calls in (src_calls, branch_calls):
        assert calls and all(c["prompt_token_ids"] and c["completions"][0]["token_ids"] for c in calls)
    agent = [c for c in src_calls if c["role"] == "agent"]
    first_text = _texts(agent[0])[-2][1].partition("] ")[2].partition("\n\nRuntime:")[0]
    assert first_text
    # The session continued across the simulated days: the last call still holds the first message.
    assert any(first_text in text for role, text in _texts(agent[-1])[:-2] if role == "user")
    kept = {c["call_id"] for c in src_calls}
    branch_own = [c for c in branch_calls if c["role"] == "agent" and c["call_id"] not in kept]
    assert branch_own and len(branch_own) < len(branch_calls)
    # The branch's first call of its own continues the session the snapshot kept.
    assert any(first_text in text for role, text in _texts(branch_own[0])[:-2] if role == "user")
