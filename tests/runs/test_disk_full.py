"""The run manager on a full disk: new work is refused naming the disk, running runs
pause at their last durable point and go on once space is back, nothing acknowledged
(an event a watcher was given) is lost."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sclated.errors import ResourceExhausted
from sclated.runs import ManagerConfig, RunManager, RunSpec, default_registry
from sclated.store import EventRow, Store

T = TypeVar("T")


class FullDiskStore(Store):
    """Test double: a real store whose disk can be declared full (its transactions then
    fail as SQLite's do on a full disk, before anything is written)."""

    full = False

    def _tx(self, fn: Callable[[sqlite3.Connection], T], records: int = 1) -> T:
        def maybe_full(conn: sqlite3.Connection) -> T:
            if self.full:
                raise sqlite3.OperationalError("database or disk is full")
            return fn(conn)

        return super()._tx(maybe_full, records)


SPEC = RunSpec.from_dict(
    {
        "benchmark": {"name": "synthetic", "options": {"days": 4, "events_per_day": 3}},
        "agent": {"harness": "scripted", "options": {"turn_ms": 40}},
    }
)


async def _until(check: Callable[[], Any], timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not await check():
            await asyncio.sleep(0.01)


async def test_a_full_disk_refuses_new_work_pauses_runs_and_loses_nothing(tmp_path: Path) -> None:
    store = FullDiskStore(tmp_path / "sclated.db")
    await store.open()
    m = RunManager(store, default_registry(), ManagerConfig(write_reports=False), runs_dir=tmp_path / "runs")
    free = {"bytes": 1 << 40}
    m.free_bytes = lambda path: free["bytes"]
    await m.start()
    seen: list[EventRow] = []
    try:
        run = await m.create("local", SPEC, run_id="r")

        async def follow() -> None:
            async for ev in m.watch("local", run.name):
                seen.append(ev)

        watcher = asyncio.create_task(follow())

        async def turns(n: int) -> bool:
            return sum(1 for e in seen if e.kind == "turn") >= n

        await _until(lambda: turns(2))
        store.full, free["bytes"] = True, 0

        async def paused() -> bool:
            view = await m.get("local", run.name)
            return view.state == "INTERRUPTED"

        await _until(paused)
        view = await m.get("local", run.name)
        assert view.reason.startswith("paused:") and "disk is full" in view.reason, view.reason
        for attempt in (
            m.create("local", SPEC, run_id="later"),
            m.resume("local", run.name),
        ):
            with pytest.raises(ResourceExhausted) as info:
                await attempt
            assert info.value.reason == "DISK_FULL" and "disk is full" in info.value.message
        acknowledged = list(seen)

        store.full, free["bytes"] = False, 1 << 40

        async def succeeded() -> bool:
            return (await m.get("local", run.name)).state == "SUCCEEDED"

        await _until(succeeded)
        await asyncio.wait_for(watcher, 10)
    finally:
        await m.shutdown(1)
    events = await store.events_after("local/r", 0, 10_000)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    stored = {e.seq: e for e in events}
    assert all(stored[e.seq] == e for e in acknowledged)
    states = [(e.payload["state"], e.payload["reason"]) for e in events if e.kind == "state"]
    assert [s for s, _ in states] == ["PENDING", "RUNNING", "INTERRUPTED", "PENDING", "RUNNING", "SUCCEEDED"]
    assert (await m.get("local", run.name)).results["rounds_graded"] == 4
    assert await m.store.get_run("local/later") is None  # refused: nothing stored
    await store.close()
