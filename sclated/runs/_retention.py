"""Retention: a finished run's history expires some time after the run ended.

A daemon that runs for months keeps every run's watch history (run events), its
scheduler journal and its captured model calls (token ids and log
probabilities, the bulk of the database). With a retention set (``retention =
"7d"``), a run that ended SUCCEEDED, FAILED or CANCELLED more than that long
ago, in wall time, loses that history: one transaction per run deletes its
events, journal and calls and marks the run, then the freed pages go back to
the file system (an incremental vacuum) so the file shrinks.

What stays: the run's row (spec, state and reason, times, results: scores,
verdicts, scheduler figures, calls by role), its report files and its
snapshots. A snapshot keeps its own copy of the journal and calls (see
``sclated.runs._snapshots``), so restoring or branching from it works after
its run's history expired; a restore into the run itself brings a journal
and calls back. Never touched: PENDING, RUNNING and INTERRUPTED runs (an
interrupted run resumes from its journal).

After expiry, WatchRun from before the expired events, StreamTrajectories and
ExportTrajectories answer FAILED_PRECONDITION with reason HISTORY_EXPIRED,
naming when and why, instead of an empty answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from sclated.errors import FailedPrecondition, InvalidArgument
from sclated.store import RunRow, Store

__all__ = [
    "HistoryExpiry",
    "Retention",
    "SweepReport",
    "check_events_kept",
    "check_history_kept",
    "format_duration",
    "parse_duration",
]

log = logging.getLogger("sclated.runs")

_NS = 1_000_000_000
_UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_DURATION = re.compile(r"(\d+)([dhms])")
_FOREVER = ("", "0", "off", "forever", "none")
_MIN_SWEEP_S = 1.0
_MAX_SWEEP_S = 600.0
_BATCH = 100
_VACUUM_PAGES = 4096
"""Pages freed per store call (16 MiB of 4 KiB pages): other calls get the store in between."""


def parse_duration(text: str, field: str = "retention") -> float:
    """Seconds in ``text``: ``7d``, ``12h``, ``90m``, ``30s`` or a sum such as ``1d12h``;
    ``0``, ``off``, ``forever``, ``none`` or empty: 0 (keep forever)."""
    value = text.strip().lower()
    if value in _FOREVER:
        return 0.0
    pos = 0
    total = 0
    for match in _DURATION.finditer(value):
        if match.start() != pos:
            break
        total += int(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(value) or total <= 0:
        raise InvalidArgument(
            f"{field} {text!r} is not a duration: use a number with d, h, m or s (7d, 12h, 1d12h, 30s), "
            "or off to keep history forever",
            field=field,
        )
    return float(total)


def format_duration(seconds: float) -> str:
    """``parse_duration``'s spelling of ``seconds`` (``7d``, ``1d12h``, ``90s``)."""
    left = int(seconds)
    if left <= 0:
        return "off"
    parts = []
    for unit, size in _UNITS.items():
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class Retention:
    """How long a finished run keeps its history; 0 keeps it forever."""

    after_s: float = 0.0

    def __post_init__(self) -> None:
        if self.after_s < 0:
            raise InvalidArgument("retention must not be negative", field="retention")

    @property
    def enabled(self) -> bool:
        return self.after_s > 0

    @property
    def sweep_interval_s(self) -> float:
        """A tenth of the retention, between 1 s and 10 min: a run is expired at most
        that much later than it could be."""
        return min(max(self.after_s / 10, _MIN_SWEEP_S), _MAX_SWEEP_S)

    def expires_ns(self, row: RunRow, finished: Collection[str]) -> int | None:
        """When the run's history expired, or will under this retention (None: kept)."""
        if row.history_expired_ns is not None:
            return row.history_expired_ns
        if not self.enabled or row.state not in finished or row.end_ns is None:
            return None
        return row.end_ns + int(self.after_s * _NS)

    def __str__(self) -> str:
        return format_duration(self.after_s)


