"""Gaia2 for real: a daemon process, ARE's world in its own process, the reference
harness in a Docker sandbox against the embedded model, the `are` command inside.

The embedded model is far too small to use the apps on its own, so the test uses the
sandbox's `are` command itself, as the harness's shell tool would: what is proven is
the path (sandbox -> control socket -> daemon -> ARE's apps, checked and recorded),
the clock jumping while the agent waits, and ARE's judge grading the run."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import aiodocker
import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench import start_daemon_process

from ._runs import container_exec

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.model]

START = 1_767_686_400  # sclate_email_followup's start_time
RUN = "gaia2-followup"


async def _container(run_id: str, timeout_s: float = 300) -> str:
    deadline = time.monotonic() + timeout_s
    async with aiodocker.Docker() as docker:
        while time.monotonic() < deadline:
            found: list[Any] = await docker.containers.list(filters=json.dumps({"label": [f"sclate.run={run_id}"]}))
            if found:
                return str(found[0]["Id"])
            await asyncio.sleep(0.3)
    raise AssertionError(f"no sandbox for run {run_id} within {timeout_s} s")


async def _agent_side(container_id: str) -> dict[str, Any]:
    """What the harness's shell tool would run, inside the sandbox."""
    seen: dict[str, Any] = {}
    deadline = time.monotonic() + 120
    while True:  # the control socket serves once the sandbox is up
        code, out = await container_exec(container_id, "are tools EmailClientV2")
        if code == 0 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    seen["tools"] = (code, out)
    seen["send"] = await container_exec(
        container_id,
        "are call EmailClientV2 send_email 'recipients=[\"bob@example.com\"]' "
        "'subject=Q3 budget' 'content=Hi Bob, what is the Q3 budget?'",
    )
    seen["typo"] = await container_exec(container_id, "are call EmailClientV2 send_emial subject=x")
    wall = time.monotonic()
    # Twice: to the user's task (+5 s), then on to the next world event (the newsletter, +60 s).
    wait = "are call SystemApp wait_for_notification timeout=3600 && date -u +%s"
    seen["wait"] = await container_exec(container_id, f"{wait} && {wait}")
    seen["wait_wall_s"] = time.monotonic() - wall
    return seen


async def test_gaia2_scenario_with_the_reference_harness_and_the_are_command(tmp_path: Path) -> None:
    proc, ready = await start_daemon_process(tmp_path / "state")
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(name="gaia2", scenario="sclate_email_followup"),
                agent=pb.AgentSpec(harness="reference"),
            )
            run.agent.options.update({"max_tokens": 24, "max_steps": 2})
            created = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id=RUN))
            agent_side = asyncio.create_task(_agent_side(await _container(RUN)))
            events = [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name))]
            seen = await agent_side
            final = await stub.GetRun(pb.GetRunRequest(name=created.name))
        assert final.state == pb.SUCCEEDED, final.state_reason
        # The apps, reached from inside the sandbox, checked against ARE's signatures.
        code, out = seen["tools"]
        assert code == 0 and "EmailClientV2 send_email(" in out, out
        code, out = seen["send"]
        assert code == 0 and out.strip(), out  # the new email's id, from ARE's app
        code, out = seen["typo"]
        assert code == 1 and "has no tool 'send_emial'" in out and "send_email" in out, out
        # Waiting jumped simulated time to the next event, in far less real time.
        code, out = seen["wait"]
        assert code == 0 and "waited until" in out, out
        lines = out.strip().splitlines()
        first_s, second_s = int(lines[1]), int(lines[3])
        assert START + 5 <= first_s < START + 60  # woke at the task, the world's next event
        assert second_s >= START + 60  # the newsletter, the one after it
        assert seen["wait_wall_s"] < 60  # a minute of simulated time, far less real time
        r = final.results
        assert r.scheduler.jumps > 0 and r.scheduler.in_order
        # The user's task and the apps' notifications reached the harness as turns.
        turns = [e for e in events if e.WhichOneof("kind") == "turn" and e.turn.phase == "ended"]
        assert len(turns) >= 2
        # ARE's judge graded the run, its LLM checks answered by the embedded model.
        assert r.rounds == 1 and r.rounds_graded == 1, [(s.round_id, s.reason) for s in r.round_scores]
        assert r.capture.calls_lost == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
