"""What the end-to-end tests of per-message harnesses (Codex, Claude Code) share:
following a run over the real daemon's API and reading its captured calls back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.store import Store


async def stored_calls(state: Path, run: str) -> list[dict[str, Any]]:
    """The run's call records from the daemon's store, in the order they were made."""
    store = Store(state / "sclated.db")
    await store.open()
    try:
        calls = await store.calls(run)
    finally:
        await store.close()
    return sorted(calls, key=lambda c: c["timings"]["start_ns"])


async def first_turn_ended(stub: pb_grpc.SclateStub, name: str) -> None:
    async for ev in stub.WatchRun(pb.WatchRunRequest(name=name)):
        if ev.WhichOneof("kind") == "turn" and ev.turn.phase == "ended":
            return
        if ev.WhichOneof("kind") == "state":
            assert ev.state.state in (pb.PENDING, pb.RUNNING), ev.state.reason
    raise AssertionError("the run ended before its first turn did")


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
