"""Many runs in one daemon: admission, tenants, durability, watchers.

Everything a run reports (events, journal entries, state) goes into one
write batch that a flusher commits every few milliseconds in a single SQLite
transaction; watchers see an event only after it is committed, so a client
never holds an event that a crash could take back. Calls that acknowledge a
change (create, cancel, resume) wait for the commit.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters import missing_capabilities
from sclated.capture import ExportReport, Sample, check_export_args
from sclated.clock import ClockMode
from sclated.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    SclateError,
    Unavailable,
    describe,
)
from sclated.report import write_report
from sclated.runs._data_roots import DataRoots
from sclated.runs._executor import AdmittedRun, Execution, Executor, LocalExecutor
from sclated.runs._health import (
    capture_totals,
    memory_token_share,
    run_warnings,
    summarize_calls,
    summarize_components,
)
from sclated.runs._observe import NO_RUNS_OBSERVER, RunsObserver, StateCounts
from sclated.runs._registry import Registry
from sclated.runs._retention import HistoryExpiry, Retention, check_events_kept, check_history_kept
from sclated.runs._snapshots import RestorePlan, Snapshots, SnapshotView
from sclated.runs._spec import RunSpec, validate_run_id, validate_tenant
from sclated.runs._trajectories import export_run, export_run_group, reward_mode_of, run_samples, trainable_roles
from sclated.runs._worker import RunOutcome, RunWorker, load_scenario
from sclated.store import EventRow, JournalRow, RunRow, Store, WriteBatch

__all__ = ["ACTIVE_STATES", "STATES", "TERMINAL_STATES", "ManagerConfig", "RunManager", "RunView"]

log = logging.getLogger("sclated.runs")

TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
ACTIVE_STATES = frozenset({"PENDING", "RUNNING"})
STATES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "INTERRUPTED")
"""Every state a run can be in."""
_SHUTDOWN_FLUSH_S = 30.0
"""How long a shutdown waits for its last write (a full disk may never take it)."""
MAX_PAGE_SIZE = 1000
MAX_BRANCHES = 64
DEFAULT_PAGE_SIZE = 50


@dataclass(frozen=True, slots=True)
class ManagerConfig:
    max_running: int = 64
    """Runs executing at once; the rest wait PENDING in creation order."""
    tenant_max_running: int = 64
    tenant_max_active: int = 10_000
    """PENDING + RUNNING runs one tenant may have; more is RESOURCE_EXHAUSTED."""
    flush_interval_s: float = 0.01
    memory_events: int = 4096
    """Recent committed events kept per live run, so watchers rarely hit the disk."""
    resume_on_start: bool = True
    write_reports: bool = True
    """A report (JSON, Markdown, timeline PNG) in the run's directory when it ends."""
    min_free_bytes: int = 16 * 1024 * 1024
    """New work (a run, a resume, a restore, a snapshot) is refused while the state
    directory's disk has less free space than this: what it would write could not be kept."""
    retention_s: float = 0.0
    """Wall seconds after a run ended when its history (events, journal, captured calls)
    expires; 0 keeps it forever (see sclated.runs._retention)."""

    def __post_init__(self) -> None:
        for name in ("max_running", "tenant_max_running", "tenant_max_active", "memory_events"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"{name} must be at least 1", field=name)
        if self.min_free_bytes < 0:
            raise InvalidArgument("min_free_bytes must not be negative", field="min_free_bytes")
        if not 0 < self.flush_interval_s <= 1:
            raise InvalidArgument("flush_interval_s must be in (0, 1]", field="flush_interval_s")
        if self.retention_s < 0:
            raise InvalidArgument("retention_s must not be negative", field="retention_s")


@dataclass(frozen=True, slots=True)
class RunView:
    """A run as the API shows it."""

    run_id: str
    tenant: str
    spec: RunSpec
    state: str
    reason: str
    create_ns: int
    start_ns: int | None
    end_ns: int | None
    sim_ns: int | None
    last_event_seq: int
    results: dict[str, Any]
    parent: str
    history_expire_ns: int | None = None
    """When retention expired the run's history, or will (None: kept)."""
    history_expired: bool = False
    node: str = ""
    """The cluster node its worker runs or last ran on (empty: the daemon's own process)."""

    @property
    def name(self) -> str:
        return f"runs/{self.run_id}"


@dataclass(eq=False, slots=True)
class _Live:
    row: RunRow
    next_seq: int
    resume: bool = False
    task: asyncio.Task[None] | None = None
    stop_reason: str = ""
    committed: list[EventRow] = field(default_factory=list)
    uncommitted: list[EventRow] = field(default_factory=list)
    notify: asyncio.Event = field(default_factory=asyncio.Event)
    finished: bool = False
    ending: bool = False
    """Its worker has returned: the run is being summarized and its end written, which a
    cancellation must not cut short (the end would be written with nobody to finish it)."""
    worker: RunWorker | None = None
    execution: Execution | None = None
    next_journal_seq: int = 0
    """The journal sequence number the run's next entry takes (records from a remote
    worker below it were stored before: a redelivery)."""

    @property
    def key(self) -> str:
        return self.row.name


def branch_seed(group_id: str, index: int) -> int:
    """Run ``index`` of a group's sampling seed when the request names none: stable for
    the group (a replay or a resumed branch samples the same), different per run."""
    return int.from_bytes(hashlib.sha256(f"{group_id}\0{index}".encode()).digest()[:8], "big") >> 1


def _key(tenant: str, run_id: str) -> str:
    return f"{tenant}/{run_id}"


def _run_id_of(key: str) -> str:
    return key.split("/", 1)[1]


def parse_run_name(name: str, field_name: str = "name") -> str:
    if not name.startswith("runs/"):
        raise InvalidArgument(f"{field_name} {name!r} must look like 'runs/{{run}}'", field=field_name)
    return validate_run_id(name[5:], field_name)


def _view(row: RunRow, retention: Retention) -> RunView:
    return RunView(
        run_id=_run_id_of(row.name),
        tenant=row.tenant,
        spec=RunSpec.from_dict(row.spec),
        state=row.state,
        reason=row.reason,
        create_ns=row.create_ns,
        start_ns=row.start_ns,
        end_ns=row.end_ns,
        sim_ns=row.sim_ns,
        last_event_seq=row.last_event_seq,
        results=row.results,
        parent=row.parent,
        history_expire_ns=retention.expires_ns(row, TERMINAL_STATES),
        history_expired=row.history_expired_ns is not None,
        node=row.node,
    )


