"""A sandboxed run on the Ray executor: a real daemon with --executor ray, a cluster of a
head and two nodes on this machine (sharing its one Docker engine), the MetaClaw
``tiny`` scenario with the ``reference`` harness in its container and the node's own
embedded model; its captured calls come back to the daemon's store over the record
stream."""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiodocker
import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench import start_daemon_process
from sclated.cluster import LocalCluster, node_state_dir

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.model]

FAST = {"max_tokens": 24, "max_steps": 2}
"""The agent options of tests/e2e/test_sandboxed_run.py: a short run of real calls."""


async def _containers_of(run_id: str) -> list[str]:
    async with aiodocker.Docker() as docker:
        found = await docker.containers.list(all=True, filters=json.dumps({"label": [f"sclate.run={run_id}"]}))
        return [c.id for c in found]


def _named_actors(address: str) -> list[str]:
    """The live named actors of the cluster, asked by a driver of its own."""
    script = (
        f"import ray;ray.init(address={address!r},log_to_driver=False,logging_level='ERROR');"
        "print('\\n'.join(a['name'] for a in ray.util.list_named_actors(all_namespaces=True)))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.splitlines()


async def _ray_daemon(state: Path, cluster: LocalCluster) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    return await start_daemon_process(
        state, "--executor", "ray", "--ray-address", cluster.address, "--drain-grace-s", "0.5", timeout_s=120
    )


async def _create(stub: pb_grpc.SclateStub, run_id: str, subset: list[str]) -> pb.Run:
    """A MetaClaw ``tiny`` run (``subset``: its days) of the reference harness, FAST."""
    run = pb.Run(
        benchmark=pb.BenchmarkSpec(name="metaclaw", scenario="tiny", subset=subset),
        agent=pb.AgentSpec(harness="reference"),
    )
    run.agent.options.update(FAST)
    created: pb.Run = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id=run_id))
    return created


async def test_a_sandboxed_metaclaw_run_on_a_node_captures_its_calls(tmp_path: Path, cluster: LocalCluster) -> None:
    state = tmp_path / "state"
    proc, ready = await _ray_daemon(state, cluster)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            created = await _create(stub, "mc-ray", ["day01"])
            events = [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name))]
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            final = await stub.GetRun(pb.GetRunRequest(name=created.name))
            assert final.state == pb.SUCCEEDED, final.state_reason
            r = final.results
            assert r.rounds == r.rounds_graded >= 1
            assert any(e.WhichOneof("kind") == "turn" for e in events)
            # It ran on a node that declares sandbox slots, not on the head.
            on = {m.node_id[:16]: m.index for m in cluster.members}[final.node.split("@")[0]]
            assert on != 0, final.node
            # Its model calls, captured in the container on that node, are in the daemon's store.
            roles = {c.role: c for c in r.calls}
            assert roles["agent"].calls > 0 and roles["agent"].completion_tokens > 0
            cap = r.capture
            assert cap.calls_failed == 0 and cap.calls_lost == 0 and cap.calls_unleased == 0, cap
            assert cap.drain == "ok" and cap.calls == sum(c.calls for c in r.calls) > 0
            trajectories = [t async for t in stub.StreamTrajectories(pb.StreamTrajectoriesRequest(run=created.name))]
            assert sum(len(t.call_ids) for t in trajectories) == cap.calls
        # The sandbox is gone with the run; the node's embedded model stays for its next runs.
        assert await _containers_of("mc-ray") == []
        scope = hashlib.sha256(str(state.resolve()).encode()).hexdigest()[:12]
        node_id = next(m.node_id for m in cluster.members if m.index == on)
        assert f"model-{scope}-{node_id[:16]}" in await asyncio.to_thread(_named_actors, cluster.address)
        # The model server ran on that node (its log is in the node's directory); the run's own
        # directory there went with the run.
        node_dir = node_state_dir(scope, node_id)
        assert (node_dir / "model-server.log").stat().st_size > 0
        assert not (node_dir / "runs").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0


async def test_cancelling_a_sandboxed_run_on_a_node_removes_its_container(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    state = tmp_path / "state"
    proc, ready = await _ray_daemon(state, cluster)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            created = await _create(stub, "mc-ray-cancel", [])
            async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name)):
                if ev.WhichOneof("kind") == "turn":
                    break
            assert len(await _containers_of("mc-ray-cancel")) == 1  # its sandbox, on its node's engine
            cancelled = await stub.CancelRun(pb.CancelRunRequest(name=created.name))
            assert cancelled.state == pb.CANCELLED
            events = [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name))]
            assert events[-1].state.state == pb.CANCELLED
        # The worker closed its sandbox before its actor went.
        assert await _containers_of("mc-ray-cancel") == []
        runs = [n for n in await asyncio.to_thread(_named_actors, cluster.address) if n.startswith("run-")]
        assert runs == []
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0


async def test_a_restarted_daemon_adopts_a_sandboxed_run_on_its_node(tmp_path: Path, cluster: LocalCluster) -> None:
    """SIGTERM: the daemon leaves the run RUNNING, its worker and container go on on the
    node; the next daemon process (which reaps its own leftover containers at start-up)
    keeps the run's container, adopts the worker and stores the rest of its calls."""
    state = tmp_path / "state"
    proc, ready = await _ray_daemon(state, cluster)
    async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
        stub = pb_grpc.SclateStub(ch)
        created = await _create(stub, "mc-ray-adopt", ["day01"])
        async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name)):
            if ev.WhichOneof("kind") == "turn":
                break
    proc.send_signal(signal.SIGTERM)
    assert await proc.wait() == 0
    assert len(await _containers_of("mc-ray-adopt")) == 1  # left running with its worker

    proc, ready = await _ray_daemon(state, cluster)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            events = [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name))]
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            states = [e.state.reason for e in events if e.WhichOneof("kind") == "state"]
            assert not [s for s in states if "resumed" in s], states
            final = await stub.GetRun(pb.GetRunRequest(name=created.name))
            assert final.state == pb.SUCCEEDED, final.state_reason
            cap = final.results.capture
            assert cap.calls_lost == 0 and cap.calls == sum(c.calls for c in final.results.calls) > 0, cap
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    assert await _containers_of("mc-ray-adopt") == []  # gone with the run
    assert "adopted its worker" in (state / "sclated.log").read_text()
