"""`sclated bench soak`: each figure it reports can come out bad, and is then missed.

The figure logic (:func:`soak_report`) is fed collections a real soak could make;
the container engine is a test double; /proc is read for real.
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from sclated.bench._soak import (
    ProcSample,
    RunOutcome,
    SoakRaw,
    count_leftovers,
    freed_bytes_in_log,
    log_problems,
    proc_sample,
    soak_report,
)

from .leftovers import has_container, interrupted_ok, run_bench

MB = 1024 * 1024


def _healthy() -> SoakRaw:
    """What a good soak collects: every run as told, nothing grown, nothing left."""
    outcomes = [RunOutcome("scripted", "SUCCEEDED", ("SUCCEEDED",), wall_s=1.0) for _ in range(90)]
    outcomes += [RunOutcome("scripted", "FAILED", ("FAILED",), "round failed")] * 5
    outcomes += [RunOutcome("scripted", "CANCELLED", ("SUCCEEDED", "CANCELLED"))] * 3
    outcomes += [RunOutcome("sandboxed", "SUCCEEDED", ("SUCCEEDED",), wall_s=20.0)] * 4
    return SoakRaw(
        minutes=3,
        seed=7,
        retention_s=10,
        sandboxed="on",
        outcomes=outcomes,
        latencies_ms={"GetRun": [5.0] * 500, "ListRuns": [10.0] * 500},
        start=ProcSample(rss_mb=120.0, fds=33, threads=18, children=1),
        end=ProcSample(rss_mb=126.0, fds=33, threads=18, children=1),
        peak_rss_mb=130.0,
        leftovers={"containers_left": 0, "networks_left": 0, "volumes_left": 0},
        db_start_bytes=150_000,
        db_end_bytes=150_000 + 100 * 3_000,
        runs_kept_between=100,
        run_row_bytes_mean=2_000,
        db_freed_bytes=2 * MB,
        runs_expired=100,
        overdue_history_runs=0,
        expired_answers=Counter(ok=20),
        load_wall_s=200,
        daemon_exit_code=0,
    )


def _missed(raw: SoakRaw) -> list[str]:
    out = soak_report(raw)
    assert out["meets_targets"] == (not out["missed_targets"])
    missed: list[str] = out["missed_targets"]
    return missed


def test_a_healthy_soak_meets_its_targets() -> None:
    out = soak_report(_healthy())
    assert out["missed_targets"] == [] and out["meets_targets"] is True
    assert out["runs_completed"] == 102 and out["runs_failed"] == 0
    assert out["runs_by_kind"] == {"scripted": 98, "sandboxed": 4}
    assert out["daemon_rss_mb_start"] == 120.0 and out["daemon_rss_mb_end"] == 126.0
    assert out["fds_start"] == out["fds_end"] == 33
    assert out["containers_left"] == 0 and out["db_bytes_per_run"] == 3000
    assert out["db_size_mb_without_retention_est"] == round((450_000 + 2 * MB) / MB, 2)
    assert out["api_latency_ms_p99"] == 10.0 and out["seed"] == 7


def test_memory_growth_beyond_noise_is_flagged() -> None:
    raw = _healthy()
    raw.end = replace(raw.end or ProcSample(0, 0, 0, 0), rss_mb=120.0 + 23.0)
    assert _missed(raw) == []  # within max(24 MB, 10 % of the start)
    raw.end = replace(raw.end, rss_mb=120.0 + 60.0)
    assert _missed(raw) == ["rss_growth_mb 60.0 > 24.0"]
    raw.start = replace(raw.start or ProcSample(0, 0, 0, 0), rss_mb=500.0)
    raw.end = replace(raw.end, rss_mb=545.0)
    assert _missed(raw) == []  # 10 % of a large start is the noise
    raw.end = replace(raw.end, rss_mb=560.0)
    assert _missed(raw) == ["rss_growth_mb 60.0 > 50.0"]


def test_descriptor_and_process_leaks_are_flagged() -> None:
    raw = _healthy()
    raw.end = replace(raw.end or ProcSample(0, 0, 0, 0), fds=36)
    assert _missed(raw) == ["fds_growth 3 > 2"]
    raw.end = replace(raw.end, fds=33, children=2)
    assert _missed(raw) == ["children_growth 1 > 0"]


def test_an_unmeasured_figure_is_a_miss_not_a_pass() -> None:
    raw = _healthy()
    raw.end = None
    missed = _missed(raw)
    assert "rss_growth_mb None > 24.0" in missed and "fds_growth None > 2" in missed
    raw = _healthy()
    raw.leftovers = {"containers_left": None, "networks_left": None, "volumes_left": None}
    assert _missed(raw) == ["containers_left None > 0", "networks_left None > 0", "volumes_left None > 0"]
    raw = _healthy()
    raw.latencies_ms = {}
    assert _missed(raw) == ["api_latency_ms_p99 None > 250.0"]


class FakeEngine:
    """Stands in for DockerRuntime.labelled: what a stopped daemon left on the engine."""

    def __init__(self, found: dict[str, dict[str, list[str]]]) -> None:
        self.found = found
        self.asked: list[str] = []

    async def labelled(self, daemon_id: str) -> dict[str, list[str]]:
        self.asked.append(daemon_id)
        return self.found.get(daemon_id, {})


async def test_containers_left_are_counted_and_missed() -> None:
    engine = FakeEngine(
        {
            "bench-1": {"containers": ["sclate-local-run-a-agent-1", "sclate-local-run-b-agent-2"], "volumes": ["v1"]},
            "other": {"containers": ["not-ours"]},
        }
    )
    left = await count_leftovers(engine, "bench-1")
    assert engine.asked == ["bench-1"]
    assert left == {"containers_left": 2, "networks_left": 0, "volumes_left": 1}
    raw = _healthy()
    raw.leftovers = left
    out = soak_report(raw)
    assert out["containers_left"] == 2 and out["volumes_left"] == 1
    assert out["missed_targets"] == ["containers_left 2 > 0", "volumes_left 1 > 0"]
    assert await count_leftovers(engine, "bench-2") == {"containers_left": 0, "networks_left": 0, "volumes_left": 0}


def test_unexpected_endings_and_api_errors_are_failures() -> None:
    raw = _healthy()
    raw.outcomes.append(RunOutcome("sandboxed", "FAILED", ("SUCCEEDED",), "model unreachable"))
    raw.outcomes.append(RunOutcome("scripted", "STUCK_RUNNING", ("SUCCEEDED", "CANCELLED"), "no end after 120 s"))
    out = soak_report(raw)
    assert out["runs_failed"] == 2 and out["runs_completed"] == 102
    assert out["failures"][0].startswith("sandboxed ended FAILED (expected SUCCEEDED): model unreachable")
    assert out["missed_targets"] == ["runs_failed 2 > 0"]
    raw = _healthy()
    raw.api_errors = Counter(UNAVAILABLE=3)
    assert _missed(raw) == ["api_errors_total 3 > 0"]


def test_slow_api_calls_are_flagged() -> None:
    raw = _healthy()
    raw.latencies_ms = {"GetRun": [5.0] * 980 + [400.0] * 20}
    out = soak_report(raw)
    assert out["api_latency_ms_p99"] == 400.0
    assert out["missed_targets"] == ["api_latency_ms_p99 400.0 > 250.0"]


def test_a_database_that_keeps_history_is_flagged() -> None:
    raw = _healthy()
    raw.db_end_bytes = raw.db_start_bytes + 100 * 25_000  # every run's events and journal kept
    assert _missed(raw) == ["db_bytes_per_run 25000.0 > 7024"]
    raw = _healthy()
    raw.runs_expired = 0
    assert _missed(raw) == ["runs_expired 0 < 1: the retention never expired a run"]
    raw = _healthy()
    raw.overdue_history_runs = 4
    assert _missed(raw) == ["overdue_history_runs 4 > 0"]
    raw = _healthy()
    raw.expired_answers = Counter({"ok": 10, "answered as if kept": 2})
    assert _missed(raw) == ["expired_answers_other 2 > 0"]


def test_the_daemon_must_stop_cleanly() -> None:
    raw = _healthy()
    raw.daemon_exit_code = -9
    assert _missed(raw) == ["daemon_exit_code -9 != 0"]


def test_what_the_sweeps_freed_is_read_from_the_daemons_log() -> None:
    sweep = {"runs": 3, "events": 10, "journal": 5, "calls": 0, "bytes_freed": 40960}
    log = (
        "2026-12-07 13:38:42,220 INFO sclated.runs: retention: a finished run's history expires 10s after it ended\n"
        f"2026-12-07 13:38:54,762 INFO sclated.runs: retention sweep: {json.dumps(sweep)}\n"
        "2026-12-07 13:38:55,000 WARNING sclated.runs: something else\n"
        f"2026-12-07 13:38:57,844 INFO sclated.runs: retention sweep: {json.dumps({**sweep, 'bytes_freed': 8192})}\n"
    )
    assert freed_bytes_in_log(log) == 40960 + 8192
    assert freed_bytes_in_log("nothing here") == 0


def test_errors_in_the_daemons_log_are_counted_and_missed() -> None:
    log = (
        "2026-12-07 13:38:42,220 INFO sclated: serving\n"
        "2026-12-07 13:38:43,000 ERROR sclated.runs: run local/x failed\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "ValueError: boom\n"
        "2026-12-07 13:38:44,000 WARNING sclated.runs: run local/y ended with warnings\n"
        "2026-12-07 13:38:45,000 ERROR sclated: letting go of the store failed\n"
    )
    errors, warnings = log_problems(log)
    assert errors == ["sclated.runs: run local/x failed | ValueError: boom", "sclated: letting go of the store failed"]
    assert warnings == 1
    raw = _healthy()
    raw.daemon_log_errors = errors
    out = soak_report(raw)
    assert out["daemon_log_errors"] == 2 and out["daemon_log_error_lines"] == errors
    assert out["missed_targets"] == ["daemon_log_errors 2 > 0"]


def test_proc_sample_sees_a_descriptor_opened() -> None:
    before = proc_sample(os.getpid())
    assert before.rss_mb > 0 and before.threads >= 1 and before.fds == len(os.listdir(f"/proc/{os.getpid()}/fd"))
    r, w = os.pipe()
    try:
        assert proc_sample(os.getpid()).fds == before.fds + 2
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.e2e
def test_soak_bench_finishes_clean(bench_tmp: Path) -> None:
    """A short scripted-only soak through the real CLI: its figures, and nothing left behind."""
    run = run_bench(
        "soak",
        *("--minutes", "0.2", "--warmup-s", "5", "--sandboxed-lanes", "0", "--retention", "2s", "--seed", "3"),
        tmpdir=bench_tmp,
        timeout_s=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.json()
    assert {
        "runs_completed",
        "api_latency_ms_p99",
        "daemon_rss_mb_start",
        "daemon_rss_mb_end",
        "fds_start",
        "fds_end",
        "containers_left",
        "db_size_mb",
        "seed",
        "targets",
        "meets_targets",
    } <= set(out)
    assert out["seed"] == 3 and out["sandboxed"] == "off: asked" and out["daemon_exit_code"] == 0
    completed, expired = out["runs_completed"], out["runs_expired"]
    assert isinstance(completed, int) and completed > 0
    assert isinstance(expired, int) and expired > 0


@pytest.mark.e2e
@pytest.mark.docker
def test_soak_bench_interrupted_removes_its_daemon_and_sandboxes(bench_tmp: Path) -> None:
    run = run_bench(
        "soak",
        *("--minutes", "5", "--warmup-s", "60", "--lanes", "2", "--sandboxed-lanes", "1"),
        tmpdir=bench_tmp,
        interrupt=signal.SIGINT,
        when=has_container,
        after_s=1.0,
        timeout_s=600,
    )
    interrupted_ok(run, signal.SIGINT)
    assert run.containers_seen >= 1
