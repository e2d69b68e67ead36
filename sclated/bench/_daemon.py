"""Daemon benchmark: a real sclated process, N concurrent synthetic runs, a
WatchRun stream on each, and the latency of API calls made meanwhile.

``api_latency_ms_*`` covers every unary call the benchmark makes (CreateRun,
GetRun, ListRuns) while the runs execute; creates are issued with bounded
concurrency, as a fleet of clients would, not as one burst of N.

The daemon and the probe client run in process groups of their own, ended as
a whole when the benchmark ends, fails or is interrupted; the state directory
is a TemporaryDirectory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench._cli import end_group, spawn

__all__ = ["bench_daemon", "data_root_args", "start_daemon_process"]


def data_root_args(*dirs: Path | None) -> tuple[str, ...]:
    """``--data-root DIR`` for each data directory a bench's runs name: the daemon
    reads no host path outside its data roots (the built-in scenarios are always in).
    A data file (SWE-bench rows) gives its folder."""
    roots = [d.resolve() for d in dirs if d is not None]
    return tuple(arg for r in roots for arg in ("--data-root", str(r if r.is_dir() else r.parent)))


async def start_daemon_process(
    state_dir: Path, *extra: str, timeout_s: float = 30.0
) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    """Start `sclated` on a free port and wait for its ready file.

    The daemon leads a process group of its own (its children, such as the
    embedded model, are in it); end it with :func:`~sclated.bench._cli.end_group`,
    or SIGTERM and wait. If it does not become ready, the group is ended here."""
    state_dir.mkdir(parents=True, exist_ok=True)
    ready = state_dir / "ready.json"
    ready.unlink(missing_ok=True)
    exe = Path(sys.executable).with_name("sclated")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "sclated"]
    log = open(state_dir / "sclated.log", "ab")  # noqa: SIM115 - handed to the child, closed below
    try:
        proc = await spawn(
            *cmd,
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            str(state_dir),
            "--ready-file",
            str(ready),
            *extra,
            stdout=log,
            stderr=log,
        )
    finally:
        log.close()
    try:
        deadline = time.monotonic() + timeout_s
        while not ready.exists():
            if proc.returncode is not None or time.monotonic() > deadline:
                tail = (state_dir / "sclated.log").read_text()[-2000:]
                raise RuntimeError(f"sclated did not become ready (exit {proc.returncode}):\n{tail}")
            await asyncio.sleep(0.05)
        return proc, json.loads(ready.read_text())
    except BaseException:
        await asyncio.shield(end_group(proc, grace_s=5))
        raise


def _rss_mb(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def bench_daemon(
    *,
    runs: int = 1000,
    days: int = 2,
    events_per_day: int = 3,
    turn_ms: int = 20,
    create_concurrency: int = 32,
) -> dict[str, Any]:
    latencies: list[float] = []

    async def timed(coro: Any) -> Any:
        t0 = time.perf_counter()
        out = await coro
        latencies.append((time.perf_counter() - t0) * 1000)
        return out

    with tempfile.TemporaryDirectory(prefix="sclate-bench-daemon-") as tmp:
        proc, ready = await start_daemon_process(
            Path(tmp),
            "--max-running",
            str(runs),
            "--tenant-max-running",
            str(runs),
            "--log-level",
            "warning",
            # The benchmark measures the API and the run loops, not plotting.
            "--no-reports",
            # Interrupted mid-benchmark, runs need not finish: shut down promptly.
            "--drain-grace-s",
            "2",
        )
        probe_proc: asyncio.subprocess.Process | None = None
        try:
            async with grpc.aio.insecure_channel(ready["tcp"]) as channel:
                stub = pb_grpc.SclateStub(channel)
                run = pb.Run(
                    benchmark=pb.BenchmarkSpec(name="synthetic"),
                    agent=pb.AgentSpec(harness="scripted"),
                )
                run.benchmark.options.update({"days": days, "events_per_day": events_per_day})
                run.agent.options.update({"turn_ms": turn_ms, "turn_jitter": 0.5})
                sem = asyncio.Semaphore(create_concurrency)
                events_seen = 0
                final_states: dict[str, int] = {}

                async def one(i: int) -> None:
                    nonlocal events_seen
                    async with sem:
                        created = await timed(stub.CreateRun(pb.CreateRunRequest(run=run, request_id=f"bench-{i}")))
                    last_state = pb.STATE_UNSPECIFIED
                    async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name)):
                        events_seen += 1
                        if ev.WhichOneof("kind") == "state":
                            last_state = ev.state.state
                    final_states[created.name] = last_state

                stop_probe = asyncio.Event()
                stop_file, probe_out = Path(tmp) / "probe.stop", Path(tmp) / "probe.json"
                probe_proc = await spawn(
                    sys.executable,
                    "-m",
                    "sclated.bench._probe",
                    ready["tcp"],
                    str(stop_file),
                    str(probe_out),
                )

                t0 = time.perf_counter()

                async def sample_rss() -> tuple[float, float]:
                    rss = (0.0, 0.0)
                    while not stop_probe.is_set():
                        rss = _rss_mb(proc.pid)
                        await asyncio.sleep(0.5)
                    return rss

                rss_task = asyncio.create_task(sample_rss())
                await asyncio.gather(*(one(i) for i in range(runs)))
                wall = time.perf_counter() - t0
                stop_probe.set()
                stop_file.touch()
                await probe_proc.wait()
                probe_lat: dict[str, list[float]] = json.loads(probe_out.read_text())
                await rss_task
                rss_now, rss_peak = _rss_mb(proc.pid)
                succeeded = sum(1 for s in final_states.values() if s == pb.SUCCEEDED)
        finally:
            # Shielded: an interrupt must not cut the daemon's shutdown short.
            if probe_proc is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.shield(end_group(probe_proc, grace_s=2))
            code = await asyncio.shield(end_group(proc, sig=signal.SIGTERM, grace_s=30))
    lat = sorted(x for xs in probe_lat.values() for x in xs)
    own = sorted(latencies)
    return {
        "concurrent_runs": runs,
        "runs_succeeded": succeeded,
        "events_streamed": events_seen,
        "api_calls": len(lat),
        "api_latency_from": "a separate client process polling while the runs execute",
        "api_latency_ms_p50": statistics.median(lat),
        "api_latency_ms_p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "api_latency_ms_max": lat[-1],
        "api_latency_by_method_ms_p50": {k: statistics.median(v) for k, v in probe_lat.items() if v},
        "api_latency_by_method_ms_max": {k: max(v) for k, v in probe_lat.items() if v},
        "create_latency_ms_p50_in_watch_client": statistics.median(own),
        "daemon_rss_mb": round(rss_now, 1),
        "daemon_rss_peak_mb": round(rss_peak, 1),
        "wall_s": round(wall, 2),
        "daemon_exit_code": code,
        "cpus": os.cpu_count(),
    }


async def reap_daemon_sandboxes(state_dir: Path) -> None:
    """Remove the sandboxes (and their control sockets) a daemon kept in ``state_dir``.

    A daemon stopped mid-run keeps its sandboxes for a resume; when the daemon
    was a throwaway (a bench, the demo), that resume never comes."""
    import shutil

    from sclated.runtime import DockerRuntime
    from sclated.sandbox import short_sockets_dir

    await asyncio.to_thread(shutil.rmtree, short_sockets_dir(state_dir), True)
    try:
        daemon_id = (await asyncio.to_thread((state_dir / "daemon-id").read_text)).strip()
    except OSError:
        return
    runtime = await DockerRuntime.connect(daemon_id)
    try:
        await runtime.reap(daemon_id, keep=set())
    finally:
        await runtime.close()
