"""OpenClaw, unmodified, for real: a daemon process, the sclate-openclaw sandbox with
its gateway, the embedded model (a context long enough for OpenClaw's prompts),
capture, simulated days, MetaClaw's seeded sessions, its own cron job run on
simulated time, and a snapshot branched with its sessions intact.

One run covers all of it: OpenClaw's first call of a session costs ~70 s of prompt
decoding on two cores, so each extra run is minutes of the suite. One session
across days (``session_scope=run``) is what ``sclated bench harness`` runs and
checks (its ``session_continuity``)."""

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

from ._runs import branch_at_day_two, own_calls, stored_calls
from ._runs import final as final_run

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


async def test_metaclaw_tiny_with_openclaw_upstream_protocol_snapshot_and_branch(tmp_path: Path) -> None:
    """Two MetaClaw days the way upstream drives OpenClaw (a fresh session per day, the
    day's transcript seeded as its history), OpenClaw's own cron job on simulated time,
    and a snapshot once day 2's first round ended: the branch's gateway starts on the
    restored state directory and continues that day's session."""
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
            branch = await branch_at_day_two(stub, created.name, "openclaw-mc-br")
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
            done_branch = await final_run(stub, branch)
            assert done_branch.state == pb.SUCCEEDED, done_branch.state_reason
            assert done_branch.results.rounds_graded == done_branch.results.rounds >= 1
            assert done_branch.results.capture.calls_lost == 0 and done_branch.results.capture.drain == "ok"
            calls = await stored_calls(state, "local/openclaw-mc")
            branch_calls = await stored_calls(state, "local/openclaw-mc-br")
            # Deleting the runs removes their snapshot image (nothing left on the engine).
            for name in (branch, created.name):
                await stub.DeleteRun(pb.DeleteRunRequest(name=name))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    assert calls and all(c["method"] == "POST" for c in calls)
    # Every call in tokens.
    for some in (calls, branch_calls):
        assert all(c["prompt_token_ids"] and c["completions"] and c["completions"][0]["token_ids"] for c in some)
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
    # The message delivered in day 2 before the snapshot ("[<time>] <text>")...
    delivered = _texts(day2[0])[-2]
    assert delivered[0] == "user" and "] " in delivered[1], delivered
    delivered_text = delivered[1].partition("] ")[2]
    # ...is history in the branch's first call of its own: the session the snapshot kept.
    branch_own = [c for c in own_calls(calls, branch_calls) if c["role"] == "agent"]
    assert branch_own
    assert any(delivered_text in text for role, text in _texts(branch_own[0])[:-2] if role == "user")
