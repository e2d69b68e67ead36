"""The daemon's garbage collection: the lazy thresholds it runs with never free old
cyclic garbage by themselves; its GarbageCollector does, on a schedule."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from sclated.daemon._gc import DAEMON_GC_THRESHOLDS, GarbageCollector


class Node:
    """A cycle: it refers to itself, so reference counting never frees it."""

    def __init__(self) -> None:
        self.me = self
        self.payload = bytearray(1024)


@pytest.fixture
def daemon_thresholds() -> Iterator[None]:
    old = gc.get_threshold()
    gc.set_threshold(*DAEMON_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _old_garbage() -> weakref.ref[Node]:
    """A cycle that was alive during a young collection (so it is in the old generation),
    then dropped: what a run's objects or a report's figure become."""
    node = Node()
    ref = weakref.ref(node)
    gc.collect(1)  # node is alive: the survivors move to the old generation
    del node
    return ref


async def test_old_cyclic_garbage_is_freed_by_the_collector_only(daemon_thresholds: None) -> None:
    ref = _old_garbage()
    for _ in range(20):  # young collections (a report's, or automatic ones) leave it
        gc.collect(1)
    assert ref() is not None
    collector = GarbageCollector(interval_s=0.05)
    collector.start()
    try:
        async with asyncio.timeout(10):
            while ref() is not None:
                await asyncio.sleep(0.02)
    finally:
        await collector.stop()
    assert collector.collections >= 1 and not collector.running
    assert collector.last_pause_ms >= 0


async def test_the_collector_stops_and_starts_once(daemon_thresholds: None) -> None:
    collector = GarbageCollector(interval_s=10)
    collector.start()
    task = collector._task
    collector.start()
    assert collector._task is task and collector.running
    await collector.stop()
    assert not collector.running and task is not None and task.done()
    await collector.stop()  # nothing left to stop
    with pytest.raises(ValueError):
        GarbageCollector(interval_s=0)
