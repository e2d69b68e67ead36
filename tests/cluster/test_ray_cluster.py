"""A real daemon with --executor ray on a Ray cluster of several nodes on this machine.

The cluster (a head and three nodes, each its own process group declaring sandbox
slots) is started by the test and stopped after it; the node-kill test goes last
since it leaves the cluster a node short.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench import start_daemon_process
from sclated.cluster import LocalCluster, actor_name
from tests.api.conftest import TOKENS, synthetic_request

pytestmark = pytest.mark.e2e
SCLATE = str(Path(sys.executable).with_name("sclate"))


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster(nodes=3, sandbox_slots=2)
    asyncio.run(c.start())
    try:
        yield c
    finally:
        asyncio.run(c.stop())


def _md(who: str) -> Metadata:
    return (("authorization", f"Bearer {TOKENS[who]}"),)


Daemon = tuple[asyncio.subprocess.Process, dict[str, Any]]
Metadata = tuple[tuple[str, str], ...]


async def _ray_daemon(state: Path, cluster: LocalCluster, *extra: str) -> Daemon:
    return await start_daemon_process(
        state, "--executor", "ray", "--ray-address", cluster.address, "--drain-grace-s", "0.5", *extra, timeout_s=120
    )


async def _watch(stub: pb_grpc.SclateStub, name: str, after: int = 0, md: Metadata = ()) -> list[pb.RunEvent]:
    return [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=name, after_seq=after), metadata=md)]


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    assert await proc.wait() == 0


def _node_ids(cluster: LocalCluster) -> dict[str, int]:
    """Run.node (``<node id prefix>@host``) -> the index of the cluster member."""
    return {m.node_id[:16]: m.index for m in cluster.members}


async def test_runs_spread_over_the_nodes_and_tenants_stay_isolated(tmp_path: Path, cluster: LocalCluster) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{t} {tenant}\n" for tenant, t in TOKENS.items()))
    quota = ("--tokens-file", str(tokens), "--tenant-max-active", "4")
    proc, ready = await _ray_daemon(tmp_path / "state", cluster, *quota)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            alice = [
                await stub.CreateRun(synthetic_request(days=2, events=2, turn_ms=200), metadata=_md("alice"))
                for _ in range(4)
            ]
            # The tenant's quota holds whichever node its runs are on (admission stays in the daemon).
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.CreateRun(synthetic_request(), metadata=_md("alice"))
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            bob = [await stub.CreateRun(synthetic_request(days=1, events=2), metadata=_md("bob")) for _ in range(2)]
            for who, runs in (("alice", alice), ("bob", bob)):
                for run in runs:
                    events = await _watch(stub, run.name, md=_md(who))
                    assert [e.seq for e in events] == list(range(1, len(events) + 1))
                    assert events[-1].state.state == pb.SUCCEEDED, events[-1]
            got = [await stub.GetRun(pb.GetRunRequest(name=r.name), metadata=_md("alice")) for r in alice]
            assert all(g.results.rounds_graded == 2 and g.results.score == 1.0 for g in got)
            ids = _node_ids(cluster)
            on = [ids[g.node.split("@")[0]] for g in got]
            assert 0 not in on, "the head declares no sandbox slots: no run goes there"
            assert len(set(on)) >= 2, f"spread placement put every run on one node: {on}"
            # Tenants see only their own runs, on whichever node they ran.
            listed = await stub.ListRuns(pb.ListRunsRequest(page_size=100), metadata=_md("bob"))
            assert sorted(r.name for r in listed.runs) == sorted(r.name for r in bob)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.GetRun(pb.GetRunRequest(name=alice[0].name), metadata=_md("bob"))
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
        env = {**os.environ, "SCLATE_ENDPOINT": ready["tcp"], "SCLATE_TOKEN": TOKENS["alice"]}
        shown = subprocess.run(
            [SCLATE, "runs", "get", alice[0].name], capture_output=True, text=True, env=env, timeout=120
        )
        assert shown.returncode == 0, shown.stderr
        assert any(line.split()[:2] == ["node", got[0].node] for line in shown.stdout.splitlines()), shown.stdout
    finally:
        await _stop(proc)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_daemon_restart_adopts_the_runs_the_cluster_kept_running(
    tmp_path: Path, cluster: LocalCluster, how: signal.Signals
) -> None:
    """SIGTERM: the daemon leaves the runs RUNNING; SIGKILL: it dies between a commit and
    an acknowledgement, maybe, and the adopted worker delivers those records again."""
    state = tmp_path / "state"
    proc, ready = await _ray_daemon(state, cluster)
    async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
        stub = pb_grpc.SclateStub(ch)
        created = [
            await stub.CreateRun(synthetic_request(days=3, events=3, turn_ms=300, run_id=f"r{i}")) for i in range(3)
        ]
        acknowledged: list[pb.RunEvent] = []
        async for ev in stub.WatchRun(pb.WatchRunRequest(name=created[0].name)):
            acknowledged.append(ev)
            if sum(1 for e in acknowledged if e.WhichOneof("kind") == "turn") == 2:
                break
    proc.send_signal(how)  # the workers go on on the cluster
    assert await proc.wait() == (0 if how == signal.SIGTERM else -signal.SIGKILL)

    proc, ready = await _ray_daemon(state, cluster)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            for run in created:
                events = await _watch(stub, run.name)
                assert [e.seq for e in events] == list(range(1, len(events) + 1))
                assert events[-1].state.state == pb.SUCCEEDED, events[-1]
                # Adopted where it ran, not replayed: no state says it resumed from its journal.
                states = [e.state.reason for e in events if e.WhichOneof("kind") == "state"]
                assert not [s for s in states if "resumed" in s], states
                final = await stub.GetRun(pb.GetRunRequest(name=run.name))
                assert final.results.rounds_graded == 3 and final.results.scheduler.in_order
            history = {e.seq: e.SerializeToString() for e in await _watch(stub, created[0].name)}
            for ev in acknowledged:
                assert history[ev.seq] == ev.SerializeToString()
    finally:
        await _stop(proc)
    assert "adopted its worker" in (state / "sclated.log").read_text()


def _named_actors(address: str) -> list[str]:
    """The live named actors of the cluster, asked by a driver of its own."""
    script = (
        f"import ray;ray.init(address={address!r},log_to_driver=False,logging_level='ERROR');"
        "print('\\n'.join(a['name'] for a in ray.util.list_named_actors(all_namespaces=True)))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return [line for line in out.stdout.splitlines() if line.startswith("run-")]


async def test_cancel_stops_the_worker_on_its_node(tmp_path: Path, cluster: LocalCluster) -> None:
    state = tmp_path / "state"
    proc, ready = await _ray_daemon(state, cluster)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            # Long enough (about 40 s of turns) to outlive the named-actor listing below,
            # which starts a Ray driver in a subprocess: a shorter run could end first.
            run = await stub.CreateRun(synthetic_request(days=10, events=4, turn_ms=1000, run_id="c1"))
            name = actor_name(hashlib.sha256(str(state.resolve()).encode()).hexdigest()[:12], "local/c1")
            async for ev in stub.WatchRun(pb.WatchRunRequest(name=run.name)):
                if ev.WhichOneof("kind") == "turn":
                    break
            assert name in await asyncio.to_thread(_named_actors, cluster.address)
            cancelled = await stub.CancelRun(pb.CancelRunRequest(name=run.name))
            assert cancelled.state == pb.CANCELLED
            events = await _watch(stub, run.name)
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert events[-1].state.state == pb.CANCELLED
            assert name not in await asyncio.to_thread(_named_actors, cluster.address)
    finally:
        await _stop(proc)


async def test_a_killed_node_has_its_runs_resumed_on_the_others(tmp_path: Path, cluster: LocalCluster) -> None:
    proc, ready = await _ray_daemon(tmp_path / "state", cluster)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            created = [
                await stub.CreateRun(synthetic_request(days=3, events=3, turn_ms=400, run_id=f"k{i}")) for i in range(4)
            ]
            first = created[0].name
            acknowledged: list[pb.RunEvent] = []
            async for ev in stub.WatchRun(pb.WatchRunRequest(name=first)):
                acknowledged.append(ev)
                if sum(1 for e in acknowledged if e.WhichOneof("kind") == "turn") == 2:
                    break
            ids = _node_ids(cluster)
            placed = {r.name: (await stub.GetRun(pb.GetRunRequest(name=r.name))).node for r in created}
            victim_label = placed[first]
            victim = next(m for m in cluster.members if m.index == ids[victim_label.split("@")[0]])
            on_victim = [name for name, node in placed.items() if node == victim_label]
            cluster.kill(victim)

            for run in created:
                events = await _watch(stub, run.name)
                assert [e.seq for e in events] == list(range(1, len(events) + 1))
                assert events[-1].state.state == pb.SUCCEEDED, events[-1]
                final = await stub.GetRun(pb.GetRunRequest(name=run.name))
                assert final.results.rounds_graded == 3 and final.results.scheduler.in_order
                states = [e.state.reason for e in events if e.WhichOneof("kind") == "state"]
                moved = [s for s in states if "node" in s and "was lost" in s]
                if run.name in on_victim:
                    assert moved and victim_label in moved[0], states
                    assert final.node != victim_label
                else:
                    assert not moved, states
            # Nothing a watcher was given before the node died is lost or changed.
            history = {e.seq: e.SerializeToString() for e in await _watch(stub, first)}
            for ev in acknowledged:
                assert history[ev.seq] == ev.SerializeToString()
    finally:
        await _stop(proc)
