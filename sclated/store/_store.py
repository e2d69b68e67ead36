"""Durable state in one SQLite database (WAL) under the daemon's state directory.

SQLite calls block, so every call runs on one dedicated thread: the event
loop never waits on disk, and the single writer needs no locking of its own.
A write returns only after its transaction committed: what the API
acknowledges is on disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sclated.errors import AlreadyExists, FailedPrecondition, ResourceExhausted
from sclated.store._observer import NO_STORE_OBSERVER, StoreObserver

__all__ = ["EventRow", "ExpiredHistory", "JournalRow", "RunRow", "SpaceReclaimed", "Store", "WriteBatch"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    name TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    seq INTEGER NOT NULL UNIQUE,
    request_id TEXT,
    request_hash TEXT,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    create_ns INTEGER NOT NULL,
    start_ns INTEGER,
    end_ns INTEGER,
    sim_ns INTEGER,
    last_event_seq INTEGER NOT NULL DEFAULT 0,
    results TEXT NOT NULL DEFAULT '{}',
    parent TEXT NOT NULL DEFAULT '',
    history_expired_ns INTEGER,
    events_expired_through INTEGER NOT NULL DEFAULT 0,
    node TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS runs_request ON runs(tenant, request_id) WHERE request_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_tenant ON runs(tenant, seq);
CREATE INDEX IF NOT EXISTS runs_state ON runs(state, seq);
CREATE TABLE IF NOT EXISTS run_events (
    run TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    sim_ns INTEGER NOT NULL,
    wall_ns INTEGER NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (run, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS journal (
    run TEXT NOT NULL,
    seq INTEGER NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (run, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshots (
    name TEXT PRIMARY KEY,
    run TEXT NOT NULL,
    tenant TEXT NOT NULL,
    create_ns INTEGER NOT NULL,
    sim_ns INTEGER NOT NULL,
    journal_length INTEGER NOT NULL,
    info TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
    run TEXT NOT NULL,
    call_id TEXT NOT NULL,
    role TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run, call_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS restores (
    run TEXT PRIMARY KEY,
    snapshot TEXT NOT NULL,
    dir TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(slots=True)
class RunRow:
    name: str
    tenant: str
    spec: dict[str, Any]
    state: str
    create_ns: int
    seq: int = 0
    request_id: str | None = None
    request_hash: str | None = None
    reason: str = ""
    start_ns: int | None = None
    end_ns: int | None = None
    sim_ns: int | None = None
    last_event_seq: int = 0
    results: dict[str, Any] = field(default_factory=dict)
    parent: str = ""
    history_expired_ns: int | None = None
    """When retention removed the run's history (events, journal, captured calls);
    None while it is kept. A restore into the run brings journal and calls back."""
    events_expired_through: int = 0
    """The run's events up to this sequence number are gone (0: none are)."""
    node: str = ""
    """Where the run's worker runs or last ran: a cluster node (executor ``ray``); empty
    for the daemon's own process."""


@dataclass(frozen=True, slots=True)
class EventRow:
    run: str
    seq: int
    kind: str
    sim_ns: int
    wall_ns: int
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class JournalRow:
    run: str
    seq: int
    entry: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ExpiredHistory:
    """What :meth:`Store.expire_history` removed of one run."""

    run: str
    events: int
    journal: int
    calls: int


@dataclass(frozen=True, slots=True)
class SpaceReclaimed:
    """The database's files (main, WAL, shared memory) before and after :meth:`Store.reclaim_space`."""

    bytes_before: int
    bytes_after: int
    pages_freed: int
    pages_left: int
    """Free pages still in the file (more than ``max_pages`` were free)."""
    bytes_freed: int
    """What the pages freed now held: the file is that much smaller than it would be."""


@dataclass(slots=True)
class WriteBatch:
    """Everything one flush commits in a single transaction."""

    inserts: list[RunRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)
    journal: list[JournalRow] = field(default_factory=list)
    run_updates: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.inserts or self.events or self.journal or self.run_updates)

    def update_run(self, name: str, **fields: Any) -> None:
        self.run_updates.setdefault(name, {}).update(fields)


