"""Hermes Agent, unmodified, for real: a daemon process, the sclate-hermes sandbox,
the embedded model, capture, simulated days, its own cron job ticked on simulated time,
and a snapshot branched with its conversation intact (one run covers it all: each run
costs the suite minutes of prompt decoding on two cores)."""

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

from ._runs import branch_at_day_two, own_calls, stored_calls, turn_errors
from ._runs import final as final_run

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


async def test_metaclaw_tiny_with_hermes_snapshot_and_branch(tmp_path: Path) -> None:
    """Two MetaClaw days in one Hermes conversation (session_scope=run), Hermes's own
    cron job on simulated time, and a snapshot once day 2's first round ended: the
    branch resumes the same conversation."""
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
            branch = await branch_at_day_two(stub, created.name, "hermes-mc-br")
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
            done_branch = await final_run(stub, branch)
            assert done_branch.state == pb.SUCCEEDED, done_branch.state_reason
            assert done_branch.results.rounds_graded == done_branch.results.rounds >= 1
            assert done_branch.results.capture.calls_lost == 0 and done_branch.results.capture.drain == "ok"
            errors = await turn_errors(stub, created.name, branch)
            calls = await stored_calls(state, "local/hermes-mc")
            branch_calls = await stored_calls(state, "local/hermes-mc-br")
            # Deleting the runs removes their snapshot image (nothing left on the engine).
            for name in (branch, created.name):
                await stub.DeleteRun(pb.DeleteRunRequest(name=name))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    # Every turn reached the model (a turn Hermes failed before calling it would say why here).
    assert not errors, errors
    agent = [c for c in calls if c["role"] == "agent" and c["method"] == "POST"]
    memory = [c for c in calls if c["role"] == "memory"]
    assert agent and memory
    # Every call in tokens.
    for some in (calls, branch_calls):
        assert all(c["prompt_token_ids"] and c["completions"] and c["completions"][0]["token_ids"] for c in some)
    # The cron job's calls came through the memory listener, its prompt Hermes's cron prompt.
    assert any("Say the word tick." in json.dumps(c["request"]) for c in memory)
    assert not any("Say the word tick." in json.dumps(c["request"]) for c in agent)
    # The conversation continued across the day boundary: the last prompt carries day 1's first message.
    first_user = _user_texts(agent[0])[-1]
    assert first_user in _user_texts(agent[-1])[:-1]
    # The branch's first call of its own continues the Hermes session the snapshot
    # kept: the message from before the snapshot is in its history, not sent anew.
    branch_own = [c for c in own_calls(calls, branch_calls) if c["role"] == "agent"]
    assert branch_own
    assert first_user in _user_texts(branch_own[0])[:-1]
