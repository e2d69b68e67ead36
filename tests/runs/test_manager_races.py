"""The same request at once (a client's retry racing its first try), found by `sclated bench fuzz`:
both calls passed the checks, the second insert failed in the flusher, which retried it for ever,
and the daemon stored nothing more (every later CreateRun waited forever)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import pytest

from sclated.errors import AlreadyExists, FailedPrecondition
from sclated.runs import RunManager, RunSpec, default_registry
from sclated.store import RunRow, Store

T = TypeVar("T")
SPEC = RunSpec.from_dict(
    {
        "benchmark": {"name": "synthetic", "options": {"days": 1, "events_per_day": 1}},
        "agent": {"harness": "scripted", "options": {"turn_ms": 0}},
    }
)


@pytest.fixture
async def manager(store: Store) -> AsyncIterator[RunManager]:
    m = RunManager(store, default_registry())
    await m.start()
    yield m
    # Bounded: with a stuck flusher, shutdown (which flushes) would never return.
    await asyncio.wait_for(m.shutdown(grace_s=5), 20)


async def at_once(*calls: Awaitable[T]) -> list[T | BaseException]:
    """The calls concurrently, bounded: with a stuck flusher they would wait for ever."""
    return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 15)


async def still_stores(manager: RunManager, run_id: str) -> None:
    """A later create is committed (the flusher is not stuck on a failed batch)."""
    await asyncio.wait_for(manager.create("alice", SPEC, run_id=run_id), 10)
    assert await manager.store.get_run(f"alice/{run_id}") is not None


async def test_the_same_run_id_at_once_creates_one_run(manager: RunManager) -> None:
    got = await at_once(*(manager.create("alice", SPEC, run_id="same") for _ in range(4)))
    assert sum(1 for g in got if not isinstance(g, BaseException)) == 1
    assert all(isinstance(g, AlreadyExists) for g in got if isinstance(g, BaseException))
    await still_stores(manager, "later")


async def test_the_same_request_id_at_once_returns_one_run(manager: RunManager) -> None:
    got = await at_once(*(manager.create("alice", SPEC, request_id="retry-1") for _ in range(4)))
    names = {v.name if not isinstance(v, BaseException) else repr(v) for v in got}
    assert len(names) == 1
    runs, _ = await manager.list("alice")
    assert [v.name for v in runs] == list(names)
    await still_stores(manager, "later")


async def test_one_resume_of_an_interrupted_run_at_a_time(store: Store) -> None:
    await store.insert_run(
        RunRow(name="alice/paused", tenant="alice", spec=SPEC.to_dict(), state="INTERRUPTED", create_ns=1, seq=1)
    )
    m = RunManager(store, default_registry())
    await m.start()
    try:
        got = await at_once(*(m.resume("alice", "runs/paused") for _ in range(3)))
        assert sum(1 for g in got if not isinstance(g, BaseException)) == 1
        assert all(isinstance(g, FailedPrecondition) for g in got if isinstance(g, BaseException))
        await still_stores(m, "later")
        events = await store.events_after("alice/paused", 0, 100)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
    finally:
        await asyncio.wait_for(m.shutdown(grace_s=5), 20)


async def test_names_leave_the_lock_table_once_free(manager: RunManager) -> None:
    await at_once(*(manager.create("alice", SPEC, run_id=f"r{i}", request_id=f"q{i}") for i in range(20)))
    with pytest.raises(AlreadyExists):
        await manager.create("alice", SPEC, run_id="r0")
    assert len(manager._locks) == 0
