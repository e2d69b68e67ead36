"""Retention in the store: which runs lose their history, what stays, the file
shrinking, an old database brought up to date, and a crash in the middle."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sclated.errors import InvalidArgument
from sclated.runs import TERMINAL_STATES, HistoryExpiry, Retention, format_duration, parse_duration
from sclated.store import EventRow, JournalRow, RunRow, Store, WriteBatch

S = 1_000_000_000
HOUR = 3600 * S
NOW = 1_800_000_000 * S
"""The wall clock the tests' sweeps read (a fixed point: retention counts wall time)."""


def _row(name: str, state: str, end_ns: int | None) -> RunRow:
    return RunRow(
        name=f"t/{name}",
        tenant="t",
        spec={"benchmark": {"name": "synthetic"}, "agent": {"harness": "scripted"}},
        state=state,
        create_ns=NOW - 100 * HOUR,
        end_ns=end_ns,
        results={"score": 0.5, "round_scores": [{"round_id": "d0", "graded": True, "score": 0.5}]},
    )


async def _add(store: Store, row: RunRow, *, events: int = 5, payload_bytes: int = 100) -> None:
    """A run with ``events`` events, as many journal entries and calls, each ~payload_bytes."""
    await store.insert_run(row)
    batch = WriteBatch()
    blob = "x" * payload_bytes
    for i in range(1, events + 1):
        batch.events.append(EventRow(row.name, i, "fire", i, i, {"blob": blob}))
        batch.journal.append(JournalRow(row.name, i - 1, {"seq": i - 1, "t": "fire", "blob": blob}))
    batch.update_run(row.name, last_event_seq=events)
    await store.write(batch)
    for i in range(events):
        await store.put_call(row.name, f"c{i}", "agent", {"call_id": f"c{i}", "blob": blob})


def _counts(db: Path, run: str) -> tuple[int, int, int]:
    with sqlite3.connect(db) as conn:
        return (
            conn.execute("SELECT COUNT(*) FROM run_events WHERE run=?", (run,)).fetchone()[0],
            conn.execute("SELECT COUNT(*) FROM journal WHERE run=?", (run,)).fetchone()[0],
            conn.execute("SELECT COUNT(*) FROM calls WHERE run=?", (run,)).fetchone()[0],
        )


def _expiry(store: Store, after_s: float = 3600, now_ns: int = NOW) -> HistoryExpiry:
    return HistoryExpiry(store, Retention(after_s), TERMINAL_STATES, now_ns=lambda: now_ns)