_RUN_COLUMNS = (
    "name, tenant, seq, request_id, request_hash, spec, state, reason, create_ns, start_ns, "
    "end_ns, sim_ns, last_event_seq, results, parent, history_expired_ns, events_expired_through, node"
)
_INSERT_RUN = f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES ({','.join('?' * len(_RUN_COLUMNS.split(',')))})"
# Columns added after the first release: an older database gets them at open.
_ADDED_RUN_COLUMNS = {
    "history_expired_ns": "INTEGER",
    "events_expired_through": "INTEGER NOT NULL DEFAULT 0",
    "node": "TEXT NOT NULL DEFAULT ''",
}
_UPDATABLE = {
    "state",
    "reason",
    "start_ns",
    "end_ns",
    "sim_ns",
    "last_event_seq",
    "results",
    "spec",
    "node",
}


def _run_values(row: RunRow) -> tuple[Any, ...]:
    return (
        row.name,
        row.tenant,
        row.seq,
        row.request_id,
        row.request_hash,
        json.dumps(row.spec),
        row.state,
        row.reason,
        row.create_ns,
        row.start_ns,
        row.end_ns,
        row.sim_ns,
        row.last_event_seq,
        json.dumps(row.results),
        row.parent,
        row.history_expired_ns,
        row.events_expired_through,
        row.node,
    )


def _row_to_run(r: Sequence[Any]) -> RunRow:
    return RunRow(
        name=r[0],
        tenant=r[1],
        seq=r[2],
        request_id=r[3],
        request_hash=r[4],
        spec=json.loads(r[5]),
        state=r[6],
        reason=r[7],
        create_ns=r[8],
        start_ns=r[9],
        end_ns=r[10],
        sim_ns=r[11],
        last_event_seq=r[12],
        results=json.loads(r[13]),
        parent=r[14],
        history_expired_ns=r[15],
        events_expired_through=r[16],
        node=r[17],
    )


_SQLITE_FULL = 13
_SIZE_EVERY_S = 5.0
"""How often (at most) a commit measures the database's files for the observer: a
flusher commits every few milliseconds, and three stat calls each time would be waste."""


