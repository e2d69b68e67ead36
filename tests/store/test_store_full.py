"""The store on a full disk: the failure says so, nothing of the failed write is kept,
and the store takes writes again once there is space."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sclated.errors import ResourceExhausted
from sclated.store import EventRow, RunRow, Store, WriteBatch


def _batch(run: str, seqs: range) -> WriteBatch:
    batch = WriteBatch()
    batch.events.extend(EventRow(run, seq, "state", 0, 0, {"pad": "x" * 3000}) for seq in seqs)
    batch.update_run(run, last_event_seq=seqs[-1])
    return batch


async def test_a_full_disk_is_named_and_the_store_recovers(tmp_path: Path) -> None:
    store = Store(tmp_path / "sclated.db")
    await store.open()
    try:
        await store.insert_run(RunRow(name="local/r", tenant="local", spec={}, state="RUNNING", create_ns=1))
        await store.write(_batch("local/r", range(1, 3)))
        # SQLite's own "database or disk is full": the database may not grow any more.
        pages = await store._run(lambda: store.conn.execute("PRAGMA page_count").fetchone()[0])
        await store._run(lambda: store.conn.execute(f"PRAGMA max_page_count={pages}"))
        with pytest.raises(ResourceExhausted) as info:
            await store.write(_batch("local/r", range(3, 60)))
        assert info.value.reason == "DISK_FULL"
        assert "disk is full" in info.value.message and str(tmp_path) in info.value.message
        # Nothing of the failed transaction is there, and the connection is not left in it.
        assert [e.seq for e in await store.events_after("local/r", 0)] == [1, 2]
        assert not await store._run(lambda: store.conn.in_transaction)
        # Space again: the same write goes through.
        await store._run(lambda: store.conn.execute("PRAGMA max_page_count=1073741823"))
        await store.write(_batch("local/r", range(3, 60)))
        assert len(await store.events_after("local/r", 0)) == 59
    finally:
        await store.close()


async def test_other_store_errors_are_not_called_a_full_disk(tmp_path: Path) -> None:
    store = Store(tmp_path / "sclated.db")
    await store.open()
    try:
        with pytest.raises(sqlite3.OperationalError):
            await store._run(store._tx, lambda conn: conn.execute("INSERT INTO no_such_table VALUES (1)"))
        assert not await store._run(lambda: store.conn.in_transaction)
    finally:
        await store.close()
