"""`sclated bench soak`: load held for minutes against a real daemon, and what it left.

A fresh ``sclated`` process (its retention set short, ``--retention``, default
10 s, so finished runs' history is expired while the soak runs) gets a steady
stream of mixed runs for ``--minutes`` (default 3):

* lanes (``--lanes``, default 4) each create one run, follow it with WatchRun
  to its end, and create the next; ``--sandboxed-lanes`` of them (default 1)
  run the reference harness in a Docker sandbox against the embedded model
  (the synthetic benchmark, one short day), the others the scripted agent.
  Some runs are made to fail (a scripted agent failing a round) and some are
  cancelled mid-way: both must end the way they were told to;
* watchers (``--watchers``, default 3) connect to random recent runs at a random
  ``after_seq``, read a few events and disconnect; a run whose history expired
  must answer FAILED_PRECONDITION HISTORY_EXPIRED, a deleted one NOT_FOUND;
* a janitor deletes a few finished runs, and asks runs whose history expired
  for their trajectories: a clear HISTORY_EXPIRED, never an empty answer;
* a separate probe process times GetRun and ListRuns throughout (what another
  user of the daemon sees).

The daemon's RSS, open file descriptors, threads and child processes are read
from /proc at quiet points, each once every run has ended and its history has
expired: after a warm-up of the same load (``--warmup-s``: every lazy start-up
done, the embedded model started), half way through the load (``*_mid``) and
after it; the difference between the first and the last is the growth
(``*_start``/``*_end``). Memory that levels off grows in the first half only.
The database is measured at the same points: ``db_bytes_per_run`` is its growth
per run created in between, against the mean size of a kept run row
(``run_files_mb``: the runs' directories, reports and snapshots, which retention
leaves alone, measured the same way). After
the daemon stops (SIGTERM), every container, network and volume labelled with
its id counts as left behind.

``targets`` holds the limits this run was held to, ``missed_targets`` what
missed them; ``seed`` replays the same choices.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import secrets
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sclated.bench._procs import descendants

__all__ = [
    "ProcSample",
    "RunOutcome",
    "SoakRaw",
    "bench_soak",
    "count_leftovers",
    "proc_sample",
    "soak_report",
]

_NS = 1_000_000_000
API_P99_MS = 250.0
RSS_GROWTH_ABS_MB = 24.0
RSS_GROWTH_REL = 0.10
FDS_GROWTH = 2
DB_ROW_FACTOR = 3.0
DB_SLACK_BYTES = 1024
SCRIPTED_FAIL_SHARE = 0.05
CANCEL_SHARE = 0.08
DELETE_SHARE = 0.05
FAST_REFERENCE = {"max_tokens": 24, "max_steps": 2}
CANCEL_AFTER_S = {"scripted": (0.0, 1.5), "sandboxed": (2.0, 20.0)}
RUN_TIMEOUT_S = {"scripted": 120.0, "sandboxed": 600.0}
"""A run not ended by then counts as failed (STUCK_<state>) and is cancelled."""


# -- what is measured -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcSample:
    """One look at a process in /proc."""

    rss_mb: float
    fds: int
    threads: int
    children: int
    """Live processes descended from it (the embedded model server, helpers)."""


def proc_sample(pid: int) -> ProcSample:
    """RSS, file descriptors, threads and descendants of ``pid``, from /proc."""
    status: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        status[key] = value.strip()
    return ProcSample(
        rss_mb=round(int(status["VmRSS"].split()[0]) / 1024, 1),
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        threads=int(status["Threads"]),
        children=descendants(pid),
    )


def _median_sample(samples: Sequence[ProcSample]) -> ProcSample:
    return ProcSample(
        rss_mb=round(statistics.median(s.rss_mb for s in samples), 1),
        fds=int(statistics.median(s.fds for s in samples)),
        threads=int(statistics.median(s.threads for s in samples)),
        children=int(statistics.median(s.children for s in samples)),
    )


class LabelledResources(Protocol):
    """What the container engine holds under a daemon's label (DockerRuntime.labelled)."""

    async def labelled(self, daemon_id: str) -> dict[str, list[str]]: ...