def _disk_full(exc: BaseException) -> bool:
    """A write failed for want of space (SQLite's FULL, or ENOSPC/EDQUOT from the OS)."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    code = getattr(exc, "sqlite_errorcode", None)
    return (isinstance(code, int) and code & 0xFF == _SQLITE_FULL) or "disk is full" in str(exc)


class Store:
    def __init__(self, path: Path, *, synchronous: str = "NORMAL", observer: StoreObserver = NO_STORE_OBSERVER) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
        self.path = path
        self.synchronous = synchronous
        self.observer = observer
        """Told of every commit and, now and then, of the database's size (see StoreObserver)."""
        self._sized_at = -_SIZE_EVERY_S
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sclated-store")
        self._conn: sqlite3.Connection | None = None

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        await self._run(self._open_sync)

    def _open_sync(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        # Pages freed by deletes (retention, DeleteRun) go back to the file system with
        # PRAGMA incremental_vacuum (see reclaim_space). Takes effect only in a new
        # database, so before the first table; an older one is converted by
        # enable_incremental_vacuum.
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a commit survives a crash or SIGKILL of the daemon
        # (the WAL is written before COMMIT returns); only an OS crash or power
        # loss can drop the last transactions. FULL would fsync every commit.
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.executescript(_SCHEMA)
        have = {str(r[1]) for r in conn.execute("PRAGMA table_info(runs)")}
        for column, decl in _ADDED_RUN_COLUMNS.items():
            if column not in have:
                conn.execute(f"ALTER TABLE runs ADD COLUMN {column} {decl}")
        self._conn = conn
        self._note_size(time.perf_counter())

    async def close(self) -> None:
        if self._conn is not None:
            await self._run(self._conn.close)
            self._conn = None
        self._pool.shutdown(wait=True)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, fn, *args)

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise FailedPrecondition("the store is not open")
        return self._conn

    def _note_size(self, now: float) -> None:
        self._sized_at = now
        self.observer.on_db_size(self._file_bytes())

    def _tx(self, fn: Callable[[sqlite3.Connection], T], records: int = 1) -> T:
        """Run ``fn`` in one write transaction (on the store's thread); ``records``: how
        many rows it writes, for the observer."""
        conn = self.conn
        try:
            began = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                # SQLite may have rolled back already (a full disk does that), and a
                # failed COMMIT leaves the transaction open: end it either way, or the
                # next BEGIN fails for good.
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
        except (sqlite3.Error, OSError) as exc:
            if _disk_full(exc):
                raise ResourceExhausted(
                    f"the state directory's disk is full ({self.path.parent}: {exc})",
                    reason="DISK_FULL",
                ) from exc
            raise
        done = time.perf_counter()
        self.observer.on_commit(records, done - began)
        if done - self._sized_at >= _SIZE_EVERY_S:
            self._note_size(done)
        return out

    # -- runs ---------------------------------------------------------------
    async def insert_run(self, row: RunRow) -> RunRow:
        def tx(conn: sqlite3.Connection) -> RunRow:
            nxt = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM runs").fetchone()[0]
            row.seq = nxt
            try:
                conn.execute(_INSERT_RUN, _run_values(row))
            except sqlite3.IntegrityError as exc:
                raise AlreadyExists(f"run {row.name!r} already exists", field="run_id") from exc
            return row

        return await self._run(self._tx, tx)

    async def get_run(self, name: str) -> RunRow | None:
        def q() -> RunRow | None:
            r = self.conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE name=?", (name,)).fetchone()
            return _row_to_run(r) if r else None

        return await self._run(q)

    async def find_request(self, tenant: str, request_id: str) -> RunRow | None:
        def q() -> RunRow | None:
            r = self.conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant=? AND request_id=?",
                (tenant, request_id),
            ).fetchone()
            return _row_to_run(r) if r else None

        return await self._run(q)

    async def list_runs(
        self,
        tenant: str,
        *,
        after_seq: int,
        limit: int,
        states: Iterable[str] = (),
    ) -> list[RunRow]:
        states = list(states)

        def q() -> list[RunRow]:
            sql = f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant=? AND seq>?"
            args: list[Any] = [tenant, after_seq]
            if states:
                sql += f" AND state IN ({','.join('?' * len(states))})"
                args.extend(states)
            sql += " ORDER BY seq LIMIT ?"
            args.append(limit)
            return [_row_to_run(r) for r in self.conn.execute(sql, args)]

        return await self._run(q)

    async def max_run_seq(self) -> int:
        return await self._run(lambda: int(self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM runs").fetchone()[0]))

    async def request_index(self) -> dict[tuple[str, str], str]:
        def q() -> dict[tuple[str, str], str]:
            rows = self.conn.execute("SELECT tenant, request_id, name FROM runs WHERE request_id IS NOT NULL")
            return {(r[0], r[1]): r[2] for r in rows}

        return await self._run(q)

    async def state_counts(self) -> dict[tuple[str, str], int]:
        """How many runs each (tenant, state) has."""

        def q() -> dict[tuple[str, str], int]:
            rows = self.conn.execute("SELECT tenant, state, COUNT(*) FROM runs GROUP BY tenant, state")
            return {(str(r[0]), str(r[1])): int(r[2]) for r in rows}

        return await self._run(q)

    async def runs_in_states(self, states: Iterable[str]) -> list[RunRow]:
        states = list(states)

        def q() -> list[RunRow]:
            sql = f"SELECT {_RUN_COLUMNS} FROM runs WHERE state IN ({','.join('?' * len(states))}) ORDER BY seq"
            return [_row_to_run(r) for r in self.conn.execute(sql, states)]

        return await self._run(q)

    async def update_run(self, name: str, **fields: Any) -> None:
        batch = WriteBatch()
        batch.update_run(name, **fields)
        await self.write(batch)

    async def delete_run(self, name: str) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            for table, col in (
                ("run_events", "run"),
                ("journal", "run"),
                ("snapshots", "run"),
                ("calls", "run"),
                ("restores", "run"),
            ):
                conn.execute(f"DELETE FROM {table} WHERE {col}=?", (name,))
            conn.execute("DELETE FROM runs WHERE name=?", (name,))

        await self._run(self._tx, tx)

    # -- batched writes -------------------------------------------------------
    async def write(self, batch: WriteBatch) -> None:
        if not batch:
            return

        def tx(conn: sqlite3.Connection) -> None:
            for row in batch.inserts:
                conn.execute(_INSERT_RUN, _run_values(row))
            if batch.events:
                conn.executemany(
                    "INSERT OR IGNORE INTO run_events (run, seq, kind, sim_ns, wall_ns, payload) VALUES (?,?,?,?,?,?)",
                    [(e.run, e.seq, e.kind, e.sim_ns, e.wall_ns, json.dumps(e.payload)) for e in batch.events],
                )
            if batch.journal:
                conn.executemany(
                    "INSERT OR REPLACE INTO journal (run, seq, entry) VALUES (?,?,?)",
                    [(j.run, j.seq, json.dumps(j.entry)) for j in batch.journal],
                )
            for name, fields in batch.run_updates.items():
                bad = set(fields) - _UPDATABLE
                if bad:
                    raise ValueError(f"not updatable: {sorted(bad)}")
                cols = ", ".join(f"{k}=?" for k in fields)
                vals = [json.dumps(v) if k in ("results", "spec") else v for k, v in fields.items()]
                conn.execute(f"UPDATE runs SET {cols} WHERE name=?", (*vals, name))

        records = len(batch.inserts) + len(batch.events) + len(batch.journal) + len(batch.run_updates)
        await self._run(self._tx, tx, records)

    # -- events and journal -----------------------------------------------------
    async def events_after(self, run: str, after_seq: int, limit: int = 1000) -> list[EventRow]:
        def q() -> list[EventRow]:
            rows = self.conn.execute(
                "SELECT run, seq, kind, sim_ns, wall_ns, payload FROM run_events "
                "WHERE run=? AND seq>? ORDER BY seq LIMIT ?",
                (run, after_seq, limit),
            )
            return [EventRow(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in rows]

        return await self._run(q)

    async def journal(self, run: str) -> list[dict[str, Any]]:
        def q() -> list[dict[str, Any]]:
            rows = self.conn.execute("SELECT entry FROM journal WHERE run=? ORDER BY seq", (run,))
            return [json.loads(r[0]) for r in rows]

        return await self._run(q)

    async def truncate_journal(self, run: str, length: int) -> None:
        await self._run(
            self._tx,
            lambda c: c.execute("DELETE FROM journal WHERE run=? AND seq>=?", (run, length)),
        )

    # -- snapshots ---------------------------------------------------------------
    async def insert_snapshot(
        self,
        name: str,
        run: str,
        tenant: str,
        create_ns: int,
        sim_ns: int,
        journal_length: int,
        info: dict[str, Any],
    ) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(
                    "INSERT INTO snapshots (name, run, tenant, create_ns, sim_ns, journal_length, info) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (name, run, tenant, create_ns, sim_ns, journal_length, json.dumps(info)),
                )
            except sqlite3.IntegrityError as exc:
                raise AlreadyExists(f"snapshot {name!r} already exists", field="snapshot_id") from exc

        await self._run(self._tx, tx)

    async def get_snapshot(self, name: str) -> dict[str, Any] | None:
        def q() -> dict[str, Any] | None:
            r = self.conn.execute(
                "SELECT name, run, tenant, create_ns, sim_ns, journal_length, info FROM snapshots WHERE name=?",
                (name,),
            ).fetchone()
            if r is None:
                return None
            return {
                "name": r[0],
                "run": r[1],
                "tenant": r[2],
                "create_ns": r[3],
                "sim_ns": r[4],
                "journal_length": r[5],
                "info": json.loads(r[6]),
            }

        return await self._run(q)

    async def list_snapshots(self, run: str) -> list[dict[str, Any]]:
        def q() -> list[str]:
            return [
                r[0] for r in self.conn.execute("SELECT name FROM snapshots WHERE run=? ORDER BY create_ns", (run,))
            ]

        out = []
        for name in await self._run(q):
            snap = await self.get_snapshot(name)
            if snap is not None:
                out.append(snap)
        return out

    async def restore_run(
        self,
        row: RunRow,
        *,
        insert: bool,
        event: EventRow,
        journal: Sequence[dict[str, Any]],
        calls: Sequence[dict[str, Any]],
        snapshot: str,
        snapshot_dir: str,
    ) -> None:
        """Put a run at a snapshot in one transaction.

        ``insert``: a new run (a branch; AlreadyExists if the name is taken);
        otherwise the existing run's state fields are updated. Either way its
        journal and call records become exactly ``journal`` and ``calls``, its
        event log gets ``event``, and the run is marked to restore its agent
        from ``snapshot_dir`` when it next starts (see :meth:`restore_marker`).
        """

        def tx(conn: sqlite3.Connection) -> None:
            if insert:
                try:
                    conn.execute(_INSERT_RUN, _run_values(row))
                except sqlite3.IntegrityError as exc:
                    raise AlreadyExists(f"run {row.name!r} already exists", field="new_run_id") from exc
            else:
                # The snapshot's journal and calls come back; expired events stay expired.
                cur = conn.execute(
                    "UPDATE runs SET state=?, reason=?, end_ns=?, sim_ns=?, results=?, last_event_seq=?, "
                    "history_expired_ns=NULL WHERE name=?",
                    (
                        row.state,
                        row.reason,
                        row.end_ns,
                        row.sim_ns,
                        json.dumps(row.results),
                        row.last_event_seq,
                        row.name,
                    ),
                )
                if cur.rowcount != 1:
                    raise FailedPrecondition(f"run {row.name!r} is gone")
            conn.execute("DELETE FROM journal WHERE run=?", (row.name,))
            conn.executemany(
                "INSERT INTO journal (run, seq, entry) VALUES (?,?,?)",
                [(row.name, int(e["seq"]), json.dumps(e)) for e in journal],
            )
            conn.execute("DELETE FROM calls WHERE run=?", (row.name,))
            conn.executemany(
                "INSERT INTO calls (run, call_id, role, record) VALUES (?,?,?,?)",
                [(row.name, str(c["call_id"]), str(c.get("role", "")), json.dumps(c)) for c in calls],
            )
            conn.execute(
                "INSERT INTO run_events (run, seq, kind, sim_ns, wall_ns, payload) VALUES (?,?,?,?,?,?)",
                (event.run, event.seq, event.kind, event.sim_ns, event.wall_ns, json.dumps(event.payload)),
            )
            conn.execute(
                "INSERT OR REPLACE INTO restores (run, snapshot, dir) VALUES (?,?,?)",
                (row.name, snapshot, snapshot_dir),
            )

        await self._run(self._tx, tx)

    async def restore_marker(self, run: str) -> tuple[str, str] | None:
        """(snapshot name, snapshot dir) the run restores its agent from when it next starts."""

        def q() -> tuple[str, str] | None:
            r = self.conn.execute("SELECT snapshot, dir FROM restores WHERE run=?", (run,)).fetchone()
            return (str(r[0]), str(r[1])) if r else None

        return await self._run(q)

    async def clear_restore_marker(self, run: str) -> None:
        await self._run(self._tx, lambda c: c.execute("DELETE FROM restores WHERE run=?", (run,)))

    # -- captured calls ----------------------------------------------------------
    async def put_call(self, run: str, call_id: str, role: str, record: dict[str, Any]) -> bool:
        """Store a call record; False when that call id was already stored (a re-delivery)."""

        def tx(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "INSERT OR IGNORE INTO calls (run, call_id, role, record) VALUES (?,?,?,?)",
                (run, call_id, role, json.dumps(record)),
            )
            return cur.rowcount == 1

        return await self._run(self._tx, tx)

    async def calls(self, run: str) -> list[dict[str, Any]]:
        def q() -> list[dict[str, Any]]:
            return [json.loads(r[0]) for r in self.conn.execute("SELECT record FROM calls WHERE run=?", (run,))]

        return await self._run(q)

    # -- retention --------------------------------------------------------------------
    async def runs_to_expire(self, states: Iterable[str], ended_before_ns: int, limit: int = 100) -> list[str]:
        """Runs in ``states`` that ended before ``ended_before_ns`` and still hold their
        history, the longest-ended first."""
        states = list(states)

        def q() -> list[str]:
            sql = (
                f"SELECT name FROM runs WHERE state IN ({','.join('?' * len(states))}) "
                "AND end_ns IS NOT NULL AND end_ns < ? AND history_expired_ns IS NULL ORDER BY end_ns LIMIT ?"
            )
            return [str(r[0]) for r in self.conn.execute(sql, (*states, ended_before_ns, limit))]

        return await self._run(q)

    async def expire_history(
        self, name: str, *, states: Iterable[str], ended_before_ns: int, now_ns: int
    ) -> ExpiredHistory | None:
        """Remove a finished run's history in one transaction: its events, journal and
        captured call records go and the run is marked (``history_expired_ns``,
        ``events_expired_through``); its row, results and snapshots stay.

        The conditions are checked again inside the transaction (the run may have been
        restored or deleted since it was picked): None when they no longer hold. A
        crash leaves the run either untouched or entirely expired."""
        states = list(states)

        def tx(conn: sqlite3.Connection) -> ExpiredHistory | None:
            row = conn.execute(
                f"SELECT last_event_seq FROM runs WHERE name=? AND state IN ({','.join('?' * len(states))}) "
                "AND end_ns IS NOT NULL AND end_ns < ? AND history_expired_ns IS NULL",
                (name, *states, ended_before_ns),
            ).fetchone()
            if row is None:
                return None
            removed = [
                conn.execute(f"DELETE FROM {table} WHERE run=?", (name,)).rowcount
                for table in ("run_events", "journal", "calls")
            ]
            conn.execute(
                "UPDATE runs SET history_expired_ns=?, events_expired_through=MAX(events_expired_through, ?) "
                "WHERE name=?",
                (now_ns, int(row[0]), name),
            )
            return ExpiredHistory(name, removed[0], removed[1], removed[2])

        return await self._run(self._tx, tx)

    async def reclaim_space(self, max_pages: int = 0) -> SpaceReclaimed:
        """Give up to ``max_pages`` (0: all) of the pages that deletes freed back to the
        file system (an incremental vacuum), then checkpoint, which shrinks the file and
        empties the WAL. Each step is a transaction of SQLite's own: a crash in between
        leaves free pages for the next call, nothing else."""

        def q() -> SpaceReclaimed:
            conn = self.conn
            before = self._file_bytes()
            free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
            # It steps once per page moved: fetch every row, or it stops early.
            conn.execute(f"PRAGMA incremental_vacuum({max(0, int(max_pages))})").fetchall()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            left = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
            page = int(conn.execute("PRAGMA page_size").fetchone()[0])
            self._note_size(time.perf_counter())  # the file shrank: the observer hears it now
            return SpaceReclaimed(before, self._file_bytes(), free - left, left, (free - left) * page)

        return await self._run(q)

    def _file_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                total += (self.path.parent / (self.path.name + suffix)).stat().st_size
        return total

    async def file_bytes(self) -> int:
        """The database's size on disk: the main file, its WAL and shared memory."""
        return await self._run(self._file_bytes)

    async def free_pages(self) -> int:
        """Pages in the file that deletes freed and no vacuum returned yet."""
        return await self._run(lambda: int(self.conn.execute("PRAGMA freelist_count").fetchone()[0]))

    async def auto_vacuum(self) -> str:
        """``none``, ``full`` or ``incremental``: whether freed pages can leave the file."""
        mode = await self._run(lambda: int(self.conn.execute("PRAGMA auto_vacuum").fetchone()[0]))
        return {0: "none", 1: "full", 2: "incremental"}.get(mode, str(mode))

    async def enable_incremental_vacuum(self) -> None:
        """Convert a database made before incremental vacuum (a full VACUUM: it rewrites
        the file, needing as much free disk again, and holds the store meanwhile)."""

        def q() -> None:
            self.conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self.conn.execute("VACUUM")
            # In WAL mode the rewritten pages are in the WAL until a checkpoint.
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

        await self._run(q)
