"""The main path for real: a daemon process, Docker sandboxes built locally, the
embedded llama.cpp model, mitmdump capture, simulated days."""

from __future__ import annotations

import asyncio
import json
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import aiodocker
import aiohttp
import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from adapters import AgentEnvironment
from adapters.reference_harness import ReferenceHarness
from sclated.bench import branch_figures, start_daemon_process
from sclated.clock import ClockConfig, ClockMode, SimClock
from sclated.model import EmbeddedModel
from sclated.runs import Resources, RunLoop
from sclated.runs._sandboxed import SandboxedAgent
from sclated.sandbox import SandboxOptions, SandboxServices
from sclated.scheduler import At, EventSpec, Scheduler, StopRun
from sclated.store import Store

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.model]

FAST = {"max_tokens": 24, "max_steps": 2}
H = 3600 * 1_000_000_000


async def _containers_of(run_id: str) -> list[str]:
    async with aiodocker.Docker() as docker:
        found = await docker.containers.list(all=True, filters=json.dumps({"label": [f"sclate.run={run_id}"]}))
        return [c.id for c in found]


async def _scrape(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The daemon's /metrics, sample by (name, sorted labels)."""
    async with aiohttp.ClientSession() as http, http.get(f"http://{address}/metrics") as resp:
        assert resp.status == 200, await resp.text()
        text = await resp.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_metaclaw_tiny_with_the_reference_harness(tmp_path: Path) -> None:
    proc, ready = await start_daemon_process(tmp_path / "state", "--http-listen", "127.0.0.1:0")
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(name="metaclaw", scenario="tiny"),
                agent=pb.AgentSpec(harness="reference"),
            )
            run.agent.options.update(FAST)
            created = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id="mc-tiny"))
            events = [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name))]
            final = await stub.GetRun(pb.GetRunRequest(name=created.name))
            assert final.state == pb.SUCCEEDED, final.state_reason
            r = final.results
            assert r.rounds == 6 and r.rounds_graded == 6
            s = r.scheduler
            assert s.events_fired == s.events_scheduled and s.in_order
            assert s.jumps > 0 and s.sim_span_s > 2 * 86400  # three weekdays, nights skipped
            # Every message was checked against the harness's own (simulated) clock.
            assert s.deliveries == s.deliveries_checked >= 6
            assert s.out_of_order == 0 and s.early_deliveries == 0 and s.negative_delays == 0
            assert s.receipt_vs_due_ms_min >= 0
            assert 0 <= s.delivery_delay_ms_min <= s.delivery_delay_ms_p50 <= s.delivery_delay_ms_max < 5_000
            # The wall time adds up, and the agent's own work bounds the compression.
            split = s.agent_s + s.waiting_s + sum(s.overhead_s.values())
            assert abs(split - s.run_wall_s) < 0.01 * s.run_wall_s
            assert s.agent_s > 0 and s.overhead_s["sandbox_prepare"] > 0 and s.overhead_s["grading"] > 0
            assert s.compression_ratio > 1 and s.compression_limit_agent >= s.compression_ratio
            assert 0 < s.compression_vs_agent_limit <= 1
            roles = {c.role: c for c in r.calls}
            assert roles["agent"].calls > 0 and roles["agent"].completion_tokens > 0
            cap = r.capture
            assert cap.calls_failed == 0 and cap.calls_lost == 0 and cap.calls_unleased == 0, cap
            assert cap.drain == "ok" and cap.calls == sum(c.calls for c in r.calls)
            assert [w for w in r.warnings if "embedded" not in w] == []
            # The harness's nightly consolidation cron ran as an event and was captured as memory.
            assert roles["memory"].calls > 0
            assert any(e.WhichOneof("kind") == "fire" and "cron" in e.fire.event_id for e in events)
            turns = [e for e in events if e.WhichOneof("kind") == "turn"]
            assert len(turns) >= 6
            assert Path(r.report_path).is_file() and Path(r.plot_path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            data = bytearray()
            rows = 0
            async for chunk in stub.ExportTrajectories(pb.ExportTrajectoriesRequest(run=created.name, format="skyrl")):
                data += chunk.data
                rows = rows or chunk.rows
            lines = [json.loads(line) for line in data.decode().splitlines()]
            assert rows == len(lines) > 0
            for row in lines:
                assert len(row["response_ids"]) == len(row["loss_masks"])
                if row["rollout_logprobs"] is not None:
                    assert len(row["rollout_logprobs"]) == len(row["response_ids"])
            assert any(sum(row["loss_masks"]) > 0 for row in lines)
            # Token-faithful multi-turn samples: a session's calls extend one another (the
            # harness keeps its prompt stable, the model server its exact tokens), so hardly
            # any call starts a branch because its prompt does not extend an earlier one.
            trajectories = [
                {"call_ids": list(t.call_ids), "branch_reason": t.branch_reason, "role": t.role}
                async for t in stub.StreamTrajectories(pb.StreamTrajectoriesRequest(run=created.name))
            ]
            agent = branch_figures(trajectories)["by_role"]["agent"]
            assert agent["prefix_mismatch_share"] < 0.1, agent
            assert agent["calls_per_branch_mean"] > 1.5, agent
            # The daemon's metrics (a real process, sandbox and model) say what the run did.
            m = await _scrape(ready["http"])
            assert m[("sclate_sandbox_starts_total", (("mode", "fresh"), ("outcome", "started")))] == 1
            assert m[("sclate_sandbox_start_seconds_count", (("mode", "fresh"),))] == 1
            assert m[("sclate_sandbox_start_seconds_sum", (("mode", "fresh"),))] > 0
            for c in r.calls:
                key = (("outcome", "ok"), ("role", c.role))
                assert m[("sclate_model_calls_total", key)] == c.calls, c.role
                assert m[("sclate_model_completion_tokens_total", key)] == c.completion_tokens, c.role
            assert m[("sclate_scheduler_fire_lateness_seconds_count", ())] == s.events_fired
            assert m[("sclate_clock_jumps_total", ())] == s.jumps
            assert m[("sclate_runs", (("state", "SUCCEEDED"), ("tenant", "local")))] == 1
        assert await _containers_of("mc-tiny") == []  # the sandbox is gone with the run
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0


async def test_longmemeval_tiny_is_judged_by_the_embedded_model(tmp_path: Path) -> None:
    proc, ready = await start_daemon_process(tmp_path / "state")
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(name="longmemeval", scenario="tiny", subset=["lme_tiny_ku_2"]),
                agent=pb.AgentSpec(harness="reference"),
            )
            run.agent.options.update(FAST)
            created = await stub.CreateRun(pb.CreateRunRequest(run=run))
            events = [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name))]
            final = await stub.GetRun(pb.GetRunRequest(name=created.name))
            assert final.state == pb.SUCCEEDED, final.state_reason
            assert final.results.rounds_graded == final.results.rounds >= 1
            verdicts = [e.verdict for e in events if e.WhichOneof("kind") == "verdict"]
            assert verdicts and all(v.graded for v in verdicts)
            assert final.results.scheduler.jumps > 0
            # The verdict says who judged, and the run says its scores are not comparable.
            (judge,) = final.results.judges
            assert judge.embedded and judge.endpoint == "embedded" and judge.model
            assert any("not comparable" in w for w in final.results.warnings)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0


