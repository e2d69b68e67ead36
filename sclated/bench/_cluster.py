"""`sclated bench cluster`: the same runs on the local executor and on a Ray cluster.

A local Ray cluster of ``--nodes`` nodes (each its own process group declaring two
``sandbox`` slots; the head declares none) is started on this machine. Then:

* local: a fresh daemon with the local executor runs ``--runs`` scripted runs (the
  synthetic benchmark, two days of three events, ``--turn-ms`` per turn with a
  seeded jitter), all created at once and each followed with WatchRun to its end:
  ``local_wall_s`` and the mean time from CreateRun to the end of a run;
* cluster: a fresh daemon with ``--executor ray`` runs the same runs over the
  cluster while a separate probe process times GetRun and ListRuns
  (``api_latency_ms_p99``): ``cluster_wall_s``, ``runs_per_node``;
* node kill: ``2 x nodes`` slower runs; once the first has had two turns, the node
  it runs on is killed (SIGKILL to its process group). Every run must still
  succeed, those on the dead node resumed elsewhere from their journal.
  ``resume_after_node_kill_s`` is the time from the kill to the state event that
  says a run moved; ``records_lost`` counts the events a watcher was given before
  the kill that are missing or changed in the run's history afterwards.

``per_run_overhead_s`` is one run alone on the cluster less the same run alone on
the local executor (placing an actor, the worker's start in a fresh process,
records pulled over the wire); ``*_run_s_mean`` are the batch's means, in which
the cluster's runs also wait for a free ``sandbox`` slot. ``meets_targets``: every
run succeeded, nothing lost, API p99 <= 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench._cli import end_group, spawn
from sclated.bench._daemon import start_daemon_process

__all__ = ["API_P99_MS", "ClusterRaw", "bench_cluster", "cluster_report"]

API_P99_MS = 50.0


@dataclass(slots=True)
class ClusterRaw:
    """What one invocation measured, before it is summarised (see cluster_report)."""

    nodes: int
    runs: int
    seed: int
    local_wall_s: float = 0.0
    cluster_wall_s: float = 0.0
    local_run_s: list[float] = field(default_factory=list)
    cluster_run_s: list[float] = field(default_factory=list)
    local_succeeded: int = 0
    cluster_succeeded: int = 0
    placed: list[str] = field(default_factory=list)
    """Each cluster run's node (Run.node)."""
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    kill_runs: int = 0
    kill_succeeded: int = 0
    moved: int = 0
    resume_s: list[float] = field(default_factory=list)
    records_lost: int = 0
    records_checked: int = 0
    local_single_s: float = 0.0
    cluster_single_s: float = 0.0
    """One run alone, from CreateRun to its end, on each executor: the per-run overhead."""
    failures: list[str] = field(default_factory=list)
    """How runs that did not succeed ended (state and reason)."""


