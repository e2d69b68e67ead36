"""Save / restore / branch with the reference harness in a real Docker sandbox: a daemon
process, the embedded model, MetaClaw's tiny scenario."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator
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

FAST = {"max_tokens": 24, "max_steps": 2}
MARK_WS = "/workspace/snapshot-marker.txt"
MARK_MEM = "/memory/snapshot-marker.txt"


def _run(run_id: str) -> pb.CreateRunRequest:
    run = pb.Run(
        benchmark=pb.BenchmarkSpec(name="metaclaw", scenario="tiny"),
        agent=pb.AgentSpec(harness="reference"),
    )
    run.agent.options.update(FAST)
    return pb.CreateRunRequest(run=run, run_id=run_id)


async def _containers(run_id: str) -> list[Any]:
    async with aiodocker.Docker() as docker:
        found: list[Any] = await docker.containers.list(
            all=True, filters=json.dumps({"label": [f"sclate.run={run_id}"]})
        )
        return found


async def _running_container(run_id: str, timeout_s: float = 300) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        for c in await _containers(run_id):
            if c["State"] == "running":
                return str(c["Id"])
        await asyncio.sleep(0.5)
    raise AssertionError(f"no running sandbox for run {run_id} within {timeout_s} s")


async def _until_first_verdict(stub: pb_grpc.SclateStub, name: str) -> None:
    async for ev in stub.WatchRun(pb.WatchRunRequest(name=name)):
        if ev.WhichOneof("kind") == "verdict":
            return
        if ev.WhichOneof("kind") == "state":
            assert ev.state.state in (pb.PENDING, pb.RUNNING), ev.state.reason
    raise AssertionError("the run ended without a verdict")


async def _mark_and_save(stub: pb_grpc.SclateStub, name: str, run_id: str, snapshot_id: str) -> tuple[pb.Snapshot, str]:
    """Write markers into the running sandbox, snapshot it; returns the snapshot and /memory's file list."""
    cid = await _running_container(run_id)
    code, out = await container_exec(cid, f"echo ws-{snapshot_id} > {MARK_WS} && echo mem-{snapshot_id} > {MARK_MEM}")
    assert code == 0, out
    code, memory = await container_exec(cid, "cd /memory && find . -type f | sort")
    assert code == 0 and "snapshot-marker.txt" in memory, memory
    snap: pb.Snapshot = await stub.SaveSnapshot(pb.SaveSnapshotRequest(run=name, snapshot_id=snapshot_id))
    assert snap.image.startswith(f"sclate-snap:{run_id}-") and snap.journal_length > 0
    return snap, memory


async def _check_files(run_id: str, snapshot_id: str, memory: str) -> None:
    cid = await _running_container(run_id)
    code, out = await container_exec(cid, f"cat {MARK_WS} {MARK_MEM}")
    assert code == 0 and out.split() == [f"ws-{snapshot_id}", f"mem-{snapshot_id}"], out
    code, now = await container_exec(cid, "cd /memory && find . -type f | sort")
    assert code == 0 and set(memory.split()) <= set(now.split()), (memory, now)


async def _final(stub: pb_grpc.SclateStub, name: str) -> pb.Run:
    async for _ in stub.WatchRun(pb.WatchRunRequest(name=name)):
        pass
    run: pb.Run = await stub.GetRun(pb.GetRunRequest(name=name))
    return run


@contextlib.asynccontextmanager
async def _cleanup(*run_ids: str) -> AsyncIterator[None]:
    try:
        yield
    finally:
        async with aiodocker.Docker() as docker:
            for run_id in run_ids:
                for c in await _containers(run_id):
                    with contextlib.suppress(aiodocker.DockerError):
                        await docker.containers.container(c["Id"]).delete(force=True)
            images = await docker.images.list(filters={"reference": ["sclate-snap:*"]})
            for image in images:
                for tag in image.get("RepoTags") or []:
                    if any(tag.startswith(f"sclate-snap:{r}-") for r in run_ids):
                        with contextlib.suppress(aiodocker.DockerError):
                            await docker.images.delete(tag)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    assert await proc.wait() == 0


async def test_branch_of_a_sandboxed_run_starts_from_its_files(tmp_path: Path) -> None:
    async with _cleanup("snap-src", "snap-branch"):
        proc, ready = await start_daemon_process(tmp_path / "state")
        try:
            async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
                stub = pb_grpc.SclateStub(ch)
                src = await stub.CreateRun(_run("snap-src"))
                await _until_first_verdict(stub, src.name)
                snap, memory = await _mark_and_save(stub, src.name, "snap-src", "first")
                listed = await stub.ListSnapshots(pb.ListSnapshotsRequest(run=src.name))
                assert [s.name for s in listed.snapshots] == ["runs/snap-src/snapshots/first"]
                assert listed.snapshots[0].image == snap.image

                branch = await stub.RestoreSnapshot(
                    pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id="snap-branch", labels={"exp": "e2e"})
                )
                assert branch.parent == src.name and branch.labels["exp"] == "e2e"
                await _check_files("snap-branch", "first", memory)
                done_src, done_branch = await asyncio.gather(_final(stub, src.name), _final(stub, branch.name))
                assert done_src.state == pb.SUCCEEDED, done_src.state_reason
                assert done_branch.state == pb.SUCCEEDED, done_branch.state_reason
                assert done_branch.results.rounds == done_branch.results.rounds_graded == 6
                s = done_branch.results.scheduler
                assert s.events_fired == s.events_scheduled and s.in_order
                assert await _containers("snap-branch") == []  # gone with the run
                async with aiodocker.Docker() as docker:
                    assert await docker.images.inspect(snap.image)  # the snapshot stays
                    # ... until its run is deleted: then its image goes too.
                    await stub.DeleteRun(pb.DeleteRunRequest(name=src.name))
                    with pytest.raises(aiodocker.exceptions.DockerError):
                        await docker.images.inspect(snap.image)
        finally:
            await _stop(proc)


async def test_restore_into_its_run_after_a_daemon_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with _cleanup("snap-restart"):
        proc, ready = await start_daemon_process(state)
        try:
            async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
                stub = pb_grpc.SclateStub(ch)
                run = await stub.CreateRun(_run("snap-restart"))
                await _until_first_verdict(stub, run.name)
                snap, memory = await _mark_and_save(stub, run.name, "snap-restart", "before-restart")
                cancelled = await stub.CancelRun(pb.CancelRunRequest(name=run.name))
                assert cancelled.state == pb.CANCELLED
        finally:
            await _stop(proc)
        assert await _containers("snap-restart") == []

        proc, ready = await start_daemon_process(state)
        try:
            async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
                stub = pb_grpc.SclateStub(ch)
                listed = await stub.ListSnapshots(pb.ListSnapshotsRequest(run=run.name))
                assert [s.name for s in listed.snapshots] == [snap.name]
                restored = await stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snap.name))
                assert restored.state == pb.PENDING
                await _check_files("snap-restart", "before-restart", memory)
                done = await _final(stub, run.name)
                assert done.state == pb.SUCCEEDED, done.state_reason
                assert done.results.rounds == done.results.rounds_graded == 6
        finally:
            await _stop(proc)