async def test_a_dead_model_endpoint_fails_the_run_naming_it(tmp_path: Path) -> None:
    """Nothing listens at the run's model endpoint: the run ends FAILED, not SUCCEEDED with 0."""
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing answers there
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    proc, ready = await start_daemon_process(tmp_path / "state")
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(name="metaclaw", scenario="tiny"),
                agent=pb.AgentSpec(harness="reference", model=pb.ModelEndpoint(base_url=dead)),
            )
            run.agent.options.update({**FAST, "model_grace_s": 600})
            created = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id="dead-model"))
            async for _ in stub.WatchRun(pb.WatchRunRequest(name=created.name)):
                pass
            final = await stub.GetRun(pb.GetRunRequest(name=created.name))
            assert final.state == pb.FAILED, final.state_reason
            assert dead in final.state_reason and "never reached" in final.state_reason
            assert "see the daemon's log" in final.state_reason
            cap = final.results.capture
            assert cap.calls_failed > 0 and cap.failed_by_cause["unreachable"] == cap.calls_failed
            assert any("failed (unreachable" in w for w in final.results.warnings)
        assert await _containers_of("dead-model") == []
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0


class _FarStop:
    """One event a month away, so the loop has somewhere to jump to and stays alive."""

    name = "far"

    def __init__(self, at: int) -> None:
        self._at = at
        self._given = False

    def poll(self, snapshot: object) -> list[EventSpec]:
        if self._given:
            return []
        self._given = True
        return [EventSpec("stop", At(self._at), (StopRun("test over"),))]


async def test_sclate_wait_inside_releases_the_turn_and_jumps_the_clock(tmp_path: Path) -> None:
    start = 1_780_000_000 * 1_000_000_000
    sched = Scheduler(start_ns=start, sources=[_FarStop(start + 30 * 24 * H)])
    clock = SimClock(ClockConfig(ClockMode.HYBRID, start_ns=start))
    loop = RunLoop(sched, clock, lambda fire, effect: None)
    store = Store(tmp_path / "db.sqlite")
    await store.open()
    services = SandboxServices(
        state_dir=tmp_path, daemon_id="sclated-waittest", store=store, model=EmbeddedModel(log_path=tmp_path / "m.log")
    )
    failures: list[str] = []
    # As in a run: a turn is busy, and a wait inside the sandbox suspends it.
    turn = loop.begin_turn("turn:test", "reference", start)

    async def wait(until_ns: int) -> int:
        async with turn.suspended(until_ns) as woke:
            return woke

    env = AgentEnvironment(
        run_key="t/wait-test",
        tenant="t",
        run_id="wait-test",
        run_dir=Path(tempfile.mkdtemp(dir=tmp_path)),
        clock=clock,
        leases=clock.leases,
        wait=wait,
        model_base_url="http://127.0.0.1:9",  # never called here
        model_api="openai",
        model_name="",
        resources=Resources(),
        workspace_seed=None,
        resume=False,
        fail_run=failures.append,
    )
    agent = SandboxedAgent(ReferenceHarness({}), SandboxOptions(probe=True), services)
    loop_task: asyncio.Task[Any] | None = None
    try:
        await agent.prepare(env)
        loop_task = asyncio.create_task(loop.run())
        wall0 = time.monotonic()
        res = await agent.exec('sclate-wait --for 3h && date -u +%s', timeout_s=60)
        assert res[0] == 0, res[1]
        inside_s = int(res[1].strip().splitlines()[-1])
        assert time.monotonic() - wall0 < 30  # three simulated hours, not three real ones
        assert clock.now() >= start + 3 * H
        assert abs(inside_s - (start + 3 * H) / 1e9) < 60  # the sandbox saw the new time
        assert clock.jumps >= 1
        # The turn goes on after the wait: busy again, under the lease the loop took at the wake-up.
        assert turn.busy and turn.waits == 1
        bad = await agent.exec("sclate-wait --for soon", timeout_s=30)
        assert bad[0] != 0 and "soon" in bad[1]
        turn.end()
    finally:
        loop.request_stop("test done")
        if loop_task is not None:
            await loop_task
        await agent.close()
        await services.close()
        await store.close()
    assert await _containers_of("wait-test") == []
    assert failures == []