def _p99(values: list[float]) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def cluster_report(raw: ClusterRaw) -> dict[str, Any]:
    """The figures of one invocation and whether they meet the targets."""
    api = [v for k in ("GetRun", "ListRuns") for v in raw.latencies_ms.get(k, [])]
    per_node = Counter(node.split("@")[0] for node in raw.placed)
    local_mean = statistics.fmean(raw.local_run_s) if raw.local_run_s else 0.0
    cluster_mean = statistics.fmean(raw.cluster_run_s) if raw.cluster_run_s else 0.0
    runs_succeeded = raw.cluster_succeeded + raw.kill_succeeded
    runs = raw.runs + raw.kill_runs
    api_p99 = _p99(api)
    missed: list[str] = []
    if runs_succeeded != runs:
        missed.append(f"runs_succeeded {runs_succeeded} != runs {runs}")
    if raw.local_succeeded != raw.runs:
        missed.append(f"local runs succeeded {raw.local_succeeded} != {raw.runs}")
    if raw.kill_runs and not raw.moved:
        missed.append("runs_moved 0: the node killed had no run to move (nothing was tested)")
    if raw.records_lost:
        missed.append(f"records_lost {raw.records_lost}")
    if api_p99 > API_P99_MS:
        missed.append(f"api_latency_ms_p99 {api_p99:.1f} > {API_P99_MS:.0f}")
    return {
        "nodes": raw.nodes,
        "runs": runs,
        "runs_succeeded": runs_succeeded,
        "runs_per_node": sorted(per_node.values(), reverse=True),
        "api_latency_ms_p99": round(api_p99, 2),
        "api_calls": len(api),
        "resume_after_node_kill_s": round(max(raw.resume_s), 2) if raw.resume_s else None,
        "runs_moved": raw.moved,
        "records_lost": raw.records_lost,
        "records_checked": raw.records_checked,
        "local_runs": raw.runs,
        "local_runs_succeeded": raw.local_succeeded,
        "local_wall_s": round(raw.local_wall_s, 2),
        "cluster_wall_s": round(raw.cluster_wall_s, 2),
        "local_run_s_mean": round(local_mean, 3),
        "cluster_run_s_mean": round(cluster_mean, 3),
        "local_single_run_s": round(raw.local_single_s, 3),
        "cluster_single_run_s": round(raw.cluster_single_s, 3),
        "per_run_overhead_s": round(raw.cluster_single_s - raw.local_single_s, 3),
        "failures": raw.failures[:20],
        "seed": raw.seed,
        "targets": {"runs_succeeded": "== runs", "records_lost": 0, "api_latency_ms_p99": API_P99_MS},
        "missed_targets": missed,
        "meets_targets": not missed,
    }


def _request(rng: random.Random, turn_ms: int, days: int = 2, events: int = 3) -> pb.CreateRunRequest:
    run = pb.Run(benchmark=pb.BenchmarkSpec(name="synthetic"), agent=pb.AgentSpec(harness="scripted"))
    run.benchmark.options.update({"days": days, "events_per_day": events})
    run.agent.options.update({"turn_ms": max(1, int(turn_ms * rng.uniform(0.5, 1.5)))})
    return pb.CreateRunRequest(run=run)


def _ended(name: str, last: pb.RunEvent | None) -> str:
    if last is None or last.WhichOneof("kind") != "state":
        return f"{name}: its stream ended without a final state"
    return f"{name}: {pb.State.Name(last.state.state)} {last.state.reason}"


async def _one(stub: pb_grpc.SclateStub, req: pb.CreateRunRequest, failures: list[str]) -> tuple[float, bool]:
    """Create a run and follow it to its end: (its s, whether it succeeded)."""
    start = time.monotonic()
    run = await stub.CreateRun(req)
    last: pb.RunEvent | None = None
    async for ev in stub.WatchRun(pb.WatchRunRequest(name=run.name)):
        last = ev
    ok = last is not None and last.state.state == pb.SUCCEEDED
    if not ok:
        failures.append(_ended(run.name, last))
    return time.monotonic() - start, ok


async def _batch(
    stub: pb_grpc.SclateStub, requests: list[pb.CreateRunRequest], failures: list[str]
) -> tuple[float, list[float], int]:
    """Create every run at once, follow each to its end: (wall s, each run's s, how many succeeded)."""
    t0 = time.monotonic()

    async def one(req: pb.CreateRunRequest) -> tuple[float, bool]:
        return await _one(stub, req, failures)

    done = await asyncio.gather(*(one(r) for r in requests))
    return time.monotonic() - t0, [d[0] for d in done], sum(1 for d in done if d[1])


async def _stop_daemon(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 60)
    except TimeoutError:
        await end_group(proc, sig=signal.SIGKILL)


