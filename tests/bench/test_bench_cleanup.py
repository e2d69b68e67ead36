"""Every benchmark ends every process, container and temporary directory it
started: when it finishes, and when SIGINT or SIGTERM interrupts it midway.

Each benchmark runs as `sclated bench NAME --json` in a subprocess, in its
quickest mode; see leftovers.py for what is checked afterwards.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .leftovers import Proc, has_container, interrupted_ok, run_bench, running


def _after(seconds: float) -> Callable[[dict[Proc, str], int], bool]:
    t0 = time.monotonic()

    def check(procs: dict[Proc, str], pid: int) -> bool:
        return time.monotonic() - t0 > seconds

    return check


def test_scheduler_bench_finishes_clean(bench_tmp: Path) -> None:
    run = run_bench("scheduler", "--quick", tmpdir=bench_tmp, timeout_s=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.json()["in_order"] is True


def test_scheduler_bench_stops_on_sigterm(bench_tmp: Path) -> None:
    # The full size runs for ~20 s: well past the 2 s mark.
    run = run_bench("scheduler", tmpdir=bench_tmp, interrupt=signal.SIGTERM, when=_after(2.0), timeout_s=60)
    interrupted_ok(run, signal.SIGTERM)


@pytest.mark.e2e
def test_daemon_bench_ends_its_daemon_and_probe(bench_tmp: Path) -> None:
    run = run_bench("daemon", "--quick", tmpdir=bench_tmp, timeout_s=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.json()
    assert out["concurrent_runs"] == 20 and out["runs_succeeded"] == 20
    assert out["daemon_exit_code"] == 0
    cmds = " ".join(run.seen.values())
    assert "sclated" in cmds and "sclated.bench._probe" in cmds


@pytest.mark.e2e
def test_daemon_bench_interrupted_ends_its_daemon_and_probe(bench_tmp: Path) -> None:
    run = run_bench(
        "daemon",
        "--runs",
        "200",
        tmpdir=bench_tmp,
        interrupt=signal.SIGINT,
        when=running("sclated.bench._probe"),
        after_s=0.5,
        timeout_s=300,
    )
    interrupted_ok(run, signal.SIGINT)


@pytest.mark.docker
def test_sandbox_bench_removes_its_containers(bench_tmp: Path) -> None:
    run = run_bench("sandbox", "--quick", "--rounds", "2", tmpdir=bench_tmp, timeout_s=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.json()
    assert out["rounds"] == 2 and out["quick"] is True
    for key in ("create_start_probe_ms_p50", "raw_docker_run_ms_p50", "ratio_with_probe", "time_probe_ms_p50"):
        value = out[key]
        assert isinstance(value, float) and value > 0, key


@pytest.mark.docker
def test_sandbox_bench_interrupted_removes_its_containers(bench_tmp: Path) -> None:
    run = run_bench(
        "sandbox",
        "--quick",
        tmpdir=bench_tmp,
        interrupt=signal.SIGTERM,
        when=has_container,
        after_s=0.3,
        timeout_s=600,
    )
    interrupted_ok(run, signal.SIGTERM)
    assert run.containers_seen >= 1  # it was interrupted with a container up


@pytest.mark.docker
def test_proxy_bench_ends_its_mitmdumps_and_sandbox(bench_tmp: Path) -> None:
    run = run_bench("proxy", "--quick", "--no-model", tmpdir=bench_tmp, timeout_s=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.json()
    assert sum("mitmdump" in cmd for cmd in run.seen.values()) >= 3  # addon, bare, bare streaming
    # The in-sandbox figures, beside the host's, with every call recorded there too.
    for key in (
        "addon_ms_p50",
        "bare_ms_p50",
        "sandbox_direct_ms_p50",
        "sandbox_proxied_ms_p50",
        "sandbox_addon_ms_p50",
        "sandbox_bare_ms_p50",
        "sandbox_sse_transit_added_ms_per_chunk_p50",
        "sandbox_sse_request_added_ms_p50",
    ):
        assert isinstance(out[key], float), key
    assert out["sandbox_calls_sent"] == out["sandbox_calls_recorded"] == out["sandbox_calls_complete"]
    assert out["sandbox_leases_left"] == 0 and out["sandbox_control_errors"] == 0
    assert out["sandbox_sim_time"] is True  # the addon inside stamps calls with simulated time
    rss = out["sandbox_proxy_rss_mb"]
    assert isinstance(rss, float) and 10 < rss < 2000


@pytest.mark.docker
def test_proxy_bench_interrupted_on_the_host_ends_its_mitmdumps(bench_tmp: Path) -> None:
    run = run_bench(
        "proxy",
        "--quick",
        "--no-model",
        tmpdir=bench_tmp,
        interrupt=signal.SIGINT,
        when=running("mitmdump"),
        after_s=0.5,
        timeout_s=600,
    )
    interrupted_ok(run, signal.SIGINT)


@pytest.mark.docker
def test_proxy_bench_interrupted_in_the_sandbox_removes_it(bench_tmp: Path) -> None:
    run = run_bench(
        "proxy",
        "--quick",
        "--no-model",
        tmpdir=bench_tmp,
        interrupt=signal.SIGTERM,
        when=has_container,
        after_s=1.0,
        timeout_s=600,
    )
    interrupted_ok(run, signal.SIGTERM)
    assert run.containers_seen >= 1


@pytest.mark.docker
def test_harness_bench_interrupted_ends_its_daemon_and_sandbox(bench_tmp: Path) -> None:
    run = run_bench(
        "harness",
        "--harness",
        "reference",
        tmpdir=bench_tmp,
        interrupt=signal.SIGTERM,
        when=has_container,
        after_s=1.0,
        timeout_s=600,
    )
    interrupted_ok(run, signal.SIGTERM)
    assert run.containers_seen >= 1 and "sclated" in " ".join(run.seen.values())
