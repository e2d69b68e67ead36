"""Save, restore and branch runs.

A snapshot of a RUNNING run is the agent's files (for a sandboxed agent: the
container frozen, committed to ``sclate-snap:<run>-<n>``, /workspace and
/memory archived), the agent's in-process state when no turn was in flight,
and the scheduler state that goes with them: the durable journal prefix read
while the agent was frozen, plus the call records captured by then. It lives
in ``<runs_dir>/<tenant>/<run>/snapshots/<id>/`` (``journal.jsonl``,
``calls.jsonl``, ``sandbox/``, ``agent/``) and one row of the store, so it
survives daemon restarts and is independent of what its run does afterwards.

Restoring puts a run (the snapshot's own, or a new one: a branch) at that
point: journal and call records replaced by the snapshot's, state PENDING,
and a restore marker that makes the run's next start build its agent from the
snapshot and resume by journal replay. Whatever was in flight at the
snapshot (a turn without ``turn_end``, an ungraded check) is dispatched again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import shutil
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sclated.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from sclated.runs._spec import RunSpec, validate_run_id, validate_tenant
from sclated.runs._worker import RunWorker
from sclated.store import EventRow, RunRow

if TYPE_CHECKING:
    from sclated.runs._manager import RunManager, RunView, _Live

__all__ = ["SnapshotView", "Snapshots", "parse_snapshot_name"]

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


def _read_lines(path: Path) -> list[dict[str, Any]]:
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


class Snapshots:
    """The runs room's save / restore / branch, on top of a RunManager."""

    def __init__(self, manager: RunManager) -> None:
        self._m = manager
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def _dir(self, run_key: str, snapshot_id: str) -> Path:
        if self._m.runs_dir is None:
            raise FailedPrecondition("this daemon has no state directory to keep snapshots in", reason="NO_STATE_DIR")
        return self._m.runs_dir / run_key / "snapshots" / snapshot_id

    # -- save ------------------------------------------------------------------------
    async def save(self, tenant: str, run_name: str, snapshot_id: str = "") -> SnapshotView:
        """Snapshot a RUNNING run; ``snapshot_id`` empty: one is made up."""
        if snapshot_id:
            validate_run_id(snapshot_id, "snapshot_id")
        else:
            snapshot_id = f"snap-{uuid.uuid4().hex[:12]}"
        row = await self._m._get_row(tenant, run_name, "run")
        live = self._m._live.get(row.name)
        if row.state != "RUNNING" or live is None or live.worker is None:
            raise FailedPrecondition(
                f"run {run_name!r} is {row.state}; snapshots are taken of RUNNING runs",
                reason="RUN_NOT_RUNNING",
            )
        return await self._take(live, live.worker, snapshot_id)

    async def on_effect(self, live: _Live, label: str, seq: int) -> None:
        """A scenario's SaveSnapshot effect: named by its label, else by the fire's journal position.

        A name already taken (a restored run passing the same event again) gets a suffix.
        """
        worker = live.worker
        assert worker is not None
        base = validate_run_id(label or f"snap-{seq}", "label")
        for n in range(1, _MAX_SUFFIX):
            snapshot_id = base if n == 1 else f"{base[: 63 - len(str(n)) - 1]}-{n}"
            if await self._m.store.get_snapshot(_store_name(live.key, snapshot_id)) is None:
                break
        else:
            raise AlreadyExists(f"run {live.key!r} already has snapshots {base}..{base}-{_MAX_SUFFIX - 1}")
        view = await self._take(live, worker, snapshot_id)
        log.info("run %s: scenario snapshot %s at journal position %d", live.key, view.name, view.journal_length)

    async def _take(self, live: _Live, worker: RunWorker, snapshot_id: str) -> SnapshotView:
        store = self._m.store
        key = live.key
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
                cap = await worker.capture(dest, on_paused=paused)
                sandbox = cap.sandbox
                await self._m.flush()
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
                await store.insert_snapshot(name, key, live.row.tenant, create_ns, cap.sim_ns, cap.journal_length, info)
            except BaseException:
                await asyncio.to_thread(shutil.rmtree, dest, True)
                discard = getattr(worker.agent, "discard_snapshot", None)
                if sandbox is not None and discard is not None:
                    await asyncio.shield(discard(str(sandbox.get("image", ""))))
                raise
        return _view(
            {
                "name": name,
                "create_ns": create_ns,
                "sim_ns": cap.sim_ns,
                "journal_length": cap.journal_length,
                "info": info,
            }
        )

    # -- list ----------------------------------------------------------------------------
    async def list(self, tenant: str, run_name: str) -> list[SnapshotView]:
        row = await self._m._get_row(tenant, run_name, "run")
        return [_view(s) for s in await self._m.store.list_snapshots(row.name)]

    # -- restore ------------------------------------------------------------------------
    async def restore(
        self, tenant: str, snapshot_name: str, new_run_id: str = "", labels: Mapping[str, str] | None = None
    ) -> RunView:
        """Restore into the snapshot's own run (``new_run_id`` empty) or into a new run (a branch)."""
        from sclated.runs._manager import ACTIVE_STATES, _Live, _view

        m = self._m
        validate_tenant(tenant)
        run_id, snapshot_id = parse_snapshot_name(snapshot_name)
        if new_run_id:
            validate_run_id(new_run_id, "new_run_id")
        labels = dict(labels or {})
        if labels and not new_run_id:
            raise InvalidArgument(
                "labels are for the new run of a branch; set new_run_id or leave labels empty",
                field="labels",
            )
        src_key = f"{tenant}/{run_id}"
        snap = await m.store.get_snapshot(_store_name(src_key, snapshot_id))
        src = await m._row(src_key)
        if snap is None or src is None:
            raise NotFound(f"snapshot {snapshot_name!r} not found", field="snapshot")
        if not m._accepting:
            raise Unavailable("the daemon is shutting down; try again when it is back", reason="SHUTTING_DOWN")
        spec = RunSpec.from_dict(src.spec)
        if new_run_id:
            merged = {**spec.labels, **labels}
            try:
                spec = RunSpec.from_dict({**spec.to_dict(), "labels": merged})
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
        if info.get("sandbox"):
            agent = m.registry.agent(spec.agent.harness).factory(spec.agent.options)
            check = getattr(agent, "check_restorable", None)
            if check is not None:
                await check(snap_dir)
        now = time.time_ns()
        sim_ns = int(snap["sim_ns"])
        if new_run_id:
            key = f"{tenant}/{new_run_id}"
            async with self._lock(key):
                if key in m._live or await m.store.get_run(key) is not None:
                    raise AlreadyExists(f"run runs/{new_run_id} already exists", field="new_run_id")
                active = sum(1 for lv in m._live.values() if lv.row.tenant == tenant and not lv.finished)
                if active >= m.config.tenant_max_active:
                    raise ResourceExhausted(
                        f"tenant {tenant!r} already has {active} pending or running runs "
                        f"(quota {m.config.tenant_max_active})",
                        reason="TENANT_QUOTA",
                    )
                parent = f"runs/{run_id}"
                m._seq += 1  # taken now: a CreateRun meanwhile gets the next one
                row = RunRow(
                    name=key,
                    tenant=tenant,
                    spec=spec.to_dict(),
                    state="PENDING",
                    create_ns=now,
                    seq=m._seq,
                    request_hash=hashlib.sha256(
                        json.dumps([spec.to_dict(), new_run_id, parent, snapshot_name], sort_keys=True).encode()
                    ).hexdigest(),
                    reason=f"branched from {snapshot_name}; waiting for admission",
                    sim_ns=sim_ns,
                    last_event_seq=1,
                    parent=parent,
                )
                event = EventRow(key, 1, "state", sim_ns, now, {"state": "PENDING", "reason": row.reason})
                await m.store.restore_run(
                    row,
                    insert=True,
                    event=event,
                    journal=journal,
                    calls=calls,
                    snapshot=snapshot_name,
                    snapshot_dir=str(snap_dir),
                )
                live = _Live(row, 2, resume=True)
        else:
            key = src_key
            async with self._lock(key):
                current = await m._row(key)
                if current is None:
                    raise NotFound(f"snapshot {snapshot_name!r} not found", field="snapshot")
                if current.state in ACTIVE_STATES or key in m._live:
                    raise FailedPrecondition(
                        f"run runs/{run_id} is {current.state}; restore into it once it has ended "
                        "(cancel it first), or branch into a new run (new_run_id)",
                        reason="RUN_ACTIVE",
                    )
                row = dataclasses.replace(
                    current,
                    state="PENDING",
                    reason=f"restored from {snapshot_name}; waiting for admission",
                    end_ns=None,
                    sim_ns=sim_ns,
                    results={},
                    last_event_seq=current.last_event_seq + 1,
                )
                event = EventRow(
                    key, row.last_event_seq, "state", sim_ns, now, {"state": "PENDING", "reason": row.reason}
                )
                await m.store.restore_run(
                    row,
                    insert=False,
                    event=event,
                    journal=journal,
                    calls=calls,
                    snapshot=snapshot_name,
                    snapshot_dir=str(snap_dir),
                )
                live = _Live(row, row.last_event_seq + 1, resume=True)
        m._live[key] = live
        m._queue[key] = None
        m._admit()
        return _view(live.row)