async def test_only_runs_finished_longer_ago_than_the_retention_lose_their_history(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    await store.open()
    try:
        old = NOW - 2 * HOUR
        await _add(store, _row("old-ok", "SUCCEEDED", old))
        await _add(store, _row("old-failed", "FAILED", old))
        await _add(store, _row("old-cancelled", "CANCELLED", old))
        await _add(store, _row("young", "SUCCEEDED", NOW - HOUR // 2))
        await _add(store, _row("running", "RUNNING", None))
        await _add(store, _row("pending", "PENDING", None))
        # Interrupted: it resumes from its journal, so it keeps it however long ago it stopped.
        await _add(store, _row("interrupted", "INTERRUPTED", old))
        await store.insert_snapshot("t/old-ok/snapshots/s1", "t/old-ok", "t", old, 5, 3, {"calls": ["c0"]})

        report = await _expiry(store).sweep()

        assert report.runs == 3 and report.events == 15 and report.journal == 15 and report.calls == 15
        for name in ("old-ok", "old-failed", "old-cancelled"):
            row = await store.get_run(f"t/{name}")
            assert row is not None
            assert row.history_expired_ns == NOW and row.events_expired_through == 5
            assert row.results["round_scores"][0]["score"] == 0.5 and row.end_ns == old  # results kept
            assert _counts(store.path, f"t/{name}") == (0, 0, 0)
        for name in ("young", "running", "pending", "interrupted"):
            row = await store.get_run(f"t/{name}")
            assert row is not None and row.history_expired_ns is None and row.events_expired_through == 0
            assert _counts(store.path, f"t/{name}") == (5, 5, 5), name
        # Snapshots hold their own journal and calls: they stay, and branches from them work.
        assert await store.get_snapshot("t/old-ok/snapshots/s1") is not None
        # A second sweep finds nothing more to do.
        assert (await _expiry(store).sweep()).runs == 0
    finally:
        await store.close()


async def test_retention_counts_wall_time_since_the_run_ended(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    await store.open()
    try:
        ended = NOW - HOUR
        await _add(store, _row("r", "SUCCEEDED", ended))
        assert (await _expiry(store, 3600, now_ns=ended + 3600 * S - 1).sweep()).runs == 0
        assert (await _expiry(store, 3600, now_ns=ended + 3600 * S + 1).sweep()).runs == 1
    finally:
        await store.close()


async def test_a_run_restored_after_it_was_picked_keeps_its_history(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    await store.open()
    try:
        await _add(store, _row("r", "SUCCEEDED", NOW - 2 * HOUR))
        picked = await store.runs_to_expire(TERMINAL_STATES, NOW - HOUR)
        assert picked == ["t/r"]
        await store.update_run("t/r", state="PENDING", end_ns=None)  # restored meanwhile
        gone = await store.expire_history("t/r", states=TERMINAL_STATES, ended_before_ns=NOW - HOUR, now_ns=NOW)
        assert gone is None and _counts(store.path, "t/r") == (5, 5, 5)
    finally:
        await store.close()


async def test_a_restore_into_an_expired_run_brings_journal_and_calls_back(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    await store.open()
    try:
        row = _row("r", "SUCCEEDED", NOW - 2 * HOUR)
        await _add(store, row)
        await _expiry(store).sweep()
        expired = await store.get_run("t/r")
        assert expired is not None and expired.history_expired_ns is not None
        expired.state, expired.end_ns, expired.last_event_seq = "PENDING", None, 6
        await store.restore_run(
            expired,
            insert=False,
            event=EventRow("t/r", 6, "state", 0, NOW, {"state": "PENDING"}),
            journal=[{"seq": 0, "t": "fire"}],
            calls=[{"call_id": "c0", "role": "agent"}],
            snapshot="runs/r/snapshots/s1",
            snapshot_dir=str(tmp_path),
        )
        back = await store.get_run("t/r")
        assert back is not None and back.history_expired_ns is None
        assert back.events_expired_through == 5  # events 1..5 stay gone
        assert _counts(store.path, "t/r") == (1, 1, 1)
    finally:
        await store.close()


async def test_the_file_shrinks(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    await store.open()
    try:
        assert await store.auto_vacuum() == "incremental"  # a new database
        for i in range(40):
            await _add(store, _row(f"r{i}", "SUCCEEDED", NOW - 2 * HOUR), events=20, payload_bytes=2000)
        await store.reclaim_space()  # checkpoint: the WAL into the file
        full = await store.file_bytes()
        assert full > 40 * 60 * 2000  # 40 runs x 60 rows x 2 kB

        report = await _expiry(store).sweep()

        assert report.runs == 40 and report.bytes_before >= full
        size = await store.file_bytes()
        assert report.bytes_after == size
        assert size < full / 10, (full, size)
        assert report.bytes_freed > (full - size) / 2  # what the soak reports as reclaimed
    finally:
        await store.close()


async def test_without_incremental_vacuum_the_file_would_not_shrink(tmp_path: Path) -> None:
    """The check above can fail: a database made before incremental vacuum keeps its
    size after the deletes until HistoryExpiry.start converts it."""
    db = tmp_path / "old.db"
    _old_database(db, runs=40)
    store = Store(db)
    await store.open()
    try:
        assert await store.auto_vacuum() == "none"
        full = await store.file_bytes()
        await _expiry(store).sweep()  # no conversion: sweep() alone does not start anything
        assert await store.file_bytes() >= full * 0.9
        expiry = _expiry(store)
        await expiry.start()  # converts (a full VACUUM)
        await expiry.stop()
        assert await store.auto_vacuum() == "incremental"
        assert await store.file_bytes() < full / 10
    finally:
        await store.close()


_OLD_SCHEMA = """
CREATE TABLE runs (name TEXT PRIMARY KEY, tenant TEXT NOT NULL, seq INTEGER NOT NULL UNIQUE,
  request_id TEXT, request_hash TEXT, spec TEXT NOT NULL, state TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '', create_ns INTEGER NOT NULL, start_ns INTEGER, end_ns INTEGER,
  sim_ns INTEGER, last_event_seq INTEGER NOT NULL DEFAULT 0, results TEXT NOT NULL DEFAULT '{}',
  parent TEXT NOT NULL DEFAULT '');
CREATE TABLE run_events (run TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
  sim_ns INTEGER NOT NULL, wall_ns INTEGER NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (run, seq)) WITHOUT ROWID;
"""


def _old_database(db: Path, runs: int) -> None:
    """A database as the daemon made it before retention: no expiry columns, no auto vacuum."""
    with sqlite3.connect(db) as conn:
        conn.executescript(_OLD_SCHEMA)
        for i in range(runs):
            conn.execute(
                "INSERT INTO runs (name, tenant, seq, spec, state, create_ns, end_ns, last_event_seq, results) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                (f"t/r{i}", "t", i + 1, "{}", "SUCCEEDED", 0, NOW - 2 * HOUR, 40, json.dumps({"score": 1.0})),
            )
            conn.executemany(
                "INSERT INTO run_events VALUES (?,?,?,?,?,?)",
                [(f"t/r{i}", s, "fire", 0, 0, json.dumps({"blob": "y" * 3000})) for s in range(1, 41)],
            )


async def test_an_old_database_gets_the_new_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    _old_database(db, runs=2)
    store = Store(db)
    await store.open()
    try:
        row = await store.get_run("t/r0")
        assert row is not None and row.history_expired_ns is None and row.events_expired_through == 0
        assert row.results == {"score": 1.0}
        assert len(await store.events_after("t/r0", 0)) == 40
        assert (await _expiry(store).sweep()).runs == 2
    finally:
        await store.close()
    store = Store(db)  # opened again: the columns are there, nothing added twice
    await store.open()
    try:
        row = await store.get_run("t/r1")
        assert row is not None and row.history_expired_ns == NOW
    finally:
        await store.close()


_SWEEPER = """
import asyncio, sys
from pathlib import Path
from sclated.runs import TERMINAL_STATES, HistoryExpiry, Retention
from sclated.store import Store

class Telling(Store):
    # Says what it did, so that the test can kill it at a chosen point.
    async def expire_history(self, *args, **kwargs):
        out = await super().expire_history(*args, **kwargs)
        print("expired", flush=True)
        return out

    async def reclaim_space(self, max_pages=0):
        print("vacuum", flush=True)
        return await super().reclaim_space(max_pages)

async def main() -> None:
    store = Telling(Path(sys.argv[1]))
    await store.open()
    await HistoryExpiry(store, Retention(3600), TERMINAL_STATES, now_ns=lambda: int(sys.argv[2])).sweep()
    print("done", flush=True)

asyncio.run(main())
"""


def _fill(db: Path, runs: int, rows: int, payload_bytes: int) -> None:
    """``runs`` finished runs with ``rows`` events, journal entries and calls each, in
    one transaction (the store's own writes, one per call, would take minutes here)."""
    blob = json.dumps({"blob": "x" * payload_bytes})
    with sqlite3.connect(db) as conn:
        for i in range(runs):
            name = f"t/r{i}"
            conn.execute(
                "INSERT INTO runs (name, tenant, seq, spec, state, create_ns, end_ns, last_event_seq, results) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                (name, "t", i + 1, "{}", "SUCCEEDED", 0, NOW - 2 * HOUR, rows, json.dumps({"score": 0.5})),
            )
            events = [(name, s, "fire", 0, 0, blob) for s in range(1, rows + 1)]
            conn.executemany("INSERT INTO run_events VALUES (?,?,?,?,?,?)", events)
            conn.executemany("INSERT INTO journal VALUES (?,?,?)", [(name, s, blob) for s in range(rows)])
            calls = [(name, f"c{s}", "agent", blob) for s in range(rows)]
            conn.executemany("INSERT INTO calls VALUES (?,?,?,?)", calls)


# After the first run's transaction, in the middle, after the last one (before the
# vacuum), and once the vacuum began.
@pytest.mark.parametrize("kill_after", ["expired:1", "expired:30", "expired:60", "vacuum:1"])
async def test_a_crash_mid_sweep_leaves_every_run_whole_or_expired(tmp_path: Path, kill_after: str) -> None:
    """SIGKILL a real sweeping process at a chosen point (in the middle of the runs'
    transactions, or once it reclaims space): each run is either untouched or entirely
    expired and marked, the database is intact, and the next sweep finishes the job,
    the freed pages included."""
    db = tmp_path / "s.db"
    store = Store(db)
    await store.open()
    await store.close()
    n, rows, payload = 60, 20, 1500
    _fill(db, n, rows, payload)
    what, count = kill_after.split(":")

    proc = subprocess.Popen(
        [sys.executable, "-c", _SWEEPER, str(db), str(NOW)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:
        seen += line.strip() == what
        if seen == int(count):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the sweep ended before the kill"

    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = Store(db)
    await store.open()
    try:
        expired = 0
        for i in range(n):
            row = await store.get_run(f"t/r{i}")
            assert row is not None and row.results == {"score": 0.5}
            counts = _counts(db, row.name)
            if row.history_expired_ns is None:
                assert counts == (rows, rows, rows) and row.events_expired_through == 0, (i, counts)
            else:
                assert counts == (0, 0, 0) and row.events_expired_through == rows, (i, counts)
                expired += 1
        # Killed right after the k-th transaction: k of them, or a few more that committed
        # before the signal landed, but not all (the kill was in the middle of the sweep).
        least = int(count) if what == "expired" else n
        assert least <= expired and (expired < n or least == n), (kill_after, expired)
        report = await _expiry(store).sweep()
        assert report.runs == n - expired
        assert all(_counts(db, f"t/r{i}") == (0, 0, 0) for i in range(n))
        assert await store.free_pages() == 0
        assert await store.file_bytes() < n * 3 * rows * payload / 10
    finally:
        await store.close()


def test_durations() -> None:
    assert parse_duration("7d") == 7 * 86400
    assert parse_duration("12h") == 12 * 3600
    assert parse_duration("1d12h") == 36 * 3600
    assert parse_duration("90m") == parse_duration("1h30m") == 5400
    assert parse_duration(" 30s ") == 30
    for off in ("", "0", "off", "forever", "OFF"):
        assert parse_duration(off) == 0
    for bad in ("7", "7 days", "-1d", "1.5h", "h", "0h", "1d 2h", "d1"):
        with pytest.raises(InvalidArgument) as info:
            parse_duration(bad)
        assert info.value.field == "retention" and repr(bad) in info.value.message
    for text in ("7d", "1d12h", "30s", "1h30m", "off"):
        assert format_duration(parse_duration(text)) == text
    assert format_duration(90) == "1m30s"


def test_the_sweep_interval_is_a_tenth_of_the_retention_within_bounds() -> None:
    assert Retention(7 * 86400).sweep_interval_s == 600
    assert Retention(600).sweep_interval_s == 60
    assert Retention(5).sweep_interval_s == 1
    assert not Retention(0).enabled and Retention(1).enabled
    with pytest.raises(InvalidArgument):
        Retention(-1)


def test_the_predicted_expiry_is_the_end_plus_the_retention() -> None:
    row = _row("r", "SUCCEEDED", NOW)
    assert Retention(3600).expires_ns(row, TERMINAL_STATES) == NOW + HOUR
    assert Retention(0).expires_ns(row, TERMINAL_STATES) is None
    assert Retention(3600).expires_ns(_row("p", "RUNNING", None), TERMINAL_STATES) is None
    assert Retention(3600).expires_ns(_row("i", "INTERRUPTED", NOW), TERMINAL_STATES) is None
    row.history_expired_ns = NOW + 5
    assert Retention(3600).expires_ns(row, TERMINAL_STATES) == NOW + 5
