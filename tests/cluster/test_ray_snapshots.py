"""Snapshots of runs on the Ray executor, kept in the shared ``cluster_snapshot_dir``: a real
daemon with --executor ray, a cluster of a head and two nodes on this machine (sharing its
one Docker engine), the MetaClaw ``tiny`` scenario with the ``reference`` harness.

The nodes share one engine here, so the committed image is removed from it before a
restore: the restored runs can only have it from the ``docker save`` archive in the
shared directory."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
from pathlib import Path
from typing import Any

import aiodocker
import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench import start_daemon_process
from sclated.cluster import LocalCluster
from tests.api.conftest import synthetic_request
from tests.cluster.test_ray_sandboxed import _create

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.model]


async def _daemon(state: Path, cluster: LocalCluster, *extra: str) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    return await start_daemon_process(
        state, "--executor", "ray", "--ray-address", cluster.address, "--drain-grace-s", "0.5", *extra, timeout_s=120
    )


async def _stop(proc: asyncio.subprocess.Process) -> None:
    proc.send_signal(signal.SIGTERM)
    assert await proc.wait() == 0


async def _first_turn(stub: pb_grpc.SclateStub, name: str) -> None:
    async for ev in stub.WatchRun(pb.WatchRunRequest(name=name)):
        if ev.WhichOneof("kind") == "turn":
            return
    raise AssertionError(f"run {name} ended before its first turn")


async def _shared_daemon(tmp_path: Path, cluster: LocalCluster) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    """A daemon whose snapshots go to ``tmp_path/snapshots`` (as a shared file system would)."""
    shared = tmp_path / "snapshots"
    shared.mkdir()
    return await _daemon(tmp_path / "state", cluster, "--cluster-snapshot-dir", str(shared))


async def _snapshot_after_first_turn(stub: pb_grpc.SclateStub, run_id: str) -> tuple[pb.Run, pb.Snapshot]:
    """A MetaClaw ``tiny`` run of day01, snapshotted (``s1``) after its first turn."""
    created = await _create(stub, run_id, ["day01"])
    await _first_turn(stub, created.name)
    snap = await stub.SaveSnapshot(pb.SaveSnapshotRequest(run=created.name, snapshot_id="s1", at_turn_boundary=True))
    return created, snap


async def _events(stub: pb_grpc.SclateStub, name: str) -> list[pb.RunEvent]:
    return [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=name))]


async def _image_id(ref: str) -> str | None:
    async with aiodocker.Docker() as docker:
        try:
            return str((await docker.images.inspect(ref))["Id"])
        except aiodocker.DockerError:
            return None


async def _remove_images(prefix: str) -> None:
    async with aiodocker.Docker() as docker:
        for image in await docker.images.list():
            for tag in image.get("RepoTags") or ():
                if tag.startswith(prefix):
                    with contextlib.suppress(aiodocker.DockerError):
                        await docker.images.delete(tag, force=True)


async def test_a_snapshot_on_a_node_goes_to_the_shared_dir_and_its_branches_load_the_image(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    proc, ready = await _shared_daemon(tmp_path, cluster)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            created, snap = await _snapshot_after_first_turn(stub, "mc-snap")
            assert snap.name == "runs/mc-snap/snapshots/s1" and snap.image.startswith("sclate-snap:mc-snap-")
            # Published whole in the shared directory: the exported image, the archives, the
            # journal prefix and the calls; no temporary directory left beside it.
            d = tmp_path / "snapshots" / "local" / "mc-snap" / "s1"
            assert (d / "sandbox" / "image.tar").stat().st_size > 0
            assert (d / "sandbox" / "workspace.tar").is_file()
            journal = (d / "journal.jsonl").read_text().splitlines()
            assert len(journal) == snap.journal_length > 0
            assert (d / "calls.jsonl").is_file()
            assert sorted(p.name for p in d.parent.iterdir()) == ["s1"]
            listed = await stub.ListSnapshots(pb.ListSnapshotsRequest(run=created.name))
            assert [s.name for s in listed.snapshots] == [snap.name]
            source = await _events(stub, created.name)
            assert source[-1].state.state == pb.SUCCEEDED, source[-1]

            image_id = await _image_id(snap.image)
            assert image_id is not None
            await _remove_images(snap.image)
            assert await _image_id(snap.image) is None

            branched = await stub.BranchRun(pb.BranchRunRequest(snapshot=snap.name, count=2))
            assert len(branched.runs) == 2
            for run in branched.runs:
                events = await _events(stub, run.name)
                assert events[-1].state.state == pb.SUCCEEDED, events[-1]
                final = await stub.GetRun(pb.GetRunRequest(name=run.name))
                assert final.node and final.results.rounds == final.results.rounds_graded >= 1
                reasons = [e.state.reason for e in events if e.WhichOneof("kind") == "state"]
                assert any(f"from {snap.name}" in r for r in reasons), reasons
            # Only the archive in the shared directory holds that image: the branches loaded it.
            assert await _image_id(snap.image) == image_id
    finally:
        await _stop(proc)
        # The exported image is hundreds of MB: not left in pytest's kept directories.
        await asyncio.to_thread(shutil.rmtree, tmp_path / "snapshots", True)
        await _remove_images("sclate-snap:mc-snap-")


async def test_a_snapshot_without_cluster_snapshot_dir_is_refused_naming_the_key(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    """No shared directory: a run on the cluster may move, so no snapshot of it is taken."""
    proc, ready = await _daemon(tmp_path / "state", cluster)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = await stub.CreateRun(synthetic_request(days=3, events=3, turn_ms=400, run_id="nosnap"))
            await _first_turn(stub, run.name)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.SaveSnapshot(pb.SaveSnapshotRequest(run=run.name, snapshot_id="s1"))
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "cluster_snapshot_dir" in (refused.value.details() or "")
            listed = await stub.ListSnapshots(pb.ListSnapshotsRequest(run=run.name))
            assert list(listed.snapshots) == []
            await stub.CancelRun(pb.CancelRunRequest(name=run.name))
    finally:
        await _stop(proc)


async def test_a_sandboxed_run_whose_node_dies_resumes_from_its_snapshot_on_another_node(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    """Last in this module: it kills one of the two nodes."""
    proc, ready = await _shared_daemon(tmp_path, cluster)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            created, snap = await _snapshot_after_first_turn(stub, "mc-move")
            image_id = await _image_id(snap.image)
            # The engine is shared by both nodes here: only the archive can bring the image back.
            await _remove_images(snap.image)
            placed = (await stub.GetRun(pb.GetRunRequest(name=created.name))).node
            ids = {m.node_id[:16]: m for m in cluster.members}
            cluster.kill(ids[placed.split("@")[0]])

            events = await _events(stub, created.name)
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert events[-1].state.state == pb.SUCCEEDED, events[-1]
            reasons = [e.state.reason for e in events if e.WhichOneof("kind") == "state"]
            moved = [r for r in reasons if "was lost" in r]
            assert moved and "its snapshot s1" in moved[0] and placed in moved[0], reasons
            final = await stub.GetRun(pb.GetRunRequest(name=created.name))
            assert final.node and final.node != placed
            assert await _image_id(snap.image) == image_id
    finally:
        await _stop(proc)
        # The exported image is hundreds of MB: not left in pytest's kept directories.
        await asyncio.to_thread(shutil.rmtree, tmp_path / "snapshots", True)
        await _remove_images("sclate-snap:mc-move-")
