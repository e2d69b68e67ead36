"""What the end-to-end tests of per-message harnesses (Codex, Claude Code) share:
following a run over the real daemon's API and reading its captured calls back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiodocker
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.store import Store


async def container_exec(container_id: str, script: str) -> tuple[int, str]:
    """Run ``sh -c script`` in a container, as a harness's shell would: (exit code, output)."""
    async with aiodocker.Docker() as docker:
        c = docker.containers.container(container_id)
        ex = await c.exec(["sh", "-c", script], stdout=True, stderr=True)
        out = bytearray()
        async with ex.start(detach=False) as stream:
            while (msg := await stream.read_out()) is not None:
                out += msg.data
        info = await ex.inspect()
        return int(info["ExitCode"]), out.decode(errors="replace")


async def stored_calls(state: Path, run: str) -> list[dict[str, Any]]:
    """The run's call records from the daemon's store, in the order they were made."""
    store = Store(state / "sclated.db")
    await store.open()
    try:
        calls = await store.calls(run)
    finally:
        await store.close()
    return sorted(calls, key=lambda c: c["timings"]["start_ns"])


async def final(stub: pb_grpc.SclateStub, name: str) -> pb.Run:
    """The run once its event stream ended."""
    async for _ in stub.WatchRun(pb.WatchRunRequest(name=name)):
        pass
    run: pb.Run = await stub.GetRun(pb.GetRunRequest(name=name))
    return run


async def turn_errors(stub: pb_grpc.SclateStub, *names: str) -> list[tuple[str, str, str]]:
    """Each failed turn of the (ended) runs: run, round and the harness's error."""
    return [
        (name, ev.turn.round_id, ev.turn.harness_error)
        for name in names
        async for ev in stub.WatchRun(pb.WatchRunRequest(name=name))
        if ev.WhichOneof("kind") == "turn" and ev.turn.harness_error
    ]


async def turn_ended_in(stub: pb_grpc.SclateStub, name: str, round_prefix: str) -> None:
    """Until the run's first turn of a round starting with ``round_prefix`` ended
    (``"day02/"``: the first graded round of MetaClaw's second day)."""
    async for ev in stub.WatchRun(pb.WatchRunRequest(name=name)):
        if ev.WhichOneof("kind") == "turn" and ev.turn.phase == "ended" and ev.turn.round_id.startswith(round_prefix):
            return
        if ev.WhichOneof("kind") == "state":
            assert ev.state.state in (pb.PENDING, pb.RUNNING), ev.state.reason
    raise AssertionError(f"the run ended before a turn of {round_prefix!r} did")


async def branch_at_day_two(stub: pb_grpc.SclateStub, source: str, new_run_id: str) -> str:
    """A snapshot once the source's first round of day 2 ended, and a branch from it:
    the branch runs only the rest of day 2 (a short tail, and the harness's session
    as the snapshot kept it). Returns the branch's name."""
    await turn_ended_in(stub, source, "day02/")
    snap = await stub.SaveSnapshot(pb.SaveSnapshotRequest(run=source, snapshot_id="day02-first-round"))
    branch = await stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id=new_run_id))
    return str(branch.name)


def own_calls(source: list[dict[str, Any]], branch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The branch's calls made after the snapshot (it also holds the source's earlier
    records, the same ones); asserts it has both kinds."""
    kept = {c["call_id"] for c in source}
    own = [c for c in branch if c["call_id"] not in kept]
    assert own and len(own) < len(branch), (len(own), len(branch))
    return own
