"""Save, restore and branch runs.

A snapshot of a RUNNING run is the agent's files (for a sandboxed agent: the
container frozen, committed to ``sclate-snap:<run>-<n>``, /workspace and
/memory archived), the agent's in-process state when no turn was in flight,
and the scheduler state that goes with them: the durable journal prefix read
while the agent was frozen, plus the call records captured by then. It lives
in ``<runs_dir>/<tenant>/<run>/snapshots/<id>/`` (``journal.jsonl``,
``calls.jsonl``, ``sandbox/``, ``agent/``) and one row of the store, so it
survives daemon restarts and is independent of what its run does afterwards.

Restoring reads a snapshot into a :class:`RestorePlan` (its files checked,
the agent able to start from them); the run manager applies the plan through
the same admission path as CreateRun: the run (the snapshot's own, or a new
one: a branch) gets the snapshot's journal and call records, state PENDING,
and a restore marker that makes its next start build the agent from the
snapshot and resume by journal replay. Whatever was in flight at the snapshot
(a turn without ``turn_end``, an ungraded check) is dispatched again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sclated.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    SclateError,
)
from sclated.runs._executor import RemoteCapture
from sclated.runs._observe import NO_RUNS_OBSERVER, RunsObserver
from sclated.runs._registry import Registry
from sclated.runs._spec import RunSpec, validate_run_id, validate_tenant
from sclated.runs._worker import RunWorker
from sclated.store import Store

__all__ = ["RestorePlan", "SnapshotView", "Snapshots", "parse_snapshot_name"]

log = logging.getLogger("sclated.runs")

_JOURNAL = "journal.jsonl"
_CALLS = "calls.jsonl"
_MAX_SUFFIX = 1000


@dataclass(frozen=True, slots=True)
class SnapshotView:
    """A snapshot as the API shows it."""

    run_id: str
    snapshot_id: str
    create_ns: int
    sim_ns: int
    journal_length: int
    image: str
    """The committed sandbox image (empty for an agent without a sandbox)."""
    agent_state: bool

    @property
    def name(self) -> str:
        return f"runs/{self.run_id}/snapshots/{self.snapshot_id}"


def parse_snapshot_name(name: str, field_name: str = "snapshot") -> tuple[str, str]:
    parts = name.split("/")
    if len(parts) != 4 or parts[0] != "runs" or parts[2] != "snapshots":
        raise InvalidArgument(
            f"{field_name} {name!r} must look like 'runs/{{run}}/snapshots/{{snapshot}}'", field=field_name
        )
    return validate_run_id(parts[1], field_name), validate_run_id(parts[3], field_name)


def _store_name(run_key: str, snapshot_id: str) -> str:
    return f"{run_key}/snapshots/{snapshot_id}"


def _view(row: Mapping[str, Any]) -> SnapshotView:
    run_key, _, snapshot_id = str(row["name"]).partition("/snapshots/")
    info = row["info"]
    return SnapshotView(
        run_id=run_key.split("/", 1)[1],
        snapshot_id=snapshot_id,
        create_ns=int(row["create_ns"]),
        sim_ns=int(row["sim_ns"]),
        journal_length=int(row["journal_length"]),
        image=str((info.get("sandbox") or {}).get("image", "")),
        agent_state=bool(info.get("agent_state")),
    )


def _write_lines(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
    tmp.replace(path)


def _write_lines_synced(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(tmp: Path, final: Path, journal: Sequence[Mapping[str, Any]], calls: Sequence[Mapping[str, Any]]) -> None:
    """The scheduler state joins the worker's files, then the whole directory appears at
    once (a crash before the rename leaves only a temporary directory, never half a snapshot)."""
    _write_lines_synced(tmp / _JOURNAL, journal)
    _write_lines_synced(tmp / _CALLS, calls)
    _fsync_dir(tmp)
    if final.exists():
        # Leftovers of a snapshot whose row was never stored (a daemon that died in between).
        shutil.rmtree(final)
    tmp.rename(final)
    _fsync_dir(final.parent)


def _read_lines(path: Path) -> list[dict[str, Any]]:
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def _check_shared(snapshot_name: str, snap_dir: Path, sandbox: Mapping[str, Any]) -> None:
    """NotFound unless a shared snapshot's exported image and archives are all there."""
    wanted = [str(sandbox.get("image_archive", ""))] + [str(a[1]) for a in sandbox.get("archives", ())]
    missing = [p for p in wanted if not p or not Path(p).is_file()]
    if missing:
        raise NotFound(
            f"snapshot {snapshot_name!r}: file(s) {', '.join(missing) or 'image_archive'} in the shared "
            f"directory {snap_dir} are gone; pick another snapshot",
            field="snapshot",
        )


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """A snapshot read and checked, ready for the run manager to admit."""

    snapshot_name: str
    """``runs/{run}/snapshots/{id}``."""
    source_key: str
    """``tenant/run`` of the snapshot's own run."""
    snapshot_dir: Path
    spec: RunSpec
    """The source run's spec (with a branch's extra labels)."""
    journal: list[dict[str, Any]]
    calls: list[dict[str, Any]]
    sim_ns: int


