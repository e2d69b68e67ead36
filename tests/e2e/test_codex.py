"""The Codex CLI, unmodified, for real: a daemon process, the sclate-codex sandbox,
the embedded model serving the Responses API, capture, simulated days, and a
snapshot branched with Codex's own session intact (one run covers it all: each run
costs the suite minutes of prompt decoding on two cores)."""

from __future__ import annotations

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

# Codex's first prompt is ~4,800 tokens (its instructions and two shell tools).
N_CTX = ("--model-n-ctx", "16384")
# Codex sends no output bound and has no setting for one: the capture proxy puts the
# harness's max_tokens on each call, so a small model that rambles ends its call as
# incomplete (Codex reports "Incomplete response returned") well inside the timeout.
FAST: dict[str, Any] = {"turn_timeout_s": 120, "max_tokens": 256}
# How a turn may fail without the substrate being at fault: the model ran into the
# output bound, or (a long prompt on two cores) out of the turn's time.
MODEL_LIMITS = ("reason: max_output_tokens", "timed out after")


def _user_texts(record: dict[str, Any]) -> list[str]:
    """The user messages of a Responses request, Codex's environment context and the
    workspace's AGENTS.md (which Codex sends as user messages) left out."""
    request = record.get("request") or {}
    out: list[str] = []
    for item in request.get("input", []) if isinstance(request, dict) else []:
        if not isinstance(item, dict) or item.get("type", "message") != "message" or item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if isinstance(content, str) and not content.startswith(("<environment_context>", "# AGENTS.md instructions")):
            out.append(content)
    return out


def _check_calls(calls: list[dict[str, Any]]) -> None:
    assert calls
    # The only egress is the model path: every call Codex made is a Responses call.
    assert all(c["method"] == "POST" and c["api"] == "openai_responses" for c in calls), [
        (c["method"], c["api"]) for c in calls
    ]
    assert all(c["role"] == "agent" for c in calls)
    # Every call in tokens: its prompt always; its completion when the turn was not cut
    # short (Codex sets no output bound, so a rambling answer runs until the turn
    # timeout ends Codex and the call is aborted).
    assert all(c["prompt_token_ids"] for c in calls)
    finished = [c for c in calls if c["error"] is None]
    assert finished and all(c["completions"] and c["completions"][0]["token_ids"] for c in finished)


async def test_metaclaw_tiny_with_codex_snapshot_and_branch(tmp_path: Path) -> None:
    """Two MetaClaw days in one Codex thread (session_scope=run), and a snapshot once
    day 2's first round ended: the branch resumes that thread from the restored
    CODEX_HOME (``codex exec resume``)."""
    state = tmp_path / "state"
    proc, ready = await start_daemon_process(state, *N_CTX)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(name="metaclaw", scenario="tiny", subset=["day01", "day02"]),
                agent=pb.AgentSpec(harness="codex"),
            )
            run.agent.options.update({**FAST, "session_scope": "run"})
            created = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id="codex-mc"))
            branch = await branch_at_day_two(stub, created.name, "codex-mc-br")
            done_src = await final(stub, created.name)
            done_branch = await final(stub, branch)
            errors = await turn_errors(stub, created.name, branch)
            for done in (done_src, done_branch):
                assert done.state == pb.SUCCEEDED, done.state_reason
                assert done.results.rounds_graded == done.results.rounds >= 1
                cap = done.results.capture
                assert cap.calls_lost == 0 and cap.calls_unleased == 0 and cap.drain == "ok", cap
            s = done_src.results.scheduler
            assert s.events_fired == s.events_scheduled and s.in_order
            assert s.deliveries == s.deliveries_checked > 0
            assert s.out_of_order == 0 and s.early_deliveries == 0 and s.negative_delays == 0
            calls = await stored_calls(state, "local/codex-mc")
            branch_calls = await stored_calls(state, "local/codex-mc-br")
            # Deleting the runs removes their snapshot image (nothing left on the engine).
            for name in (branch, created.name):
                await stub.DeleteRun(pb.DeleteRunRequest(name=name))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    for some in (calls, branch_calls):
        _check_calls(some)
    # Every turn reached the model; a turn may only have failed by a model limit.
    assert all(any(limit in why for limit in MODEL_LIMITS) for _, _, why in errors), errors
    # One Codex thread for the run (session_scope=run): the last call, on day 2,
    # still carries day 1's first message, sent once and kept as history.
    first = _user_texts(calls[0])[-1]
    assert first in _user_texts(calls[-1])[:-1]
    threads = {c["request"].get("prompt_cache_key") for c in calls}
    assert len(threads) == 1, threads
    # The branch's first call of its own resumes the Codex thread the snapshot kept:
    # the message from before the snapshot is in its history, not sent anew.
    branch_own = own_calls(calls, branch_calls)
    assert first in _user_texts(branch_own[0])[:-1]
    assert branch_own[0]["request"]["prompt_cache_key"] == calls[0]["request"]["prompt_cache_key"]
