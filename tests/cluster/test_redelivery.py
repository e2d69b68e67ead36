"""A remote worker's records through the manager's RecordSink: a batch delivered twice
(its acknowledgement lost) is stored once, and the run is the same as a local one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters import Judge
from sclated.cluster import BufferedCalls, RecordBuffer
from sclated.errors import FailedPrecondition
from sclated.runs import (
    AdmittedRun,
    Execution,
    ManagerConfig,
    RecordSink,
    Registry,
    RunManager,
    RunOutcome,
    RunSpec,
    RunWorker,
    default_registry,
)
from sclated.store import Store


class _TwiceDelivered:
    """Test double of a remote execution: the worker runs here, reporting to a RecordBuffer,
    and every batch reaches the manager twice before it is acknowledged (the first
    answer's acknowledgement was lost), as a pull repeated after a crash would."""

    def __init__(self, run: AdmittedRun, sink: RecordSink, registry: Registry) -> None:
        self._run, self._sink, self._registry = run, sink, registry
        self.redelivered = 0
        self.applied = 0

    @property
    def worker(self) -> None:
        return None

    @property
    def survives_shutdown(self) -> bool:
        return False

    @property
    def snapshots(self) -> None:
        return None

    def capture_at_close(self) -> dict[str, Any] | None:
        return None

    async def cancel(self) -> None:
        return None

    async def run(self) -> RunOutcome:
        self._sink.running(self._run.running_reason)
        buffer = RecordBuffer(self._sink.next_event_seq())
        # A call the sandbox's capture proxy handed over on the node (twice: its first reply was lost).
        calls = BufferedCalls(buffer, self._run.key)
        for _ in range(2):
            await calls.put_call(self._run.key, "call-1", "agent", {"call_id": "call-1", "role": "agent"})
        worker = await asyncio.to_thread(
            RunWorker, self._run.key, self._run.spec, self._registry, buffer, journal=self._run.journal
        )
        task = asyncio.get_running_loop().create_task(worker.run())
        try:
            return await self._pump(buffer, task)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _pump(self, buffer: RecordBuffer, task: asyncio.Task[RunOutcome]) -> RunOutcome:
        after = 0
        while True:
            batch = await buffer.wait_batch(after, 0.05)
            if not batch.records:
                if task.done():
                    outcome = task.result()
                    return outcome
                continue
            for attempt in range(2):
                for record in batch.records:
                    d = record.data
                    if record.kind == "event":
                        new = self._sink.put_event(d["seq"], d["kind"], d["payload"], d["sim_ns"], d["wall_ns"])
                    elif record.kind == "journal":
                        new = self._sink.put_journal(d)
                    elif record.kind == "call":
                        new = await self._sink.put_call(d["call_id"], d["role"], d["record"])
                    else:
                        self._sink.progress(d["sim_ns"])
                        continue
                    if attempt == 0:
                        assert new, record
                        self.applied += 1
                    else:
                        assert not new, f"a redelivered record was applied again: {record}"
                        self.redelivered += 1
                await self._sink.commit()
            after = batch.records[-1].rseq
            buffer.ack(after)


class _DoubleExecutor:
    """Test double of the Ray executor (see _TwiceDelivered)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.executions: list[_TwiceDelivered] = []

    @property
    def name(self) -> str:
        return "twice"

    async def start(self) -> None:
        return None

    async def prepare(self, run: AdmittedRun, sink: RecordSink, judge: Judge | None) -> Execution:
        execution = _TwiceDelivered(run, sink, self.registry)
        self.executions.append(execution)
        return execution

    async def close(self) -> None:
        return None


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(tmp_path / "state.db")
    await s.open()
    yield s
    await s.close()


async def test_a_twice_delivered_stream_is_stored_once(store: Store) -> None:
    registry = default_registry()
    executor = _DoubleExecutor(registry)
    manager = RunManager(store, registry, ManagerConfig(write_reports=False), executor=executor)
    await manager.start()
    try:
        spec = RunSpec.from_dict(
            {
                "benchmark": {"name": "synthetic", "options": {"days": 2, "events_per_day": 3}},
                "agent": {"harness": "scripted", "options": {"turn_ms": 1}},
            }
        )
        view = await manager.create("acme", spec, run_id="twice")
        events = [ev async for ev in manager.watch("acme", view.name)]
    finally:
        await manager.shutdown(5)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].payload["state"] == "SUCCEEDED", events[-1]
    stored = await store.events_after("acme/twice", 0, 10_000)
    assert [e.seq for e in stored] == [e.seq for e in events]
    journal = await store.journal("acme/twice")
    assert [int(e["seq"]) for e in journal] == list(range(len(journal)))
    assert await store.calls("acme/twice") == [{"call_id": "call-1", "role": "agent"}]
    (execution,) = executor.executions
    assert execution.redelivered == execution.applied > 0
    row = await store.get_run("acme/twice")
    assert row is not None and row.results["rounds_graded"] == 2


async def test_a_remote_run_refuses_a_snapshot_and_can_be_cancelled(store: Store) -> None:
    registry = default_registry()
    manager = RunManager(store, registry, ManagerConfig(write_reports=False), executor=_DoubleExecutor(registry))
    await manager.start()
    try:
        spec = RunSpec.from_dict(
            {
                "benchmark": {"name": "synthetic", "options": {"days": 3, "events_per_day": 3}},
                "agent": {"harness": "scripted", "options": {"turn_ms": 300}},
            }
        )
        view = await manager.create("acme", spec, run_id="far")
        async for ev in manager.watch("acme", view.name):
            if ev.kind == "fire":
                break
        with pytest.raises(FailedPrecondition) as err:
            await manager.save_snapshot("acme", view.name)
        assert err.value.reason == "EXECUTOR_UNSUPPORTED" and "twice executor" in err.value.message
        cancelled = await manager.cancel("acme", view.name)
        assert cancelled.state == "CANCELLED"
    finally:
        await manager.shutdown(5)