class Snapshots:
    """Save snapshots of running runs; read them back into restore plans."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        runs_dir: Path | None,
        flush: Callable[[], Awaitable[None]],
        observer: RunsObserver = NO_RUNS_OBSERVER,
    ):
        self._store = store
        self._observer = observer
        self._registry = registry
        self._runs_dir = runs_dir
        self._flush = flush
        self._locks: dict[str, asyncio.Lock] = {}
        self.remote_journal_wait_s = 30.0
        """How long a remote snapshot waits for its journal prefix to be stored."""

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def _dir(self, run_key: str, snapshot_id: str) -> Path:
        if self._runs_dir is None:
            raise FailedPrecondition("this daemon has no state directory to keep snapshots in", reason="NO_STATE_DIR")
        return self._runs_dir / run_key / "snapshots" / snapshot_id

    # -- save ------------------------------------------------------------------------
    async def save(
        self, run_key: str, tenant: str, worker: RunWorker, snapshot_id: str = "", *, at_turn_boundary: bool = False
    ) -> SnapshotView:
        """Snapshot a running run; ``snapshot_id`` empty: one is made up. ``at_turn_boundary``:
        wait for the agent's turn in flight to end, so its session is saved (see ``RunWorker.capture``)."""
        if snapshot_id:
            validate_run_id(snapshot_id, "snapshot_id")
        else:
            snapshot_id = f"snap-{uuid.uuid4().hex[:12]}"
        return await self._take(run_key, tenant, worker, snapshot_id, at_turn_boundary=at_turn_boundary)

    async def on_effect(self, run_key: str, tenant: str, worker: RunWorker, label: str, seq: int) -> None:
        """A scenario's SaveSnapshot effect: named by its label, else by the fire's journal position.

        A name already taken (a restored run passing the same event again) gets a suffix.
        """
        base = validate_run_id(label or f"snap-{seq}", "label")
        for n in range(1, _MAX_SUFFIX):
            snapshot_id = base if n == 1 else f"{base[: 63 - len(str(n)) - 1]}-{n}"
            if await self._store.get_snapshot(_store_name(run_key, snapshot_id)) is None:
                break
        else:
            raise AlreadyExists(f"run {run_key!r} already has snapshots {base}..{base}-{_MAX_SUFFIX - 1}")
        view = await self._take(run_key, tenant, worker, snapshot_id)
        log.info("run %s: scenario snapshot %s at journal position %d", run_key, view.name, view.journal_length)

    async def _take(
        self, key: str, tenant: str, worker: RunWorker, snapshot_id: str, *, at_turn_boundary: bool = False
    ) -> SnapshotView:
        store = self._store
        name = _store_name(key, snapshot_id)
        dest = self._dir(key, snapshot_id)
        async with self._lock(key):
            if await store.get_snapshot(name) is not None:
                raise AlreadyExists(
                    f"snapshot runs/{key.split('/', 1)[1]}/snapshots/{snapshot_id} already exists",
                    field="snapshot_id",
                )
            # Leftovers of an attempt that died with a previous daemon process.
            await asyncio.to_thread(shutil.rmtree, dest, True)
            await asyncio.to_thread(dest.mkdir, parents=True)
            calls: list[dict[str, Any]] = []

            async def paused() -> None:
                # While the agent is frozen: exactly the calls that completed before.
                calls.extend(await store.calls(key))

            sandbox: dict[str, Any] | None = None
            try:
                cap = await worker.capture(dest, on_paused=paused, at_turn_boundary=at_turn_boundary)
                sandbox = cap.sandbox
                await self._flush()
                journal = [e for e in await store.journal(key) if int(e["seq"]) < cap.journal_length]
                if [int(e["seq"]) for e in journal] != list(range(cap.journal_length)):
                    raise FailedPrecondition(
                        f"run {key!r}: the durable journal does not hold entries 0..{cap.journal_length - 1}; "
                        "the snapshot is not kept",
                        reason="JOURNAL_GAP",
                    )
                await asyncio.to_thread(_write_lines, dest / _JOURNAL, journal)
                await asyncio.to_thread(_write_lines, dest / _CALLS, calls)
                info = {
                    "dir": str(dest),
                    "sandbox": sandbox,
                    "agent_state": cap.agent_state,
                    "calls": [str(c.get("call_id", "")) for c in calls],
                }
                create_ns = time.time_ns()
                await store.insert_snapshot(name, key, tenant, create_ns, cap.sim_ns, cap.journal_length, info)
            except BaseException:
                self._observer.on_snapshot("failed")
                await asyncio.to_thread(shutil.rmtree, dest, True)
                files = worker.agent.files
                if sandbox is not None and files is not None:
                    try:
                        await asyncio.shield(files.discard(sandbox))
                    except SclateError as exc:
                        log.warning("run %s: removing a half-made snapshot failed: %s", key, exc.message)
                raise
        self._observer.on_snapshot("saved")
        return _view(
            {
                "name": name,
                "create_ns": create_ns,
                "sim_ns": cap.sim_ns,
                "journal_length": cap.journal_length,
                "info": info,
            }
        )

    async def save_remote(
        self, run_key: str, tenant: str, remote: RemoteCapture, snapshot_id: str = "", *, at_turn_boundary: bool = False
    ) -> SnapshotView:
        """Snapshot a run whose worker is on another machine: the worker saves the agent's
        files (its committed image exported) into shared storage; the durable journal
        prefix and the calls go with them, then the snapshot is published and recorded."""
        if snapshot_id:
            validate_run_id(snapshot_id, "snapshot_id")
        else:
            snapshot_id = f"snap-{uuid.uuid4().hex[:12]}"
        store = self._store
        name = _store_name(run_key, snapshot_id)
        async with self._lock(run_key):
            if await store.get_snapshot(name) is not None:
                raise AlreadyExists(
                    f"snapshot runs/{run_key.split('/', 1)[1]}/snapshots/{snapshot_id} already exists",
                    field="snapshot_id",
                )
            # Every call stored now completed before the worker is asked, so before it freezes.
            calls = list(await store.calls(run_key))
            taken = await remote.capture(tenant, snapshot_id, at_turn_boundary=at_turn_boundary)
            try:
                seen = {str(c.get("call_id", "")) for c in calls}
                calls.extend(c for c in taken.calls if str(c.get("call_id", "")) not in seen)
                cap = taken.capture
                journal = await self._durable_prefix(run_key, cap.journal_length)
                await asyncio.to_thread(_publish, taken.tmp_dir, taken.final_dir, journal, calls)
                info = {
                    "dir": str(taken.final_dir),
                    "sandbox": cap.sandbox,
                    "agent_state": cap.agent_state,
                    "calls": [str(c.get("call_id", "")) for c in calls],
                    "shared": True,
                }
                create_ns = time.time_ns()
                await store.insert_snapshot(name, run_key, tenant, create_ns, cap.sim_ns, cap.journal_length, info)
            except BaseException:
                self._observer.on_snapshot("failed")
                await asyncio.to_thread(shutil.rmtree, taken.final_dir, True)
                await asyncio.shield(remote.discard(taken))
                raise
        self._observer.on_snapshot("saved")
        row = {"name": name, "create_ns": create_ns, "sim_ns": cap.sim_ns, "journal_length": cap.journal_length}
        return _view({**row, "info": info})

    async def _durable_prefix(self, run_key: str, length: int) -> list[dict[str, Any]]:
        """Journal entries 0..length-1 once stored: a remote worker's records arrive through
        the run's pump, a moment after the worker read the length."""
        wait_s = self.remote_journal_wait_s
        deadline = asyncio.get_running_loop().time() + wait_s
        while True:
            await self._flush()
            journal = [e for e in await self._store.journal(run_key) if int(e["seq"]) < length]
            if [int(e["seq"]) for e in journal] == list(range(length)):
                return journal
            if asyncio.get_running_loop().time() > deadline:
                raise FailedPrecondition(
                    f"run {run_key!r}: the durable journal does not hold entries 0..{length - 1} "
                    f"{wait_s:.0f} s after the snapshot; the snapshot is not kept",
                    reason="JOURNAL_GAP",
                )
            await asyncio.sleep(0.1)

    # -- list ----------------------------------------------------------------------------
    async def list(self, run_key: str) -> list[SnapshotView]:
        return [_view(s) for s in await self._store.list_snapshots(run_key)]

    # -- restore ------------------------------------------------------------------------
    async def branch_calls(self, tenant: str, snapshot_name: str) -> tuple[str, ...] | None:
        """The call ids a snapshot holds (a branch group's shared prefix); None when the
        snapshot is gone (deleted with its run) or names none."""
        if not snapshot_name:
            return None
        run_id, snapshot_id = parse_snapshot_name(snapshot_name)
        snap = await self._store.get_snapshot(_store_name(f"{tenant}/{run_id}", snapshot_id))
        if snap is None or "calls" not in snap["info"]:
            return None
        return tuple(str(c) for c in snap["info"]["calls"])

    async def plan(self, tenant: str, snapshot_name: str, labels: Mapping[str, str] | None = None) -> RestorePlan:
        """Read a snapshot and check it can be restored (files, image); ``labels`` go on a branch."""
        validate_tenant(tenant)
        run_id, snapshot_id = parse_snapshot_name(snapshot_name)
        src_key = f"{tenant}/{run_id}"
        snap = await self._store.get_snapshot(_store_name(src_key, snapshot_id))
        src = await self._store.get_run(src_key)
        if snap is None or src is None:
            raise NotFound(f"snapshot {snapshot_name!r} not found", field="snapshot")
        spec = RunSpec.from_dict(src.spec)
        if labels:
            try:
                spec = RunSpec.from_dict({**spec.to_dict(), "labels": {**spec.labels, **labels}})
            except InvalidArgument as exc:
                raise InvalidArgument(exc.message, field="labels") from None
        info = snap["info"]
        snap_dir = Path(str(info["dir"]))
        try:
            journal = await asyncio.to_thread(_read_lines, snap_dir / _JOURNAL)
            calls = await asyncio.to_thread(_read_lines, snap_dir / _CALLS)
        except FileNotFoundError:
            raise NotFound(
                f"snapshot {snapshot_name!r}: its files in {snap_dir} are gone; pick another snapshot",
                field="snapshot",
            ) from None
        if info.get("sandbox") and info.get("shared"):
            # Taken on a cluster node: its image is in the shared directory, loaded by
            # whichever node restores it (this daemon's engine may never have had it).
            await asyncio.to_thread(_check_shared, snapshot_name, snap_dir, info["sandbox"])
        elif info.get("sandbox"):
            files = self._registry.agent(spec.agent.harness).make(spec.agent.options, spec.agent.memory).files
            if files is None:
                raise FailedPrecondition(
                    f"snapshot {snapshot_name!r} holds sandbox files, but agent {spec.agent.harness!r} keeps none",
                    reason="NOT_RESTORABLE",
                )
            await files.check_restorable(snap_dir)
        return RestorePlan(
            snapshot_name=snapshot_name,
            source_key=src_key,
            snapshot_dir=snap_dir,
            spec=spec,
            journal=journal,
            calls=calls,
            sim_ns=int(snap["sim_ns"]),
        )