@dataclass(frozen=True, slots=True)
class _Filter:
    states: tuple[str, ...] = ()
    benchmark: str | None = None
    harness: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    group: str | None = None

    @classmethod
    def parse(cls, text: str) -> _Filter:
        states: list[str] = []
        benchmark = harness = group = None
        labels: list[tuple[str, str]] = []
        text = text.strip()
        if not text:
            return cls()
        for term in text.split(" AND "):
            key, sep, value = term.strip().partition("=")
            key, value = key.strip(), value.strip().strip('"')
            if not sep or not key or not value:
                raise InvalidArgument(f"filter term {term.strip()!r} is not 'field=value'", field="filter")
            if key == "state":
                if value.upper() not in STATES:
                    raise InvalidArgument(f"filter: unknown state {value!r}", field="filter")
                states.append(value.upper())
            elif key == "benchmark":
                benchmark = value
            elif key == "harness":
                harness = value
            elif key == "group":
                group = value
            elif key.startswith("labels.") and len(key) > 7:
                labels.append((key[7:], value))
            else:
                raise InvalidArgument(
                    f"filter: unknown field {key!r} (state, benchmark, harness, group, labels.KEY)",
                    field="filter",
                )
        if len(states) > 1:
            raise InvalidArgument("filter: at most one state term", field="filter")
        return cls(tuple(states), benchmark, harness, tuple(labels), group)

    def matches(self, row: RunRow) -> bool:
        if self.states and row.state not in self.states:
            return False
        if self.benchmark is not None and row.spec["benchmark"]["name"] != self.benchmark:
            return False
        if self.harness is not None and row.spec["agent"]["harness"] != self.harness:
            return False
        if self.group is not None and (row.spec.get("group") or {}).get("id") != self.group:
            return False
        row_labels = row.spec.get("labels", {})
        return all(row_labels.get(k) == v for k, v in self.labels)