async def count_leftovers(engine: LabelledResources, daemon_id: str) -> dict[str, int | None]:
    """Containers, networks and volumes still labelled as ``daemon_id``'s."""
    found = await engine.labelled(daemon_id)
    return {f"{kind}_left": len(found.get(kind, [])) for kind in ("containers", "networks", "volumes")}


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """One run a lane made: what it was told to do and how it ended."""

    kind: str
    """``scripted`` or ``sandboxed``."""
    state: str
    expected: tuple[str, ...]
    reason: str = ""
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.state in self.expected


@dataclass(slots=True)
class SoakRaw:
    """Everything the soak collected; :func:`soak_report` turns it into the figures."""

    minutes: float
    seed: int
    retention_s: float
    sandboxed: str
    """``on``, or ``off: why``."""
    outcomes: list[RunOutcome] = field(default_factory=list)
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    start: ProcSample | None = None
    mid: ProcSample | None = None
    """At the quiet point half way through the load (for telling a plateau from a leak)."""
    end: ProcSample | None = None
    peak_rss_mb: float = 0.0
    leftovers: dict[str, int | None] = field(default_factory=dict)
    """``containers_left``, ``networks_left``, ``volumes_left``; None: the engine could not be asked."""
    db_start_bytes: int = 0
    db_end_bytes: int = 0
    run_files_start_bytes: int = 0
    run_files_end_bytes: int = 0
    """The runs' directories (reports, snapshots): retention leaves them."""
    runs_kept_between: int = 0
    """Runs created minus runs deleted between the two quiet points."""
    run_row_bytes_mean: float = 0.0
    db_freed_bytes: int = 0
    runs_expired: int = 0
    overdue_history_runs: int = 0
    expired_answers: Counter[str] = field(default_factory=Counter)
    """What runs whose history expired answered: ``ok`` (HISTORY_EXPIRED) or what else."""
    watch: Counter[str] = field(default_factory=Counter)
    api_errors: Counter[str] = field(default_factory=Counter)
    deleted: int = 0
    load_wall_s: float = 0.0
    daemon_exit_code: int | None = None
    daemon_log_errors: list[str] = field(default_factory=list)
    """The daemon's ERROR lines (a logged exception: something failed inside, whatever the API said)."""
    daemon_log_warnings: int = 0


def _p(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))], 2)