async def _node_kill(stub: pb_grpc.SclateStub, cluster: Any, raw: ClusterRaw, rng: random.Random) -> None:
    """Slower runs; the node of the first is killed after its second turn (see the module doc)."""
    requests = [_request(rng, 300, days=3, events=3) for _ in range(2 * raw.nodes)]
    created = [await stub.CreateRun(r) for r in requests]
    raw.kill_runs = len(created)
    seen: dict[str, list[pb.RunEvent]] = {r.name: [] for r in created}
    killed_at: list[float] = []
    moved_at: dict[str, float] = {}

    async def follow(name: str) -> bool:
        last: pb.RunEvent | None = None
        async for ev in stub.WatchRun(pb.WatchRunRequest(name=name)):
            if not killed_at:
                seen[name].append(ev)
            elif ev.WhichOneof("kind") == "state" and "was lost" in ev.state.reason and name not in moved_at:
                moved_at[name] = time.monotonic()
            last = ev
        if last is None or last.state.state != pb.SUCCEEDED:
            raw.failures.append(_ended(name, last))
            return False
        return True

    followers = [asyncio.get_running_loop().create_task(follow(r.name)) for r in created]
    first = created[0].name
    while sum(1 for e in seen[first] if e.WhichOneof("kind") == "turn") < 2:
        if followers[0].done():
            break
        await asyncio.sleep(0.05)
    node = (await stub.GetRun(pb.GetRunRequest(name=first))).node
    victim = next(m for m in cluster.members if node.startswith(m.node_id[:16]))
    # Noted before the kill: the daemon may see the node gone before kill() returns.
    killed_at.append(time.monotonic())
    await asyncio.to_thread(cluster.kill, victim)
    results = await asyncio.gather(*followers)
    raw.kill_succeeded = sum(1 for ok in results if ok)
    raw.moved = len(moved_at)
    raw.resume_s = [t - killed_at[0] for t in moved_at.values()]
    for name, acknowledged in seen.items():
        history = {e.seq: e.SerializeToString() async for e in stub.WatchRun(pb.WatchRunRequest(name=name))}
        for ev in acknowledged:
            raw.records_checked += 1
            if history.get(ev.seq) != ev.SerializeToString():
                raw.records_lost += 1


async def bench_cluster(args: argparse.Namespace) -> dict[str, Any]:
    from sclated.cluster import LocalCluster

    nodes = args.nodes
    if nodes < 2:
        raise SystemExit("sclated bench cluster: --nodes must be at least 2 (a node is killed and its runs move)")
    runs = args.runs or (12 if args.quick else 24)
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    turn_ms = min(args.turn_ms, 100)
    raw = ClusterRaw(nodes=nodes, runs=runs, seed=seed)
    cluster = LocalCluster(nodes=nodes, sandbox_slots=2)
    with tempfile.TemporaryDirectory(prefix="sclate-bench-cluster-") as tmp:
        await cluster.start()
        try:
            rng = random.Random(seed)
            requests = [_request(rng, turn_ms) for _ in range(runs)]
            proc, ready = await start_daemon_process(Path(tmp) / "local", "--no-reports")
            try:
                async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
                    stub = pb_grpc.SclateStub(ch)
                    raw.local_single_s = (await _one(stub, requests[0], raw.failures))[0]
                    raw.local_wall_s, raw.local_run_s, raw.local_succeeded = await _batch(stub, requests, raw.failures)
            finally:
                await _stop_daemon(proc)

            proc, ready = await start_daemon_process(
                Path(tmp) / "cluster", "--executor", "ray", "--ray-address", cluster.address, timeout_s=120
            )
            try:
                async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
                    stub = pb_grpc.SclateStub(ch)
                    stop_file, probe_out = Path(tmp) / "probe.stop", Path(tmp) / "probe.json"
                    probe = await spawn(
                        sys.executable, "-m", "sclated.bench._probe", ready["tcp"], str(stop_file), str(probe_out),
                        "reads",
                    )  # fmt: skip
                    try:
                        raw.cluster_single_s = (await _one(stub, requests[0], raw.failures))[0]
                        raw.cluster_wall_s, raw.cluster_run_s, raw.cluster_succeeded = await _batch(
                            stub, requests, raw.failures
                        )
                    finally:
                        stop_file.touch()
                        await probe.wait()
                    raw.latencies_ms = json.loads(probe_out.read_text())
                    listed = await stub.ListRuns(pb.ListRunsRequest(page_size=1000))
                    raw.placed = [r.node for r in listed.runs[1:] if r.node]  # the batch's, not the single run's
                    await _node_kill(stub, cluster, raw, rng)
            finally:
                await _stop_daemon(proc)
        finally:
            await cluster.stop()
    return cluster_report(raw)