class _NameLocks:
    """A lock per name (a run key, a request id), held in the table only while someone
    holds or waits for it: a long-lived daemon sees millions of names."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, *names: str) -> AsyncIterator[None]:
        """Hold every lock of ``names``, taken in sorted order (overlapping sets never deadlock)."""
        registered: list[str] = []
        acquired: set[str] = set()
        try:
            for name in sorted(set(names)):
                lock, users = self._locks.get(name) or (asyncio.Lock(), 0)
                self._locks[name] = (lock, users + 1)
                registered.append(name)
                await lock.acquire()
                acquired.add(name)
            yield
        finally:
            for name in reversed(registered):
                lock, users = self._locks[name]
                if name in acquired:
                    lock.release()
                if users == 1:
                    del self._locks[name]
                else:
                    self._locks[name] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class _Sink:
    """A RunSink (and RecordSink, for a remote worker) bound to one live run."""

    def __init__(self, manager: RunManager, live: _Live) -> None:
        self._m = manager
        self._live = live

    def emit(self, kind: str, payload: dict[str, Any], sim_ns: int) -> None:
        self._m._emit(self._live, kind, payload, sim_ns)

    def journal(self, entry: dict[str, Any]) -> None:
        seq = int(entry["seq"])
        self._live.next_journal_seq = max(self._live.next_journal_seq, seq + 1)
        self._m._batch.journal.append(JournalRow(self._live.key, seq, entry))
        self._m._kick()

    def progress(self, sim_ns: int) -> None:
        self._live.row.sim_ns = sim_ns
        self._m._batch.update_run(self._live.key, sim_ns=sim_ns)

    # -- RecordSink: a remote worker's records -----------------------------------------
    def running(self, reason: str) -> None:
        live = self._live
        self._m._set_state(live, "RUNNING", reason, start_ns=live.row.start_ns or time.time_ns())

    def next_event_seq(self) -> int:
        return self._live.next_seq

    def put_event(self, seq: int, kind: str, payload: dict[str, Any], sim_ns: int, wall_ns: int) -> bool:
        live = self._live
        if seq < live.next_seq:
            return False
        if seq > live.next_seq:
            raise FailedPrecondition(
                f"run {live.key}: its worker sent event {seq} while event {live.next_seq} is the next one",
                reason="RECORD_GAP",
            )
        self._m._emit(live, kind, payload, sim_ns, wall_ns=wall_ns)
        return True

    def put_journal(self, entry: dict[str, Any]) -> bool:
        if int(entry["seq"]) < self._live.next_journal_seq:
            return False
        self.journal(entry)
        return True

    async def put_call(self, call_id: str, role: str, record: dict[str, Any]) -> bool:
        return await self._m.store.put_call(self._live.key, call_id, role, record)

    def placed(self, node: str) -> None:
        self._live.row.node = node
        self._m._batch.update_run(self._live.key, node=node)
        self._m._kick()

    async def commit(self) -> None:
        await self._m.flush()

    async def durable_journal(self) -> list[dict[str, Any]]:
        await self._m.flush()
        journal = [dict(e) for e in await self._m.store.journal(self._live.key)]
        self._live.next_journal_seq = max((int(e["seq"]) + 1 for e in journal), default=0)
        return journal


class RunManager:
    def __init__(
        self,
        store: Store,
        registry: Registry,
        config: ManagerConfig | None = None,
        *,
        runs_dir: Path | None = None,
        data_roots: DataRoots | None = None,
        observer: RunsObserver = NO_RUNS_OBSERVER,
        executor: Executor | None = None,
    ) -> None:
        self.store = store
        self.observer = observer
        """Told of fires, jumps, deliveries and snapshots as they happen (the daemon's metrics)."""
        self._states = StateCounts()
        """Runs per (tenant, state), moved with every change made here (see state_counts)."""
        self.executor: Executor = executor or LocalExecutor(registry, observer)
        """Where admitted runs' workers execute (the daemon itself unless configured)."""
        self.runs_dir = runs_dir
        self.registry = registry
        self.data_roots = data_roots or DataRoots.build(builtin=registry.builtin_data())
        """The host paths a tenant's runs may name (by default only the benchmarks' own data)."""
        self.config = config or ManagerConfig()
        self._live: dict[str, _Live] = {}
        self._queue: OrderedDict[str, None] = OrderedDict()
        self._running: set[str] = set()
        self._requests: dict[tuple[str, str], str] = {}
        self._batch = WriteBatch()
        self._flush_waiters: list[asyncio.Future[None]] = []
        self._flush_wakeup = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._accepting = False
        self._seq = 0
        self.judge_factory: Any = None
        self.on_delete: Callable[[str], Awaitable[None]] | None = None
        self.snapshots = Snapshots(store, registry, runs_dir, self.flush, observer)
        """Save snapshots and read them into restore plans (see sclated.runs._snapshots)."""
        self._locks = _NameLocks()
        """Serialize the calls that make or change one run (a key) or use one request id."""
        self.disk_full: str | None = None
        """Why the last write failed for want of space; None once a write succeeded again."""
        self.free_bytes: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free
        """The free space of the disk holding ``path`` (a test double may replace it)."""
        self._reports = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sclated-report")
        """Reports are drawn one at a time, on this thread (see _conclude)."""
        self.retention = Retention(self.config.retention_s)
        self.history_expiry = HistoryExpiry(store, self.retention, TERMINAL_STATES)
        """Expires finished runs' history under ``retention`` (started with the manager)."""

    def _view(self, row: RunRow) -> RunView:
        return _view(row, self.retention)

    # -- lifecycle ------------------------------------------------------------
    async def start(self) -> None:
        await self.executor.start()
        self._seq = await self.store.max_run_seq()
        self._requests = await self.store.request_index()
        # Before anything changes state below (a run interrupted by the restart).
        self._states.load(await self.store.state_counts())
        self._flusher = asyncio.get_running_loop().create_task(self._flush_loop(), name="sclated-flusher")
        for row in await self.store.runs_in_states(["RUNNING", "PENDING"]):
            live = _Live(row, row.last_event_seq + 1)
            self._live[row.name] = live
            if row.state == "RUNNING":
                if self.config.resume_on_start:
                    live.resume = True
                    self._queue[row.name] = None
                    self._queue.move_to_end(row.name, last=False)
                else:
                    await self._finish(
                        live,
                        "INTERRUPTED",
                        "the daemon restarted while the run was running; "
                        "ResumeRun continues it from its last durable point",
                    )
            else:
                self._queue[row.name] = None
        # Before runs start: converting an old database to incremental vacuum holds the store.
        await self.history_expiry.start()
        self._accepting = True
        self._admit()

    async def shutdown(self, grace_s: float) -> None:
        """Stop admitting, let running runs finish for ``grace_s``, interrupt the rest, persist."""
        self._accepting = False
        await self.history_expiry.stop()
        tasks = [lv.task for lv in self._live.values() if lv.task is not None and not lv.task.done()]
        if tasks:
            _, still = await asyncio.wait(tasks, timeout=grace_s)
            for lv in self._live.values():
                if lv.task is not None and lv.task in still:
                    lv.stop_reason = "shutdown"
                    if lv.worker is not None:
                        lv.worker.keep_sandbox = True
                    lv.task.cancel()
            if still:
                await asyncio.wait(still)
        await self.executor.close()
        try:
            await asyncio.wait_for(self.flush(), _SHUTDOWN_FLUSH_S)
        except TimeoutError:
            # A full disk: what could not be written was never acknowledged; the runs resume
            # from their last durable point at the next start.
            log.error("shutting down without persisting the last changes: %s", self.disk_full or "the store is stuck")
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        await asyncio.to_thread(self._reports.shutdown)

    # -- writes ----------------------------------------------------------------
    def _kick(self) -> None:
        self._flush_wakeup.set()

    async def flush(self) -> None:
        """Return once everything reported so far is committed."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append(fut)
        self._kick()
        if self._flusher is None or self._flusher.done():
            await self._flush_once()
        await fut

    async def _flush_loop(self) -> None:
        while True:
            await self._flush_wakeup.wait()
            # Coalesce what arrives in the next few milliseconds into one transaction.
            await asyncio.sleep(self.config.flush_interval_s)
            self._flush_wakeup.clear()
            try:
                await self._flush_once()
            except Exception as exc:
                if isinstance(exc, ResourceExhausted) and exc.reason == "DISK_FULL":
                    self._on_disk_full(exc.message)
                else:
                    log.exception("flushing run state failed; retrying")
                await asyncio.sleep(0.5)
                self._kick()
            else:
                if self.disk_full is not None:
                    log.warning("the state directory has space again: writes go through, paused runs resume")
                    self.disk_full = None
                    self._admit()

    async def _flush_once(self) -> None:
        batch, self._batch = self._batch, WriteBatch()
        waiters, self._flush_waiters = self._flush_waiters, []
        touched = [lv for lv in self._live.values() if lv.uncommitted]
        moved = {id(lv): lv.uncommitted for lv in touched}
        for lv in touched:
            lv.uncommitted = []
        try:
            await self.store.write(batch)
        except BaseException:
            # Put everything back in front of what arrived meanwhile.
            batch.inserts.extend(self._batch.inserts)
            batch.events.extend(self._batch.events)
            batch.journal.extend(self._batch.journal)
            for k, v in self._batch.run_updates.items():
                batch.run_updates.setdefault(k, {}).update(v)
            self._batch = batch
            for lv in touched:
                lv.uncommitted = moved[id(lv)] + lv.uncommitted
            self._flush_waiters = waiters + self._flush_waiters
            raise
        for lv in touched:
            lv.committed.extend(moved[id(lv)])
            if len(lv.committed) > self.config.memory_events:
                del lv.committed[: len(lv.committed) - self.config.memory_events]
            old, lv.notify = lv.notify, asyncio.Event()
            old.set()
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _on_disk_full(self, message: str) -> None:
        """The state directory's disk is full: running runs pause at their last durable
        point (INTERRUPTED, naming the disk; their sandboxes kept), and continue by
        themselves once a write goes through again. Nothing new is admitted meanwhile."""
        if self.disk_full is None:
            log.error("%s; running runs pause until space is freed, new work is refused", message)
        self.disk_full = message
        for live in self._live.values():
            if live.task is not None and not live.task.done() and not live.stop_reason and not live.ending:
                live.stop_reason = "disk_full"
                if live.worker is not None:
                    live.worker.keep_sandbox = True
                live.task.cancel()

    async def _check_space(self) -> None:
        """ResourceExhausted (DISK_FULL) while the state directory cannot keep new work."""
        reason = self.disk_full
        if reason is None:
            path = self.store.path.parent
            try:
                free = await asyncio.to_thread(self.free_bytes, path)
            except OSError:
                return  # not knowing is no reason to refuse; a failed write will say
            if free >= self.config.min_free_bytes:
                return
            reason = (
                f"the state directory's disk is full ({path}: {free} bytes free, "
                f"under the {self.config.min_free_bytes} new work needs)"
            )
        raise ResourceExhausted(
            f"{reason}; new work is refused until space is freed (what was acknowledged is kept)",
            reason="DISK_FULL",
        )

    def _emit(self, live: _Live, kind: str, payload: dict[str, Any], sim_ns: int, *, wall_ns: int = 0) -> None:
        seq = live.next_seq
        live.next_seq += 1
        row = EventRow(live.key, seq, kind, sim_ns, wall_ns or time.time_ns(), payload)
        live.uncommitted.append(row)
        live.row.last_event_seq = seq
        self._batch.events.append(row)
        self._batch.update_run(live.key, last_event_seq=seq)
        self._kick()

    def _set_state(self, live: _Live, state: str, reason: str, **fields: Any) -> None:
        self._states.move(live.row.tenant, live.row.state, state)
        live.row.state = state
        live.row.reason = reason
        for k, v in fields.items():
            setattr(live.row, k, v)
        self._batch.update_run(live.key, state=state, reason=reason, **fields)
        self._emit(live, "state", {"state": state, "reason": reason}, live.row.sim_ns or 0)

    # -- API ---------------------------------------------------------------------
    async def create(
        self,
        tenant: str,
        spec: RunSpec,
        *,
        run_id: str = "",
        request_id: str = "",
        parent: str = "",
    ) -> RunView:
        validate_tenant(tenant)
        if not self._accepting:
            raise Unavailable("the daemon is shutting down; try again when it is back", reason="SHUTTING_DOWN")
        if len(request_id) > 128:
            raise InvalidArgument("request_id is longer than 128 characters", field="request_id")
        request_hash = hashlib.sha256(json.dumps([spec.to_dict(), run_id, parent], sort_keys=True).encode()).hexdigest()
        run_id = validate_run_id(run_id, "run_id") if run_id else f"run-{uuid.uuid4().hex[:12]}"
        # Held from the checks to the insert: two calls with the same run id (or request id:
        # a client's retry racing its first try) would both pass the checks, and the second
        # insert would fail in the flusher, which retries it for ever and stores nothing more.
        async with self._locks.hold(*((f"request:{tenant}/{request_id}",) if request_id else ())):
            if request_id:
                existing = self._requests.get((tenant, request_id))
                if existing is not None:
                    row = await self._row(existing)
                    if row is None:
                        raise NotFound(f"the run created by request {request_id!r} was deleted", field="request_id")
                    if row.request_hash != request_hash:
                        raise InvalidArgument(
                            f"request_id {request_id!r} was used for a different request",
                            field="request_id",
                            reason="REQUEST_ID_REUSED",
                        )
                    return self._view(row)
            async with self._locks.hold(_key(tenant, run_id)):
                key = await self._new_key(tenant, run_id, "run_id")
                self._check_quota(tenant)
                await self._check_space()
                await self._validate(tenant, spec)
                row = self._new_row(key, tenant, spec, parent=parent, request_id=request_id, request_hash=request_hash)
                live = _Live(row, 1)
                if request_id:
                    self._requests[(tenant, request_id)] = key
                self._batch.inserts.append(row)
                self._states.add(tenant, "PENDING")
                self._emit(live, "state", {"state": "PENDING", "reason": "waiting for admission"}, 0)
                await self._enqueue(live)
                return self._view(live.row)

    # -- the one admission path (CreateRun, RestoreSnapshot) -------------------------------
    async def _new_key(self, tenant: str, run_id: str, field_name: str) -> str:
        validate_run_id(run_id, field_name)
        key = _key(tenant, run_id)
        if key in self._live or await self.store.get_run(key) is not None:
            raise AlreadyExists(f"run runs/{run_id} already exists", field=field_name)
        return key

    def _check_quota(self, tenant: str) -> None:
        active = sum(1 for lv in self._live.values() if lv.row.tenant == tenant and not lv.finished)
        if active >= self.config.tenant_max_active:
            raise ResourceExhausted(
                f"tenant {tenant!r} already has {active} pending or running runs "
                f"(quota {self.config.tenant_max_active})",
                reason="TENANT_QUOTA",
            )

    def _confine(self, tenant: str, spec: RunSpec) -> None:
        """Every host path the spec names must be inside the tenant's data roots (PermissionDenied)."""
        info = self.registry.benchmark(spec.benchmark.name).info
        try:
            agent_paths = self.registry.agent(spec.agent.harness).path_options
        except InvalidArgument:
            agent_paths = frozenset()  # the agent's own check names it
        self.data_roots.confine(tenant, spec, info, agent_paths)

    async def _validate(self, tenant: str, spec: RunSpec) -> None:
        """What the spec names must exist and fit together; a bad run is refused, nothing stored."""
        # Before anything reads the paths: realpath looks at the disk, hence the thread.
        await asyncio.to_thread(self._confine, tenant, spec)
        entry = self.registry.agent(spec.agent.harness)
        agent = entry.make(spec.agent.options, spec.agent.memory)
        scenario = await asyncio.to_thread(load_scenario, self.registry, spec)
        missing = missing_capabilities(scenario.requires, agent.capabilities)
        if missing:
            raise InvalidArgument(
                f"harness {spec.agent.harness!r} cannot run benchmark {spec.benchmark.name!r} "
                f"(scenario {scenario.name!r}): it lacks {'; '.join(missing)}",
                field="run.agent.harness",
                reason="MISSING_CAPABILITY",
            )
        if entry.sandboxed and spec.clock.mode is ClockMode.REALTIME and spec.clock.rate != 1.0:
            raise InvalidArgument(
                f"a REALTIME clock at rate {spec.clock.rate} cannot drive harness {spec.agent.harness!r} in a "
                "sandbox: libfaketime's speed factor counts from each process's own start, so processes in one "
                "sandbox would disagree; use HYBRID, or REALTIME at rate 1",
                field="run.clock.rate",
            )
        if self.judge_factory is not None:
            self.judge_factory(spec)  # the judge options (endpoint, key variable)

    def _new_row(
        self,
        key: str,
        tenant: str,
        spec: RunSpec,
        *,
        parent: str = "",
        request_id: str = "",
        request_hash: str = "",
        reason: str = "",
        sim_ns: int | None = None,
        last_event_seq: int = 0,
    ) -> RunRow:
        self._seq += 1  # taken now: a CreateRun meanwhile gets the next one
        return RunRow(
            name=key,
            tenant=tenant,
            spec=spec.to_dict(),
            state="PENDING",
            create_ns=time.time_ns(),
            seq=self._seq,
            request_id=request_id or None,
            request_hash=request_hash,
            parent=parent,
            reason=reason,
            sim_ns=sim_ns,
            last_event_seq=last_event_seq,
        )

    async def _enqueue(self, live: _Live) -> None:
        """Make the run live and queued: it starts when admission allows."""
        self._live[live.key] = live
        self._queue[live.key] = None
        await self.flush()
        self._admit()

    # -- snapshots ---------------------------------------------------------------------------
    async def save_snapshot(
        self, tenant: str, run_name: str, snapshot_id: str = "", *, at_turn_boundary: bool = False
    ) -> SnapshotView:
        """A snapshot of a RUNNING run; ``at_turn_boundary``: after the turn in flight, so the session is in it."""
        row = await self._get_row(tenant, run_name, "run")
        live = self._live.get(row.name)
        if row.state == "RUNNING" and live is not None and live.worker is None and live.execution is not None:
            remote = live.execution.snapshots
            if remote is None:
                raise FailedPrecondition(
                    f"run {run_name!r} runs on the {self.executor.name} executor (node {row.node or 'unknown'}), "
                    "whose runs cannot be snapshotted",
                    reason="EXECUTOR_UNSUPPORTED",
                )
            # Its worker is on another machine: it saves there, into storage both sides read.
            await self._check_space()
            return await self.snapshots.save_remote(
                live.key, row.tenant, remote, snapshot_id, at_turn_boundary=at_turn_boundary
            )
        if row.state != "RUNNING" or live is None or live.worker is None:
            raise FailedPrecondition(
                f"run {run_name!r} is {row.state}; snapshots are taken of RUNNING runs",
                reason="RUN_NOT_RUNNING",
            )
        await self._check_space()
        return await self.snapshots.save(
            live.key, row.tenant, live.worker, snapshot_id, at_turn_boundary=at_turn_boundary
        )

    async def list_snapshots(self, tenant: str, run_name: str) -> list[SnapshotView]:
        row = await self._get_row(tenant, run_name, "run")
        return await self.snapshots.list(row.name)

    async def restore(
        self, tenant: str, snapshot_name: str, new_run_id: str = "", labels: Mapping[str, str] | None = None
    ) -> RunView:
        """Restore into the snapshot's own run (``new_run_id`` empty, once it ended) or a new run (a branch)."""
        labels = dict(labels or {})
        if labels and not new_run_id:
            raise InvalidArgument(
                "labels are for the new run of a branch; set new_run_id or leave labels empty", field="labels"
            )
        if new_run_id:
            validate_run_id(new_run_id, "new_run_id")
        plan = await self.snapshots.plan(tenant, snapshot_name, labels)
        if not self._accepting:
            raise Unavailable("the daemon is shutting down; try again when it is back", reason="SHUTTING_DOWN")
        await self._check_space()
        now = time.time_ns()
        if new_run_id:
            key = _key(tenant, new_run_id)
            async with self._locks.hold(key):
                await self._new_key(tenant, new_run_id, "new_run_id")
                self._check_quota(tenant)
                await self._validate(tenant, plan.spec)
                parent = f"runs/{_run_id_of(plan.source_key)}"
                row = self._new_row(
                    key,
                    tenant,
                    plan.spec,
                    parent=parent,
                    request_hash=hashlib.sha256(
                        json.dumps([plan.spec.to_dict(), new_run_id, parent, snapshot_name], sort_keys=True).encode()
                    ).hexdigest(),
                    reason=f"branched from {snapshot_name}; waiting for admission",
                    sim_ns=plan.sim_ns,
                    last_event_seq=1,
                )
                await self._persist_restore(row, plan, insert=True, now=now)
                self._states.add(tenant, "PENDING")
                live = _Live(row, 2, resume=True)
                await self._enqueue(live)
        else:
            key = plan.source_key
            # The run's paths are checked again: its tenant's roots may have changed since.
            await asyncio.to_thread(self._confine, tenant, plan.spec)
            async with self._locks.hold(key):
                current = await self._row(key)
                if current is None:
                    raise NotFound(f"snapshot {snapshot_name!r} not found", field="snapshot")
                if current.state in ACTIVE_STATES or key in self._live:
                    raise FailedPrecondition(
                        f"run runs/{_run_id_of(key)} is {current.state}; restore into it once it has ended "
                        "(cancel it first), or branch into a new run (new_run_id)",
                        reason="RUN_ACTIVE",
                    )
                row = dataclasses.replace(
                    current,
                    state="PENDING",
                    reason=f"restored from {snapshot_name}; waiting for admission",
                    end_ns=None,
                    sim_ns=plan.sim_ns,
                    results={},
                    last_event_seq=current.last_event_seq + 1,
                    history_expired_ns=None,  # the snapshot's journal and calls come back
                )
                await self._persist_restore(row, plan, insert=False, now=now)
                self._states.move(tenant, current.state, "PENDING")
                live = _Live(row, row.last_event_seq + 1, resume=True)
                await self._enqueue(live)
        return self._view(live.row)

    async def branch(
        self,
        tenant: str,
        snapshot_name: str,
        count: int,
        *,
        group_id: str = "",
        labels: Mapping[str, str] | None = None,
        seeds: Sequence[int] = (),
        request_id: str = "",
    ) -> tuple[str, list[RunView]]:
        """K runs from one snapshot as one group (``{group}-0`` .. ``{group}-{K-1}``).

        Everything is checked before anything is stored (the snapshot, the run ids, the
        tenant's quota for all K). Each run is stored in a transaction of its own; a
        request repeated with the same ``request_id`` (after a crash in between, say)
        returns the runs that exist and creates the missing ones, so a group is never
        left half-made by a retry.
        """
        validate_tenant(tenant)
        if not 1 <= count <= MAX_BRANCHES:
            raise InvalidArgument(f"count must be in 1..{MAX_BRANCHES}, got {count}", field="count")
        if len(request_id) > 128:
            raise InvalidArgument("request_id is longer than 128 characters", field="request_id")
        if seeds and len(seeds) != count:
            raise InvalidArgument(
                f"{len(seeds)} sampling_seeds for {count} runs: give one per run or none", field="sampling_seeds"
            )
        for i, seed in enumerate(seeds):
            if not 0 <= seed < 2**63:
                raise InvalidArgument(f"sampling_seeds[{i}] must be in [0, 2^63)", field="sampling_seeds")
        if not group_id:
            digest = hashlib.sha256(f"{tenant}\0{request_id}".encode()).hexdigest() if request_id else uuid.uuid4().hex
            group_id = f"g-{digest[:12]}"
        if len(group_id) > 56:
            raise InvalidArgument("group_id is longer than 56 characters", field="group_id")
        validate_run_id(group_id, "group_id")
        plan = await self.snapshots.plan(tenant, snapshot_name, labels)
        if not self._accepting:
            raise Unavailable("the daemon is shutting down; try again when it is back", reason="SHUTTING_DOWN")
        await self._check_space()
        base = plan.spec
        specs = [
            dataclasses.replace(
                base,
                group=group_id,
                group_index=i,
                group_snapshot=snapshot_name,
                agent=dataclasses.replace(
                    base.agent,
                    model=dataclasses.replace(
                        base.agent.model, sampling_seed=seeds[i] if seeds else branch_seed(group_id, i)
                    ),
                ),
            )
            for i in range(count)
        ]
        parent = f"runs/{_run_id_of(plan.source_key)}"
        keys = [_key(tenant, f"{group_id}-{i}") for i in range(count)]
        hashes = [
            hashlib.sha256(
                json.dumps([spec.to_dict(), key, parent, snapshot_name, request_id], sort_keys=True).encode()
            ).hexdigest()
            for spec, key in zip(specs, keys, strict=True)
        ]
        async with self._locks.hold(*keys):
            existing: dict[int, RunRow] = {}
            for i, key in enumerate(keys):
                row = await self._row(key)
                if row is None:
                    continue
                if not request_id or row.request_hash != hashes[i]:
                    raise AlreadyExists(
                        f"run runs/{_run_id_of(key)} already exists: pick another group_id", field="group_id"
                    )
                existing[i] = row
            missing = [i for i in range(count) if i not in existing]
            active = sum(1 for lv in self._live.values() if lv.row.tenant == tenant and not lv.finished)
            if missing and active + len(missing) > self.config.tenant_max_active:
                raise ResourceExhausted(
                    f"tenant {tenant!r} has {active} pending or running runs; {len(missing)} more exceed its "
                    f"quota of {self.config.tenant_max_active}",
                    reason="TENANT_QUOTA",
                )
            if missing:
                await self._validate(tenant, specs[0])
            now = time.time_ns()
            for i in missing:
                row = self._new_row(
                    keys[i],
                    tenant,
                    specs[i],
                    parent=parent,
                    request_hash=hashes[i],
                    reason=f"branch {i} of group {group_id} from {snapshot_name}; waiting for admission",
                    sim_ns=plan.sim_ns,
                    last_event_seq=1,
                )
                await self._persist_restore(row, plan, insert=True, now=now)
                self._states.add(tenant, "PENDING")
                live = _Live(row, 2, resume=True)
                await self._enqueue(live)
                existing[i] = live.row
        return group_id, [self._view(existing[i]) for i in range(count)]

    async def group_runs(self, tenant: str, group_id: str) -> list[RunView]:
        """The runs of a group, by index (NotFound when it has none)."""
        validate_run_id(group_id, "group")
        views: list[RunView] = []
        token = ""
        while True:
            page, token = await self.list(tenant, page_size=MAX_PAGE_SIZE, page_token=token, filter=f"group={group_id}")
            views.extend(page)
            if not token:
                break
        if not views:
            raise NotFound(f"no run of group {group_id!r}", field="group")
        return sorted(views, key=lambda v: v.spec.group_index)

    async def watch_group(self, tenant: str, group_id: str) -> AsyncIterator[EventRow]:
        """Every run of the group's events, each run's in order; ends when all have ended."""
        views = await self.group_runs(tenant, group_id)
        queue: asyncio.Queue[EventRow | None] = asyncio.Queue(maxsize=1024)

        async def pump(name: str) -> None:
            try:
                async for ev in self.watch(tenant, name):
                    await queue.put(ev)
            finally:
                await queue.put(None)

        tasks = [asyncio.create_task(pump(v.name), name=f"watch-group:{v.name}") for v in views]
        try:
            open_streams = len(tasks)
            while open_streams:
                ev = await queue.get()
                if ev is None:
                    open_streams -= 1
                    continue
                yield ev
            for task in tasks:
                await task  # a watch that failed raises here
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _persist_restore(self, row: RunRow, plan: RestorePlan, *, insert: bool, now: int) -> None:
        """The run at the snapshot, in one transaction: its row, journal, calls and restore marker."""
        event = EventRow(
            row.name, row.last_event_seq, "state", plan.sim_ns, now, {"state": "PENDING", "reason": row.reason}
        )
        try:
            await self.store.restore_run(
                row,
                insert=insert,
                event=event,
                journal=plan.journal,
                calls=plan.calls,
                snapshot=plan.snapshot_name,
                snapshot_dir=str(plan.snapshot_dir),
            )
        except AlreadyExists:
            raise  # the name was taken: a refused request, not a failed restore
        except BaseException:
            self.observer.on_snapshot("failed")
            raise
        self.observer.on_snapshot("restored")

    async def _row(self, key: str) -> RunRow | None:
        live = self._live.get(key)
        if live is not None:
            return live.row
        return await self.store.get_run(key)

    async def get(self, tenant: str, name: str) -> RunView:
        return self._view(await self._get_row(tenant, name))

    async def _get_row(self, tenant: str, name: str, field_name: str = "name") -> RunRow:
        key = _key(tenant, parse_run_name(name, field_name))
        row = await self._row(key)
        if row is None:
            raise NotFound(f"run {name!r} not found", field=field_name)
        return row

    async def list(
        self, tenant: str, *, page_size: int = 0, page_token: str = "", filter: str = ""
    ) -> tuple[list[RunView], str]:
        if page_size < 0:
            raise InvalidArgument("page_size must not be negative", field="page_size")
        size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        flt = _Filter.parse(filter)
        fhash = hashlib.sha256(filter.encode()).hexdigest()[:16]
        after = 0
        if page_token:
            try:
                tok = json.loads(base64.urlsafe_b64decode(page_token.encode() + b"==="))
                after = int(tok["after"])
                if not 0 <= after < 2**63:  # a row's seq is a SQLite integer
                    raise ValueError(after)
                if tok["f"] != fhash:
                    raise InvalidArgument("page_token belongs to a different filter", field="page_token")
            except InvalidArgument:
                raise
            except Exception:
                raise InvalidArgument("page_token is not one this daemon issued", field="page_token") from None
        out: list[RunView] = []
        last_seq = after
        exhausted = False
        while len(out) < size and not exhausted:
            rows = await self.store.list_runs(tenant, after_seq=last_seq, limit=size * 2, states=flt.states)
            exhausted = len(rows) < size * 2
            for row in rows:
                last_seq = row.seq
                fresh = self._live[row.name].row if row.name in self._live else row
                if flt.matches(fresh):
                    out.append(self._view(fresh))
                    if len(out) == size:
                        break
        # Runs created but not yet flushed are not listed until committed (milliseconds).
        token = ""
        if len(out) == size:
            more = await self.store.list_runs(tenant, after_seq=last_seq, limit=1, states=flt.states)
            if more:
                token = (
                    base64.urlsafe_b64encode(json.dumps({"after": last_seq, "f": fhash}).encode()).decode().rstrip("=")
                )
        return out, token

    async def cancel(self, tenant: str, name: str) -> RunView:
        row = await self._get_row(tenant, name)
        live = self._live.get(row.name)
        if live is None or live.finished:
            return self._view(row)
        if live.task is None:
            self._queue.pop(live.key, None)
            await self._finish(live, "CANCELLED", "cancelled before it started")
        else:
            if not live.ending:
                live.stop_reason = "cancel"
                live.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(live.task)
        return self._view(live.row)

    async def delete(self, tenant: str, name: str) -> None:
        key = (await self._get_row(tenant, name)).name
        async with self._locks.hold(key):  # not while a restore or resume of it is under way
            row = await self._get_row(tenant, name)
            if row.state in ACTIVE_STATES:
                raise FailedPrecondition(
                    f"run {name!r} is {row.state}; cancel it before deleting it", reason="RUN_ACTIVE"
                )
            await self.flush()
            await self.store.delete_run(row.name)
            self._states.add(row.tenant, row.state, -1)
            self._live.pop(row.name, None)
            if row.request_id:
                self._requests.pop((row.tenant, row.request_id), None)
        if self.on_delete is not None:
            # A kept sandbox (an interrupted run's) and the run's files go with it.
            try:
                await self.on_delete(row.name)
            except Exception:
                log.exception("cleaning up after deleting %s failed", row.name)

    async def resume(self, tenant: str, name: str) -> RunView:
        key = (await self._get_row(tenant, name)).name
        # Two resumes at once would both see INTERRUPTED and record the same event twice:
        # the flusher's insert then fails, and is retried for ever.
        async with self._locks.hold(key):
            row = await self._get_row(tenant, name)
            if row.state != "INTERRUPTED":
                raise FailedPrecondition(f"run {name!r} is {row.state}, not INTERRUPTED", reason="NOT_INTERRUPTED")
            if not self._accepting:
                raise Unavailable("the daemon is shutting down", reason="SHUTTING_DOWN")
            await self._check_space()
            # A run created before its tenant's roots were narrowed is refused here, naming the field.
            await asyncio.to_thread(self._confine, row.tenant, RunSpec.from_dict(row.spec))
            live = _Live(row, row.last_event_seq + 1, resume=True)
            self._live[row.name] = live
            self._set_state(live, "PENDING", "resuming from the last durable point")
            self._queue[row.name] = None
            await self.flush()
            self._admit()
            return self._view(live.row)

    async def watch(self, tenant: str, name: str, after_seq: int = 0) -> AsyncGenerator[EventRow, None]:
        if after_seq < 0:
            raise InvalidArgument("after_seq must not be negative", field="after_seq")
        row = await self._get_row(tenant, name)
        check_events_kept(row, after_seq)
        key = row.name
        cursor = after_seq
        while True:
            live = self._live.get(key)
            notify = live.notify if live is not None else None
            batch: list[EventRow]
            if live is not None and live.committed and live.committed[0].seq <= cursor + 1:
                start = cursor + 1 - live.committed[0].seq
                batch = live.committed[start:]
            else:
                batch = await self.store.events_after(key, cursor, 1000)
                if not batch or batch[0].seq != cursor + 1:
                    # Nothing where the next event should be: the run may have been
                    # deleted or its events expired (retention) since the last read.
                    current = await self._row(key)
                    if current is None:
                        raise NotFound(f"run {name!r} was deleted while it was watched", field="name")
                    check_events_kept(current, cursor)
                    row = current
            for ev in batch:
                if ev.seq != cursor + 1:
                    # Never skip: fall back to the store for the missing stretch.
                    break
                yield ev
                cursor = ev.seq
            else:
                if batch:
                    continue
                live = self._live.get(key)
                if live is None or live.finished:
                    last = live.row.last_event_seq if live is not None else row.last_event_seq
                    if cursor >= last:
                        return
                    continue
                if notify is not None and notify is live.notify:
                    await notify.wait()
                continue

    # -- admission and execution ----------------------------------------------------
    def _admit(self) -> None:
        if not self._accepting or self.disk_full is not None:
            return
        per_tenant: dict[str, int] = {}
        for key in self._running:
            t = self._live[key].row.tenant
            per_tenant[t] = per_tenant.get(t, 0) + 1
        for key in list(self._queue):
            if len(self._running) >= self.config.max_running:
                return
            live = self._live.get(key)
            if live is None:
                self._queue.pop(key, None)
                continue
            t = live.row.tenant
            if per_tenant.get(t, 0) >= self.config.tenant_max_running:
                continue
            self._queue.pop(key)
            self._running.add(key)
            per_tenant[t] = per_tenant.get(t, 0) + 1
            live.task = asyncio.get_running_loop().create_task(self._execute(live), name=f"run:{key}")

    async def _execute(self, live: _Live) -> None:
        outcome: RunOutcome
        try:
            # A run restored from a snapshot (or branched) resumes from the snapshot's journal.
            restore = await self.store.restore_marker(live.key)
            if restore is not None:
                live.resume = True
            journal = [dict(e) for e in await self.store.journal(live.key)] if live.resume else None
            live.next_journal_seq = max((int(e["seq"]) + 1 for e in journal or ()), default=0)
            spec = RunSpec.from_dict(live.row.spec)
            # Resumed after a restart, restored or admitted: the roots are checked again (they
            # may have been narrowed since the run was created); a refusal fails the run.
            await asyncio.to_thread(self._confine, live.row.tenant, spec)
            judge = self.judge_factory(spec) if self.judge_factory is not None else None
            run_dir = self.runs_dir / live.key if self.runs_dir is not None else None
            reason = "resumed from the last durable point" if live.resume else "admitted"
            if restore is not None:
                reason = f"restoring from {restore[0]}"
            admitted = AdmittedRun(
                live.key,
                spec,
                journal,
                run_dir,
                reason,
                restore_from=Path(restore[1]) if restore is not None else None,
            )
            execution = await self.executor.prepare(admitted, _Sink(self, live), judge)
            live.execution = execution
            worker = execution.worker
            live.worker = worker
            if worker is not None:
                worker.on_save_snapshot = functools.partial(self.snapshots.on_effect, live.key, live.row.tenant, worker)
                if restore is not None:
                    worker.on_restored = functools.partial(self.store.clear_restore_marker, live.key)
            outcome = await execution.run()
        except asyncio.CancelledError:
            if live.stop_reason == "shutdown" and live.execution is not None and live.execution.survives_shutdown:
                # Its worker goes on on the cluster and keeps what it has not handed over;
                # the run stays RUNNING in the store and the next daemon process adopts it.
                await self._leave_running(live)
                return
            if live.execution is not None:
                with contextlib.suppress(Exception):
                    await live.execution.cancel()
            if live.stop_reason == "cancel":
                outcome = RunOutcome("CANCELLED", "cancelled by the user")
            elif live.stop_reason == "disk_full":
                outcome = RunOutcome(
                    "INTERRUPTED",
                    f"paused: {self.disk_full or 'the state directory disk is full'}; the run continues from its "
                    "last durable point once space is freed",
                )
            else:
                outcome = RunOutcome(
                    "INTERRUPTED",
                    "the daemon shut down before the run finished; ResumeRun continues it from its last durable point",
                )
        except SclateError as exc:
            outcome = RunOutcome("FAILED", exc.message)
        except Exception as exc:
            log.exception("run %s failed", live.key)
            outcome = RunOutcome("FAILED", f"internal error: {describe(exc)}")
        live.ending = True
        # The run has ended: recording how (summaries, report, final state) must not be cut
        # short by a cancel that comes now (CancelRun, shutdown), or the run would stay
        # RUNNING forever, its watchers waiting. A cancel after the end changes nothing.
        conclusion = asyncio.get_running_loop().create_task(self._conclude(live, outcome), name=f"run-end:{live.key}")
        while True:
            try:
                await asyncio.shield(conclusion)
                return
            except asyncio.CancelledError:
                if conclusion.done():
                    raise

    async def _conclude(self, live: _Live, outcome: RunOutcome) -> None:
        """Summarize an ended run's calls, write its report and record its final state."""
        if outcome.state != "CANCELLED" or outcome.results:
            try:
                calls = await self.store.calls(live.key)
                by_role = summarize_calls(calls)
                if calls:
                    outcome.results["calls"] = by_role
                    outcome.results["components"] = summarize_components(calls)
                    share = memory_token_share(by_role)
                    if share is not None:
                        outcome.results["memory_token_share"] = share
                at_close = live.execution.capture_at_close() if live.execution is not None else None
                if calls or at_close:
                    outcome.results["capture"] = capture_totals(by_role, at_close)
            except Exception:
                log.exception("summarizing the captured calls of %s failed", live.key)
            warnings = run_warnings(outcome.results)
            if warnings:
                outcome.results["warnings"] = warnings
                log.warning("run %s ended %s with warnings: %s", live.key, outcome.state, "; ".join(warnings))
        if (
            self.config.write_reports
            and live.worker is not None
            and live.worker.run_dir is not None
            and outcome.results.get("scheduler")
        ):
            try:
                # One at a time: write_report frees each figure (all reference cycles) by
                # collecting the young generations after the plot, which frees nothing
                # while another figure is half drawn: that one is promoted to the old
                # generation and stays until a full collection (+470 MB in the soak).
                paths = await asyncio.get_running_loop().run_in_executor(
                    self._reports,
                    functools.partial(
                        write_report,
                        live.worker.run_dir / "report",
                        run_name=f"runs/{_run_id_of(live.key)}",
                        results=outcome.results,
                        timeline=live.worker.timeline,
                    ),
                )
                outcome.results["report_path"] = str(paths.json_path)
                outcome.results["plot_path"] = str(paths.plot_path)
            except Exception:
                log.exception("writing the report of %s failed", live.key)
        try:
            await self._finish(live, outcome.state, outcome.reason, outcome.results)
        finally:
            self._running.discard(live.key)
            self._admit()
        if live.stop_reason == "disk_full" and outcome.state == "INTERRUPTED":
            # Its pause was committed, so a write went through: the disk has space again.
            await self._resume_after_pause(live)

    async def _leave_running(self, live: _Live) -> None:
        """At shutdown, a run whose worker survives it: what was stored stays, nothing ends."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), _SHUTDOWN_FLUSH_S)
        live.finished = True
        self._running.discard(live.key)
        old, live.notify = live.notify, asyncio.Event()
        old.set()
        self._live.pop(live.key, None)

    async def _resume_after_pause(self, live: _Live) -> None:
        try:
            await self.resume(live.row.tenant, f"runs/{_run_id_of(live.key)}")
        except SclateError as exc:
            log.warning("run %s stays INTERRUPTED (ResumeRun continues it): %s", live.key, exc.message)
        else:
            log.info("run %s resumed after its pause for a full disk", live.key)

    async def _finish(self, live: _Live, state: str, reason: str, results: dict[str, Any] | None = None) -> None:
        fields: dict[str, Any] = {"end_ns": time.time_ns()}
        if results:
            fields["results"] = results
        self._set_state(live, state, reason, **fields)
        await self.flush()
        live.finished = True
        old, live.notify = live.notify, asyncio.Event()
        old.set()
        # Finished (or interrupted) runs leave memory; the store has them.
        self._live.pop(live.key, None)

    # -- read-only views (the run viewer) -------------------------------------------
    async def calls(self, tenant: str, name: str) -> Sequence[dict[str, Any]]:
        """The run's captured model calls as stored (records: role, timings, usage, token
        ids, logprobs, request and response), by start time."""
        row = await self._get_row(tenant, name)
        check_history_kept(row, "its captured calls")
        records = await self.store.calls(row.name)
        await self._check_still_kept(row.name, "its captured calls")
        return sorted(records, key=lambda r: int((r.get("timings") or {}).get("start_ns") or 0))

    async def children(self, tenant: str, name: str) -> Sequence[RunView]:
        """The runs branched from this run's snapshots (their ``parent`` is it), oldest first."""
        row = await self._get_row(tenant, name)
        parent = f"runs/{_run_id_of(row.name)}"
        out: builtins.list[RunView] = []
        token = ""
        while True:
            page, token = await self.list(tenant, page_size=MAX_PAGE_SIZE, page_token=token)
            out.extend(v for v in page if v.parent == parent)
            if not token:
                return out

    # -- introspection ------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        return {"running": len(self._running), "pending": len(self._queue), "live": len(self._live)}

    def state_counts(self) -> dict[tuple[str, str], int]:
        """How many runs each (tenant, state) has, every run the store holds (no query:
        kept as runs change state here)."""
        return self._states.snapshot()

    def leases_held(self) -> dict[str, int]:
        """Clock leases held right now across the running runs, by kind of work (turn,
        model_call, grading, cron, ...)."""
        out: dict[str, int] = {}
        for live in list(self._live.values()):
            worker = live.worker
            loop = worker.loop if worker is not None else None
            if loop is not None:
                for kind, n in loop.leases.kinds().items():
                    out[kind] = out.get(kind, 0) + n
        return out

    # -- trajectories ----------------------------------------------------------------
    async def trajectories(
        self,
        tenant: str,
        name: str,
        roles: Sequence[str] = (),
        only: Sequence[str] = (),
        *,
        reward_mode: str = "round",
    ) -> Sequence[Sample]:
        """The run's token-level samples; a reward is None until one of its rounds is graded.

        ``roles`` train (empty: the agent's); ``only`` keeps the samples of these
        roles (empty: every role's); ``reward_mode``: ``round`` or ``run``."""
        trainable_roles(roles)
        mode = reward_mode_of(reward_mode or "round")
        kept = set(trainable_roles(only, "roles")) if only else None
        row = await self._get_row(tenant, name, "run")
        check_history_kept(row, "its captured calls (the trajectories)")
        samples = await run_samples(self.store, row.name, row.results, roles, reward_mode=mode)
        await self._check_still_kept(row.name, "its captured calls (the trajectories)")
        return samples if kept is None else [s for s in samples if s.role in kept]

    async def _check_still_kept(self, key: str, what: str) -> None:
        """After reading a run's calls and journal: retention may have expired them
        between the reads, which would give a partial answer instead of an error."""
        current = await self._row(key)
        if current is None:
            raise NotFound(f"run runs/{_run_id_of(key)} was deleted while it was read", field="run")
        check_history_kept(current, what)

    async def export(
        self,
        tenant: str,
        name: str,
        fmt: str,
        roles: Sequence[str],
        out_path: str | os.PathLike[str],
        only: Sequence[str] = (),
        *,
        group: str = "",
        reward_mode: str = "round",
        unrewarded: str = "skip",
    ) -> ExportReport:
        """Write a run's samples (or a branch group's continuations, ``group``) to
        ``out_path`` in ``fmt``; what was written and what was left out, and why.

        Rewards are read from the stored verdicts now, so a verdict that came late
        (a judge that ran after the run) is in the next export without a re-run."""
        # Checked before anything is looked up, so a bad request is INVALID_ARGUMENT.
        check_export_args(fmt, unrewarded or "skip")
        mode = reward_mode_of(reward_mode or "round")
        if bool(name) == bool(group):
            raise InvalidArgument("name a run or a group (one of them)", field="group" if group else "run")
        what = "its captured calls (the export)"
        if not group:
            row = await self._get_row(tenant, name, "run")
            check_history_kept(row, what)
            report = await export_run(
                self.store, row.name, row.results, fmt, out_path, roles, only,
                reward_mode=mode, unrewarded=unrewarded or "skip",
            )  # fmt: skip
            await self._check_still_kept(row.name, what)
            return report
        views = await self.group_runs(tenant, group)
        members: list[tuple[str, str, Mapping[str, Any]]] = []
        for view in views:
            row = await self._get_row(tenant, view.name, "group")
            check_history_kept(row, what)
            members.append((view.name, row.name, row.results))
        branch_calls = await self.snapshots.branch_calls(tenant, views[0].spec.group_snapshot)
        report = await export_run_group(
            self.store, group, branch_calls, members, fmt, out_path, roles, only,
            reward_mode=mode, unrewarded=unrewarded or "skip",
        )  # fmt: skip
        for _, key, _ in members:
            await self._check_still_kept(key, what)
        return report
