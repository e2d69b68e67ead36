"""Claude Code, unmodified, for real: a daemon process, the sclate-claude-code sandbox,
the embedded model serving the Anthropic Messages API, capture, simulated days
(libfaketime reaches the Claude Code binary: the date it shows the model is the
simulated one), and a snapshot branched with Claude Code's own session intact (one run
covers it all: each run costs the suite minutes of prompt decoding on two cores)."""

from __future__ import annotations

import datetime as dt
import re
import signal
from pathlib import Path
from typing import Any

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench import start_daemon_process

from ._runs import branch_at_day_two, final, own_calls, stored_calls, turn_errors

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.model]

# Claude Code's first prompt is ~4,450 tokens (its system prompt and four tools).
N_CTX = ("--model-n-ctx", "16384")
# A small bound per call (Claude Code's CLAUDE_CODE_MAX_OUTPUT_TOKENS) and few agentic
# steps per message keep a small model's turn short on two cores.
# (A call cut by the bound is continued by Claude Code itself, up to three times.)
FAST: dict[str, Any] = {"turn_timeout_s": 150, "max_tokens": 96, "max_turns": 3}
# How a turn may fail without the substrate being at fault: the model's answer ran past
# the output bound even after Claude Code's own continuations, or the model ran out of
# agentic steps or of the turn's time.
MODEL_LIMITS = ("output token maximum", "error_max_turns", "timed out after")
# Its date line, and the reminder it adds to a resumed session when the day changed.
DATE_SHOWN = re.compile(r"Today's date is (?:now )?(\d{4}-\d{2}-\d{2})")


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"]


def _user_texts(record: dict[str, Any]) -> list[str]:
    """The user's own words in a Messages request: Claude Code's reminders
    (``<system-reminder>`` blocks: CLAUDE.md, the date, its context) left out."""
    request = record.get("request") or {}
    out: list[str] = []
    for m in request.get("messages", []) if isinstance(request, dict) else []:
        if isinstance(m, dict) and m.get("role") == "user":
            out.extend(t for t in _texts(m.get("content")) if t.strip() and not t.lstrip().startswith("<"))
    return out


def _dates_shown(record: dict[str, Any]) -> list[str]:
    """Every date Claude Code told the model, in the order of the request (the
    model's own answers left out: a small model parrots the line)."""
    request = record.get("request") or {}
    found: list[str] = []
    for t in _texts(request.get("system")):
        found.extend(DATE_SHOWN.findall(t))
    for m in request.get("messages", []):
        if isinstance(m, dict) and m.get("role") != "assistant":
            for t in _texts(m.get("content")):
                found.extend(DATE_SHOWN.findall(t))
    return found


def _check_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every call is a Messages call, in tokens; returns the agent's."""
    assert calls
    # The only egress is the model path: every call Claude Code made is a Messages call.
    assert all(c["method"] == "POST" and c["api"] == "anthropic_messages" for c in calls), [
        (c["method"], c["api"], c["path"]) for c in calls
    ]
    # Its main tier is the agent's; its background tier (sclate-role-aux) the aux role's.
    assert {c["role"] for c in calls} <= {"agent", "aux"}
    for c in calls:
        if c["role"] == "aux":
            assert "model" in c["injected"]
    assert all(c["prompt_token_ids"] for c in calls)
    finished = [c for c in calls if c["error"] is None]
    assert finished and all(c["completions"] and c["completions"][0]["token_ids"] for c in finished)
    agent = [c for c in calls if c["role"] == "agent"]
    assert agent
    return agent


def _check_simulated_date(calls: list[dict[str, Any]]) -> set[str]:
    """The date Claude Code last told the model is the simulated day of the call, not
    the wall one (a resumed session on a later day gets its "date has changed" line).
    Returns the days seen."""
    wall = dt.datetime.now(dt.UTC).date().isoformat()
    days: set[str] = set()
    for c in calls:
        shown = _dates_shown(c)
        if not shown:
            continue
        simulated = dt.datetime.fromtimestamp(c["timings"]["start_ns"] / 1e9, dt.UTC).date().isoformat()
        assert simulated != wall, "the scenario's days fall on today's date: the check would prove nothing"
        assert shown[-1] == simulated, (shown, simulated)
        days.add(simulated)
    assert days, "no call showed Claude Code's date line"
    return days


async def test_metaclaw_tiny_with_claude_code_snapshot_and_branch(tmp_path: Path) -> None:
    """Two MetaClaw days in one Claude Code session (session_scope=run), the simulated
    date it was told each day, and a snapshot once day 2's first round ended: the
    branch resumes that session from the restored CLAUDE_CONFIG_DIR (``--resume``)."""
    state = tmp_path / "state"
    proc, ready = await start_daemon_process(state, *N_CTX)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(name="metaclaw", scenario="tiny", subset=["day01", "day02"]),
                agent=pb.AgentSpec(harness="claude-code"),
            )
            run.agent.options.update({**FAST, "session_scope": "run"})
            created = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id="cc-mc"))
            branch = await branch_at_day_two(stub, created.name, "cc-mc-br")
            done_src = await final(stub, created.name)
            done_branch = await final(stub, branch)
            errors = await turn_errors(stub, created.name, branch)
            for done in (done_src, done_branch):
                assert done.state == pb.SUCCEEDED, done.state_reason
                assert done.results.rounds_graded == done.results.rounds >= 1
                cap = done.results.capture
                assert cap.calls_lost == 0 and cap.calls_unleased == 0 and cap.drain == "ok", cap
            r = done_src.results
            assert r.harness.name == "claude-code" and r.harness.process_clock == "simulated"
            assert r.harness.probed_clock == "simulated", r.harness
            s = r.scheduler
            assert s.events_fired == s.events_scheduled and s.in_order
            assert s.deliveries == s.deliveries_checked > 0
            assert s.out_of_order == 0 and s.early_deliveries == 0 and s.negative_delays == 0
            calls = await stored_calls(state, "local/cc-mc")
            branch_calls = await stored_calls(state, "local/cc-mc-br")
            # Deleting the runs removes their snapshot image (nothing left on the engine).
            for name in (branch, created.name):
                await stub.DeleteRun(pb.DeleteRunRequest(name=name))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    agent = _check_calls(calls)
    branch_agent = _check_calls(branch_calls)
    # Every turn reached the model; a turn may only have failed by a model limit.
    assert all(any(limit in why for limit in MODEL_LIMITS) for _, _, why in errors), errors
    # Two days in one session: the second day's calls were told the new date.
    assert len(_check_simulated_date(agent)) == 2
    # One Claude Code session for the run (session_scope=run): the last call, on day 2,
    # still carries day 1's first message, sent once and kept as history.
    first = _user_texts(agent[0])[0]
    assert first in _user_texts(agent[-1])[:-1]
    assert len({c["thread"] for c in agent}) == 1, {c["thread"] for c in agent}
    # The branch's first call of its own resumes the Claude Code session the snapshot
    # kept: the message from before the snapshot is in its history, not sent anew.
    branch_own = [c for c in own_calls(calls, branch_calls) if c["role"] == "agent"]
    assert branch_own and {c["call_id"] for c in branch_own} <= {c["call_id"] for c in branch_agent}
    assert first in _user_texts(branch_own[0])[:-1]
    assert branch_own[0]["thread"] == agent[0]["thread"]