def _utc(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / _NS, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def check_history_kept(row: RunRow, what: str) -> None:
    """FailedPrecondition HISTORY_EXPIRED when retention removed the run's journal and calls."""
    if row.history_expired_ns is not None:
        run = f"runs/{row.name.split('/', 1)[1]}"
        raise FailedPrecondition(
            f"run {run}: {what} is gone: the daemon's retention expired the run's history "
            f"(events, journal, captured calls) on {_utc(row.history_expired_ns)}; its state, "
            "results and snapshots are kept (a restore from a snapshot brings the calls back)",
            reason="HISTORY_EXPIRED",
        )


def check_events_kept(row: RunRow, after_seq: int) -> None:
    """FailedPrecondition HISTORY_EXPIRED when events after ``after_seq`` were expired."""
    if row.events_expired_through > after_seq:
        run = f"runs/{row.name.split('/', 1)[1]}"
        when = f" on {_utc(row.history_expired_ns)}" if row.history_expired_ns is not None else ""
        raise FailedPrecondition(
            f"run {run}: events 1..{row.events_expired_through} were expired by the daemon's retention{when}; "
            f"watch with after_seq >= {row.events_expired_through}, or read the run's results (GetRun)",
            reason="HISTORY_EXPIRED",
        )


@dataclass(frozen=True, slots=True)
class SweepReport:
    """One sweep: the runs whose history went, what of it, and the file before and after."""

    runs: int = 0
    events: int = 0
    journal: int = 0
    calls: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    bytes_freed: int = 0
    """What the freed pages held: without retention, the file would be that much bigger."""
    seconds: float = 0.0


class HistoryExpiry:
    """Expires finished runs' history under a :class:`Retention`: :meth:`sweep` once,
    or :meth:`start` a task that sweeps every ``retention.sweep_interval_s`` until
    :meth:`stop`. ``now_ns`` is the wall clock (retention counts wall time since a run
    ended, whatever its simulated clock did)."""

    def __init__(
        self,
        store: Store,
        retention: Retention,
        finished: Collection[str],
        *,
        now_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.store = store
        self.retention = retention
        self.finished = tuple(sorted(finished))
        self._now_ns = now_ns
        self._task: asyncio.Task[None] | None = None
        self.last: SweepReport | None = None

    async def start(self) -> None:
        """Convert an old database to incremental vacuum once, then sweep periodically
        (nothing when the retention is off)."""
        if not self.retention.enabled:
            return
        if await self.store.auto_vacuum() != "incremental":
            log.info("retention: converting the database to incremental vacuum (once; rewrites the file)")
            await self.store.enable_incremental_vacuum()
        log.info(
            "retention: a finished run's history expires %s after it ended (checked every %.0f s)",
            self.retention,
            self.retention.sweep_interval_s,
        )
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="sclated-retention")

    @property
    def running(self) -> bool:
        """The periodic sweep is started and not stopped."""
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while True:
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("retention: the sweep failed; trying again in %.0f s", self.retention.sweep_interval_s)
            await asyncio.sleep(self.retention.sweep_interval_s)

    async def sweep(self) -> SweepReport:
        """Expire every run past the retention now, one transaction per run, then
        reclaim the freed space."""
        if not self.retention.enabled:
            return SweepReport()
        t0 = time.monotonic()
        now = self._now_ns()
        cutoff = now - int(self.retention.after_s * _NS)
        report = SweepReport(bytes_before=await self.store.file_bytes())
        while True:
            names = await self.store.runs_to_expire(self.finished, cutoff, _BATCH)
            expired_any = False
            for name in names:
                gone = await self.store.expire_history(name, states=self.finished, ended_before_ns=cutoff, now_ns=now)
                if gone is None:
                    continue  # restored or deleted since it was picked
                expired_any = True
                report = dataclasses.replace(
                    report,
                    runs=report.runs + 1,
                    events=report.events + gone.events,
                    journal=report.journal + gone.journal,
                    calls=report.calls + gone.calls,
                )
            if len(names) < _BATCH or not expired_any:
                break
        # Also after nothing expired now: pages a crash left between an expiry and its
        # vacuum, or that DeleteRun freed, go back to the file system too.
        if report.runs or await self.store.free_pages():
            while True:
                step = await self.store.reclaim_space(_VACUUM_PAGES)
                report = dataclasses.replace(report, bytes_freed=report.bytes_freed + step.bytes_freed)
                if not step.pages_left or not step.pages_freed:
                    break
        report = dataclasses.replace(
            report, bytes_after=await self.store.file_bytes(), seconds=round(time.monotonic() - t0, 3)
        )
        if report.runs:
            log.info("retention sweep: %s", json.dumps(dataclasses.asdict(report)))
        self.last = report
        return report