def soak_report(raw: SoakRaw) -> dict[str, Any]:
    """The figures, the limits they were held to, and which missed."""
    done = [o for o in raw.outcomes if o.ok]
    bad = [o for o in raw.outcomes if not o.ok]
    lat = [x for xs in raw.latencies_ms.values() for x in xs]
    start, end = raw.start, raw.end
    rss_limit = round(max(RSS_GROWTH_ABS_MB, RSS_GROWTH_REL * (start.rss_mb if start else 0.0)), 1)
    growth = raw.db_end_bytes - raw.db_start_bytes
    per_run = growth / raw.runs_kept_between if raw.runs_kept_between > 0 else None
    db_limit = round(DB_ROW_FACTOR * raw.run_row_bytes_mean + DB_SLACK_BYTES)
    mb = 1024 * 1024
    out: dict[str, Any] = {
        "minutes": raw.minutes,
        "seed": raw.seed,
        "sandboxed": raw.sandboxed,
        "runs_completed": len(done),
        "runs_failed": len(bad),
        "runs_by_kind": dict(Counter(o.kind for o in raw.outcomes)),
        "runs_by_state": dict(Counter(o.state for o in raw.outcomes)),
        "failures": [f"{o.kind} ended {o.state} (expected {'/'.join(o.expected)}): {o.reason}"[:300] for o in bad[:5]],
        "runs_per_minute": round(len(raw.outcomes) / (raw.load_wall_s / 60), 1) if raw.load_wall_s else None,
        "sandboxed_run_s_p50": _p([o.wall_s for o in raw.outcomes if o.kind == "sandboxed" and o.ok], 0.5),
        "api_calls": len(lat),
        "api_latency_ms_p50": _p(lat, 0.5),
        "api_latency_ms_p99": _p(lat, 0.99),
        "api_latency_ms_max": _p(lat, 1.0),
        "api_latency_by_method_ms_p99": {k: _p(v, 0.99) for k, v in raw.latencies_ms.items() if v},
        "api_errors": dict(raw.api_errors),
        "api_errors_total": sum(raw.api_errors.values()),
        "watch": dict(raw.watch),
        "daemon_rss_mb_start": start.rss_mb if start else None,
        "daemon_rss_mb_mid": raw.mid.rss_mb if raw.mid else None,
        "daemon_rss_mb_end": end.rss_mb if end else None,
        "daemon_rss_mb_peak": raw.peak_rss_mb,
        "fds_start": start.fds if start else None,
        "fds_mid": raw.mid.fds if raw.mid else None,
        "fds_end": end.fds if end else None,
        "threads_start": start.threads if start else None,
        "threads_end": end.threads if end else None,
        "children_start": start.children if start else None,
        "children_end": end.children if end else None,
        **raw.leftovers,
        "retention_s": raw.retention_s,
        "runs_expired": raw.runs_expired,
        "overdue_history_runs": raw.overdue_history_runs,
        "expired_answers": dict(raw.expired_answers),
        "runs_deleted": raw.deleted,
        "db_size_mb": round(raw.db_end_bytes / mb, 2),
        "db_size_mb_start": round(raw.db_start_bytes / mb, 2),
        "db_reclaimed_mb": round(raw.db_freed_bytes / mb, 2),
        "db_size_mb_without_retention_est": round((raw.db_end_bytes + raw.db_freed_bytes) / mb, 2),
        "db_bytes_per_run": round(per_run) if per_run is not None else None,
        "run_row_bytes_mean": round(raw.run_row_bytes_mean),
        "run_files_mb": round(raw.run_files_end_bytes / mb, 2),
        "run_files_bytes_per_run": (
            round((raw.run_files_end_bytes - raw.run_files_start_bytes) / raw.runs_kept_between)
            if raw.runs_kept_between > 0
            else None
        ),
        "daemon_exit_code": raw.daemon_exit_code,
        "daemon_log_errors": len(raw.daemon_log_errors),
        "daemon_log_error_lines": raw.daemon_log_errors[:5],
        "daemon_log_warnings": raw.daemon_log_warnings,
    }
    targets: dict[str, Any] = {
        "runs_failed": 0,
        "api_errors_total": 0,
        "api_latency_ms_p99": API_P99_MS,
        "rss_growth_mb": rss_limit,
        "fds_growth": FDS_GROWTH,
        "children_growth": 0,
        "containers_left": 0,
        "networks_left": 0,
        "volumes_left": 0,
        "overdue_history_runs": 0,
        "runs_expired_min": 1,
        "expired_answers_other": 0,
        "db_bytes_per_run": db_limit,
        "daemon_exit_code": 0,
        "daemon_log_errors": 0,
    }
    misses: list[str] = []

    def over(name: str, value: float | None, limit: float) -> None:
        if value is None or value > limit:
            misses.append(f"{name} {value} > {limit}")

    over("runs_failed", len(bad), 0)
    over("api_errors_total", out["api_errors_total"], 0)
    over("api_latency_ms_p99", out["api_latency_ms_p99"], API_P99_MS)
    over("rss_growth_mb", round(end.rss_mb - start.rss_mb, 1) if start and end else None, rss_limit)
    over("fds_growth", end.fds - start.fds if start and end else None, FDS_GROWTH)
    over("children_growth", end.children - start.children if start and end else None, 0)
    for kind in ("containers_left", "networks_left", "volumes_left"):
        over(kind, raw.leftovers.get(kind), 0)
    over("overdue_history_runs", raw.overdue_history_runs, 0)
    if raw.retention_s and raw.runs_expired < 1:
        misses.append("runs_expired 0 < 1: the retention never expired a run")
    over("expired_answers_other", sum(n for k, n in raw.expired_answers.items() if k != "ok"), 0)
    over("db_bytes_per_run", per_run, db_limit)
    if raw.daemon_exit_code != 0:
        misses.append(f"daemon_exit_code {raw.daemon_exit_code} != 0")
    over("daemon_log_errors", len(raw.daemon_log_errors), 0)
    out["targets"] = targets
    out["missed_targets"] = misses
    out["meets_targets"] = not misses
    return out


# -- the load -----------------------------------------------------------------------


_SWEEP_LINE = re.compile(r"retention sweep: (\{.*\})")


def log_problems(log_text: str) -> tuple[list[str], int]:
    """The daemon log's ERROR lines (with the exception's last line when one follows),
    and how many WARNING lines it has."""
    errors: list[str] = []
    warnings = 0
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        if " ERROR " in line:
            tail = ""
            for follow in lines[i + 1 : i + 60]:
                if _LOG_LINE.match(follow):
                    break
                if follow.strip():
                    tail = follow.strip()
            errors.append(f"{line.split(' ERROR ', 1)[1]}{(' | ' + tail) if tail else ''}"[:400])
        elif " WARNING " in line:
            warnings += 1
    return errors, warnings


_LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def freed_bytes_in_log(log_text: str) -> int:
    """What the daemon's retention sweeps freed, from its log ("retention sweep: {...}")."""
    total = 0
    for match in _SWEEP_LINE.finditer(log_text):
        with contextlib.suppress(ValueError, TypeError):
            total += int(json.loads(match.group(1)).get("bytes_freed", 0))
    return total


def _db_bytes(state_dir: Path) -> int:
    """The database's files on disk: the main file, its WAL and shared memory."""
    files = [state_dir / f"sclated.db{suffix}" for suffix in ("", "-wal", "-shm")]
    return sum(f.stat().st_size for f in files if f.exists())


def _tree_bytes(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def _mean_row_bytes(db: Path) -> float:
    """The mean stored size of a run's row (what retention keeps of a run)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        value = conn.execute(
            "SELECT AVG(LENGTH(name) + LENGTH(tenant) + LENGTH(spec) + LENGTH(state) + LENGTH(reason) "
            "+ LENGTH(results) + LENGTH(parent) + COALESCE(LENGTH(request_id), 0) "
            "+ COALESCE(LENGTH(request_hash), 0) + 64) FROM runs"
        ).fetchone()[0]
    return float(value or 0.0)


class _Soak:
    """One soak against one daemon process (see the module's docstring)."""

    def __init__(self, args: argparse.Namespace, stub: Any, pid: int, state_dir: Path, retention_s: float) -> None:
        from sclate_api.v1 import sclate_pb2 as pb

        self.pb = pb
        self.stub = stub
        self.pid = pid
        self.state_dir = state_dir
        self.retention_s = retention_s
        self.rng = random.Random(args.seed)
        self.lanes = max(1, args.lanes)
        self.sandboxed_lanes = 0
        self.watchers = max(0, args.watchers)
        self.stop = asyncio.Event()
        self.recent: deque[str] = deque(maxlen=64)
        self.finished: deque[tuple[str, str, float]] = deque(maxlen=256)
        """(name, kind, monotonic end) of runs that ended, for the janitor."""
        self.created = 0
        self.raw = SoakRaw(minutes=args.minutes, seed=args.seed, retention_s=retention_s, sandboxed="off")

    # -- runs --------------------------------------------------------------------------
    def _spec(self, kind: str) -> tuple[Any, tuple[str, ...]]:
        pb = self.pb
        if kind == "sandboxed":
            run = pb.Run(benchmark=pb.BenchmarkSpec(name="synthetic"), agent=pb.AgentSpec(harness="reference"))
            run.benchmark.options.update({"days": 1, "events_per_day": self.rng.choice([1, 2])})
            run.agent.options.update(FAST_REFERENCE)
            return run, ("SUCCEEDED",)
        run = pb.Run(benchmark=pb.BenchmarkSpec(name="synthetic"), agent=pb.AgentSpec(harness="scripted"))
        days = self.rng.choice([1, 1, 2])
        events = self.rng.randint(1, 4)
        run.benchmark.options.update({"days": days, "events_per_day": events})
        options: dict[str, Any] = {"turn_ms": self.rng.choice([5, 20, 50, 200]), "turn_jitter": 0.5}
        expected: tuple[str, ...] = ("SUCCEEDED",)
        if self.rng.random() < SCRIPTED_FAIL_SHARE:
            options["fail_on_round"] = f"d{days - 1}.task{events - 1}"
            expected = ("FAILED",)
        run.agent.options.update(options)
        run.labels.update({"soak": kind})
        return run, expected

    async def _one_run(self, kind: str) -> None:
        pb = self.pb
        run, expected = self._spec(kind)
        # Mid-run mostly (a sandboxed run lasts tens of seconds, a scripted one about a second).
        cancel_after = self.rng.uniform(*CANCEL_AFTER_S[kind]) if self.rng.random() < CANCEL_SHARE else None
        if cancel_after is not None:
            expected = (*expected, "CANCELLED")  # a cancel that comes after the end changes nothing
        t0 = time.monotonic()
        created = await self.stub.CreateRun(pb.CreateRunRequest(run=run))
        self.created += 1
        self.recent.append(created.name)

        async def cancel() -> None:
            assert cancel_after is not None
            await asyncio.sleep(cancel_after)
            await self.stub.CancelRun(pb.CancelRunRequest(name=created.name))

        canceller = asyncio.create_task(cancel()) if cancel_after is not None else None
        state, reason = "STATE_UNSPECIFIED", ""
        try:
            async with asyncio.timeout(RUN_TIMEOUT_S[kind]):
                async for ev in self.stub.WatchRun(pb.WatchRunRequest(name=created.name)):
                    if ev.WhichOneof("kind") == "state":
                        state, reason = pb.State.Name(ev.state.state), ev.state.reason
        except TimeoutError:
            # A run that never ends is a defect to report, not a reason to hang the soak.
            got = await self.stub.GetRun(pb.GetRunRequest(name=created.name))
            state = f"STUCK_{pb.State.Name(got.state)}"
            reason = f"no end after {RUN_TIMEOUT_S[kind]:.0f} s: {got.state_reason}"
            await self.stub.CancelRun(pb.CancelRunRequest(name=created.name))
        finally:
            if canceller is not None:
                canceller.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await canceller
        self.raw.outcomes.append(RunOutcome(kind, state, expected, reason, round(time.monotonic() - t0, 2)))
        self.finished.append((created.name, kind, time.monotonic()))
        if kind == "sandboxed" and state == "SUCCEEDED":
            # While it is kept, its calls are there (the export path, exercised).
            async for _ in self.stub.StreamTrajectories(pb.StreamTrajectoriesRequest(run=created.name)):
                pass

    async def lane(self, kind: str) -> None:
        while not self.stop.is_set():
            try:
                await self._one_run(kind)
            except Exception as exc:  # an API error: counted, and the lane goes on
                self._count_error(exc)
                await asyncio.sleep(1.0)

    def _count_error(self, exc: BaseException) -> None:
        import grpc

        code = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else type(exc).__name__
        self.raw.api_errors[code] += 1

    # -- watchers and janitor -------------------------------------------------------------
    async def watcher(self) -> None:
        import grpc

        pb = self.pb
        while not self.stop.is_set():
            await asyncio.sleep(self.rng.uniform(0.05, 0.5))
            if not self.recent:
                continue
            name = self.rng.choice(list(self.recent))
            want = self.rng.randint(1, 40)
            call = self.stub.WatchRun(pb.WatchRunRequest(name=name, after_seq=self.rng.choice([0, 0, 1, 5, 20])))
            got = 0
            try:
                async with asyncio.timeout(self.rng.uniform(0.2, 3.0)):
                    async for _ in call:
                        got += 1
                        if got >= want:
                            break
                self.raw.watch["sessions"] += 1
            except TimeoutError:
                self.raw.watch["disconnected_waiting"] += 1
            except grpc.aio.AioRpcError as exc:
                reason = dict(exc.trailing_metadata() or ()).get("sclate-reason", "")
                if exc.code() == grpc.StatusCode.FAILED_PRECONDITION and reason == "HISTORY_EXPIRED":
                    self.raw.watch["history_expired"] += 1
                elif exc.code() == grpc.StatusCode.NOT_FOUND:
                    self.raw.watch["deleted"] += 1
                else:
                    self._count_error(exc)
            finally:
                call.cancel()  # disconnect
            self.raw.watch["events"] += got

    async def janitor(self) -> None:
        """Deletes a few finished runs; asks expired ones for their trajectories."""
        import grpc

        pb = self.pb
        while not self.stop.is_set():
            await asyncio.sleep(1.0)
            overdue = [f for f in self.finished if time.monotonic() - f[2] > self.retention_s + 5]
            if overdue and self.retention_s:
                name = self.rng.choice(overdue)[0]
                try:
                    async for _ in self.stub.StreamTrajectories(pb.StreamTrajectoriesRequest(run=name)):
                        pass
                    self.raw.expired_answers["answered as if kept"] += 1
                except grpc.aio.AioRpcError as exc:
                    reason = dict(exc.trailing_metadata() or ()).get("sclate-reason", "")
                    if reason == "HISTORY_EXPIRED":
                        self.raw.expired_answers["ok"] += 1
                    elif exc.code() != grpc.StatusCode.NOT_FOUND:
                        self.raw.expired_answers[f"{exc.code().name} {reason}".strip()] += 1
            if self.finished and self.rng.random() < DELETE_SHARE * self.lanes:
                name, _, _ = self.finished[self.rng.randrange(len(self.finished))]
                try:
                    await self.stub.DeleteRun(pb.DeleteRunRequest(name=name))
                    self.raw.deleted += 1
                except grpc.aio.AioRpcError as exc:
                    if exc.code() != grpc.StatusCode.NOT_FOUND:
                        self._count_error(exc)

    async def load(self, kinds: Sequence[str], seconds: float) -> None:
        """Lanes, watchers and the janitor for ``seconds``; then each lane finishes its run."""
        self.stop.clear()
        t0 = time.monotonic()
        tasks = [asyncio.create_task(self.lane(k), name=f"soak-lane-{i}") for i, k in enumerate(kinds)]
        tasks += [asyncio.create_task(self.watcher(), name=f"soak-watch-{i}") for i in range(self.watchers)]
        tasks += [
            asyncio.create_task(self.janitor(), name="soak-janitor"),
            asyncio.create_task(self.sample_peaks(), name="soak-peaks"),
        ]
        try:
            await asyncio.sleep(seconds)
            self.stop.set()
            await asyncio.wait(tasks[:-1], timeout=600)
        finally:
            self.stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.raw.load_wall_s += round(time.monotonic() - t0, 1)

    # -- quiet points ---------------------------------------------------------------------
    async def _all_runs(self) -> list[Any]:
        runs: list[Any] = []
        token = ""
        while True:
            page = await self.stub.ListRuns(self.pb.ListRunsRequest(page_size=1000, page_token=token))
            runs.extend(page.runs)
            token = page.next_page_token
            if not token:
                return runs

    async def settle(self, timeout_s: float) -> list[Any]:
        """Wait until no run is active and every ended run's history has expired."""
        pb = self.pb
        deadline = time.monotonic() + timeout_s
        while True:
            runs = await self._all_runs()
            active = [r for r in runs if r.state in (pb.PENDING, pb.RUNNING)]
            kept = [r for r in runs if r.state in (pb.SUCCEEDED, pb.FAILED, pb.CANCELLED) and not r.history_expired]
            if not active and (not kept or not self.retention_s):
                return runs
            if time.monotonic() > deadline:
                for r in active:
                    await self.stub.CancelRun(pb.CancelRunRequest(name=r.name))
                if not kept or time.monotonic() > deadline + 30:
                    return runs
            await asyncio.sleep(0.5)

    async def quiet_sample(self) -> ProcSample:
        samples = []
        for _ in range(5):
            samples.append(proc_sample(self.pid))
            await asyncio.sleep(0.4)
        return _median_sample(samples)

    async def sample_peaks(self) -> None:
        while True:
            with contextlib.suppress(OSError, KeyError):
                self.raw.peak_rss_mb = max(self.raw.peak_rss_mb, proc_sample(self.pid).rss_mb)
            await asyncio.sleep(2.0)

    def overdue(self, runs: Sequence[Any]) -> tuple[int, int]:
        """(runs whose history expired, ended runs past retention + a sweep still holding it)."""
        pb = self.pb
        now = time.time_ns()
        grace = int((self.retention_s + max(1.0, self.retention_s / 10) + 2) * _NS)
        expired = sum(1 for r in runs if r.history_expired)
        late = sum(
            1
            for r in runs
            if self.retention_s
            and r.state in (pb.SUCCEEDED, pb.FAILED, pb.CANCELLED)
            and not r.history_expired
            and r.HasField("end_time")
            and now - r.end_time.ToNanoseconds() > grace
        )
        return expired, late


async def _sandboxed_available(stub: Any, daemon_id: str) -> str:
    """``on`` when the reference harness's image is on the engine, else ``off: why``."""
    from sclate_api.v1 import sclate_pb2 as pb

    from sclated.errors import SclateError
    from sclated.runtime import DockerRuntime

    agents = {a.name: a for a in (await stub.ListAgents(pb.ListAgentsRequest())).agents}
    image = agents["reference"].image if "reference" in agents else ""
    if not image:
        return "off: the daemon lists no reference harness image"
    try:
        runtime = await DockerRuntime.connect(daemon_id)
    except SclateError as exc:
        return f"off: no container engine ({exc.message})"
    try:
        if not await runtime.image_exists(image):
            return f"off: image {image} is not built (`sclated images build`)"
    finally:
        await runtime.close()
    return "on"


async def bench_soak(args: argparse.Namespace) -> dict[str, Any]:
    import grpc
    from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

    from sclated.bench._cli import end_group, spawn
    from sclated.bench._daemon import reap_daemon_sandboxes, start_daemon_process
    from sclated.runs import parse_duration
    from sclated.runtime import DockerRuntime

    if args.seed is None:
        args.seed = secrets.randbelow(2**31)
    retention_s = parse_duration(args.retention, "--retention")
    with tempfile.TemporaryDirectory(prefix="sclate-bench-soak-") as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        daemon_id = f"bench-{os.getpid()}-{secrets.token_hex(3)}"
        (state / "daemon-id").write_text(daemon_id + "\n")
        extra = ["--retention", args.retention, "--drain-grace-s", "10"]
        if args.no_reports:
            extra.append("--no-reports")
        proc, ready = await start_daemon_process(state, *extra)
        probe: asyncio.subprocess.Process | None = None
        try:
            async with grpc.aio.insecure_channel(ready["tcp"]) as channel:
                soak = _Soak(args, pb_grpc.SclateStub(channel), proc.pid, state, retention_s)
                raw = soak.raw
                raw.sandboxed = (
                    await _sandboxed_available(soak.stub, daemon_id) if args.sandboxed_lanes > 0 else "off: asked"
                )
                sandboxed = min(args.sandboxed_lanes, soak.lanes) if raw.sandboxed == "on" else 0
                kinds = ["sandboxed"] * sandboxed + ["scripted"] * (soak.lanes - sandboxed)
                _say(args, f"soak: seed {args.seed}, lanes {kinds}, sandboxed {raw.sandboxed}")

                # Warm-up: the same load for a while (every lazy start-up done, the
                # allocator's high-water marks reached), then quiet: the start point.
                await soak.load(kinds, args.warmup_s)
                await soak.settle(retention_s + 60)
                raw.start = await soak.quiet_sample()
                raw.db_start_bytes = _db_bytes(state)
                raw.run_files_start_bytes = await asyncio.to_thread(_tree_bytes, state / "runs")
                created_before, deleted_before = soak.created, raw.deleted
                _say(args, f"soak: warm ({len(raw.outcomes)} runs), {raw.start}; load for {args.minutes} min")

                stop_file, probe_out = Path(tmp) / "probe.stop", Path(tmp) / "probe.json"
                probe = await spawn(
                    sys.executable, "-m", "sclated.bench._probe", ready["tcp"], str(stop_file), str(probe_out), "reads"
                )
                # Two halves with a quiet point between: memory that levels off (the
                # allocator's and the collector's noise) grows in the first half only; a leak
                # in both.
                await soak.load(kinds, args.minutes * 30)
                await soak.settle(retention_s + 120)
                raw.mid = await soak.quiet_sample()
                _say(args, f"soak: half way ({len(raw.outcomes)} runs), {raw.mid}")
                await soak.load(kinds, args.minutes * 30)
                stop_file.touch()
                await probe.wait()
                raw.latencies_ms = json.loads(probe_out.read_text())

                runs = await soak.settle(retention_s + 120)
                raw.end = await soak.quiet_sample()
                raw.db_end_bytes = _db_bytes(state)
                raw.run_files_end_bytes = await asyncio.to_thread(_tree_bytes, state / "runs")
                raw.runs_kept_between = (soak.created - created_before) - (raw.deleted - deleted_before)
                raw.runs_expired, raw.overdue_history_runs = soak.overdue(runs)
        finally:
            if probe is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.shield(end_group(probe, grace_s=2))
            code = await asyncio.shield(end_group(proc, sig=signal.SIGTERM, grace_s=60))
            leftovers: dict[str, int | None] = dict.fromkeys(("containers_left", "networks_left", "volumes_left"))
            with contextlib.suppress(Exception):
                runtime = await DockerRuntime.connect(daemon_id)
                try:
                    leftovers = await count_leftovers(runtime, daemon_id)
                finally:
                    await runtime.close()
            await asyncio.shield(reap_daemon_sandboxes(state))
        raw.daemon_exit_code = code
        raw.leftovers = leftovers
        raw.run_row_bytes_mean = _mean_row_bytes(state / "sclated.db")
        log_text = (state / "sclated.log").read_text(errors="replace")
        raw.db_freed_bytes = freed_bytes_in_log(log_text)
        raw.daemon_log_errors, raw.daemon_log_warnings = log_problems(log_text)
    return soak_report(raw)


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.json:
        print(text, file=sys.stderr, flush=True)
