"""Scheduler benchmark: ``await bench_scheduler()`` (or ``python -m sclated.bench._scheduler``).

Three measurements, one flat dict:

- throughput: one DISCRETE run loop, ten lazy sources, no-op effects; only
  ``loop.run()`` is timed.
- lateness: a HYBRID run with a lease held throughout, so simulated time flows
  at wall rate and every fire waits for its due time in real time; lateness is
  ``fired_ns - due_ns`` and is cross-checked against the wall clock seen by
  the observer.
- compression: a synthetic 40-day arc in HYBRID mode, an agent busy a fixed
  real time per prompt, crons and DAG events in between. The best a loop
  can do is simulated span / busy time (``compression_limit``).
"""

from __future__ import annotations

import asyncio
import gc
import random
import statistics
import sys
import time
from collections.abc import Iterable
from typing import Any

from sclated.clock import ClockConfig, ClockMode, Jump, LeaseChange, SimClock
from sclated.runs import RunLoop, RunSummary
from sclated.scheduler import (
    After,
    AgentControl,
    At,
    DeliverPrompt,
    Effect,
    EventSpec,
    ExecInSandbox,
    FireRecord,
    InputRecord,
    Notify,
    Scheduler,
    Snapshot,
    StopRun,
)

__all__ = ["bench_scheduler"]

_MS = 1_000_000
_S = 1_000 * _MS
_MIN = 60 * _S
_HOUR = 60 * _MIN
_DAY = 24 * _HOUR
_T0 = 1_767_571_200 * _S  # 2026-01-05 00:00 UTC: a fixed, realistic epoch


def _noop(record: FireRecord, effect: Effect) -> None:
    return None


class _LazyTimedSource:
    """Yields its next timed event only after the previous one fired, as a
    benchmark progression or a cron table would."""

    def __init__(self, name: str, count: int, first_ns: int, step_ns: int) -> None:
        self.name = name
        self._count = count
        self._first = first_ns
        self._step = step_ns
        self._next = 0
        self._effects: tuple[Effect, ...] = (Notify(name),)

    def poll(self, snapshot: Snapshot) -> Iterable[EventSpec]:
        i = self._next
        if i >= self._count:
            return ()
        # Polls also come on snapshot changes: hand out the next event only
        # once the previous one has fired.
        if i and snapshot.fired_at(f"{self.name}:{i - 1}") is None:
            return ()
        self._next = i + 1
        return (EventSpec(f"{self.name}:{i}", At(self._first + i * self._step), self._effects),)


class _ListSource:
    def __init__(self, name: str, specs: list[EventSpec]) -> None:
        self.name = name
        self._specs = specs

    def poll(self, snapshot: Snapshot) -> Iterable[EventSpec]:
        out, self._specs = self._specs, []
        return out


class _Observer:
    """Checks the total order as fires happen and keeps wall times for lateness."""

    def __init__(self) -> None:
        self.in_order = True
        self.fires: list[tuple[FireRecord, int]] = []
        self._last: FireRecord | None = None

    def on_fire(self, record: FireRecord, wall_ns: int) -> None:
        self.fires.append((record, wall_ns))
        if record.fired_ns < record.due_ns:
            self.in_order = False
        last = self._last
        if last is not None and record.fired_ns < last.fired_ns:
            self.in_order = False
        self._last = record

    def on_jump(self, jump: Jump) -> None:
        return None

    def on_lease(self, change: LeaseChange) -> None:
        return None

    def on_input(self, record: InputRecord) -> None:
        return None


def _fires_in_order(fires: list[FireRecord]) -> bool:
    last = -1
    for f in fires:
        if f.fired_ns < last or f.fired_ns < f.due_ns:
            return False
        last = f.fired_ns
    return True


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _throughput(total: int) -> dict[str, Any]:
    n_sources = 10
    per = total // n_sources
    # Offsets make the ten streams interleave with occasional ties.
    sources = [_LazyTimedSource(f"s{k}", per, _T0 + k * 3 * _MS, 10 * _MS) for k in range(n_sources)]
    sched = Scheduler(start_ns=_T0, sources=sources)
    clock = SimClock(ClockConfig(mode=ClockMode.DISCRETE, start_ns=_T0))
    loop = RunLoop(sched, clock, _noop)
    # Reported, not tuned: the journal keeps every fire alive, so the
    # collector's full passes are a real share of a long run's cost.
    gc_s = [0.0]
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        else:
            gc_s[0] += time.perf_counter() - gc_started[0]

    gc.callbacks.append(on_gc)
    try:
        t = time.perf_counter()
        summary = await loop.run()
        wall = time.perf_counter() - t
    finally:
        gc.callbacks.remove(on_gc)
    # DISCRETE: every fire lands exactly on its due time.
    exact = all(f.fired_ns == f.due_ns for f in sched.fires)
    return {
        "fires_per_second": summary.fires / wall if wall else 0.0,
        "throughput_events_fired": summary.fires,
        "throughput_events_scheduled": summary.scheduled,
        "throughput_wall_s": wall,
        "throughput_gc_s": gc_s[0],
        "throughput_exact_due": exact,
        "_in_order": summary.in_order and exact and _fires_in_order(sched.fires),
        "_complete": not summary.unfired and summary.fires == per * n_sources,
    }


async def _lateness(count: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    specs = []
    t = _T0 + 20 * _MS  # leave the loop time to start before the first due time
    for i in range(count):
        t += rng.randint(5, 20) * _MS
        specs.append(EventSpec(f"ev{i}", At(t), (Notify(f"ev{i}"),)))
    specs.append(EventSpec("end", At(t + 5 * _MS), (StopRun("measured"),)))
    sched = Scheduler(start_ns=_T0, sources=[_ListSource("timed", specs)])
    clock = SimClock(ClockConfig(mode=ClockMode.HYBRID, start_ns=_T0))
    obs = _Observer()
    loop = RunLoop(sched, clock, _noop, observer=obs)
    # Held for the whole measurement: the clock flows at wall rate, never jumps.
    lease = clock.leases.acquire("bench:busy", "bench")
    # With no jump, simulated time t is reached at wall time anchor + (t - start).
    anchor_wall = clock.start_wall_ns
    try:
        summary = await loop.run()
    finally:
        clock.leases.release(lease)
    sim_ms = [(f.fired_ns - f.due_ns) / _MS for f, _ in obs.fires]
    wall_ms = [(w - (anchor_wall + f.due_ns - _T0)) / _MS for f, w in obs.fires]
    return {
        "lateness_ms_p50": statistics.median(sim_ms) if sim_ms else 0.0,
        "lateness_ms_p99": _percentile(sim_ms, 0.99),
        "lateness_ms_max": max(sim_ms, default=0.0),
        "lateness_wall_ms_p50": statistics.median(wall_ms) if wall_ms else 0.0,
        "lateness_wall_ms_max": max(wall_ms, default=0.0),
        "lateness_events_fired": summary.fires,
        "lateness_events_scheduled": summary.scheduled,
        "lateness_wall_s": summary.wall_ns / 1e9,
        "lateness_jumps": summary.jumps,
        "_in_order": summary.in_order and obs.in_order,
        "_complete": not summary.unfired,
    }


def _arc_specs(days: int, prompts_per_day: int) -> tuple[list[EventSpec], list[EventSpec]]:
    """A benchmark's days (prompts, DAG follow-ups, a nightly grade) and the
    agent's own routines (hourly cron, nightly consolidation)."""
    bench: list[EventSpec] = []
    agent: list[EventSpec] = []
    spacing = (10 * _HOUR) // max(1, prompts_per_day)
    for d in range(days):
        day = _T0 + d * _DAY
        bench.append(EventSpec(f"d{d}.start", At(day + 9 * _HOUR), (AgentControl("start"),)))
        for k in range(prompts_per_day):
            pid = f"d{d}.p{k}"
            bench.append(EventSpec(pid, At(day + 9 * _HOUR + k * spacing), (DeliverPrompt(pid),)))
            bench.append(EventSpec(f"{pid}.review", After((pid,), 30 * _MIN), (Notify(pid),)))
        last = f"d{d}.p{prompts_per_day - 1}"
        bench.append(EventSpec(f"d{d}.stop", After((last,), 2 * _HOUR), (AgentControl("stop"),)))
        for h in range(24):
            agent.append(EventSpec(f"d{d}.cron{h}", At(day + h * _HOUR + 5 * _MIN), (ExecInSandbox("true"),)))
        agent.append(EventSpec(f"d{d}.consolidate", At(day + 23 * _HOUR), (AgentControl("consolidate", "memory"),)))
    bench.append(EventSpec("end", At(_T0 + days * _DAY), (StopRun("arc complete"),)))
    return bench, agent


async def _arc(days: int, prompts_per_day: int, turn_s: float) -> dict[str, Any]:
    bench, agent = _arc_specs(days, prompts_per_day)
    sched = Scheduler(start_ns=_T0, sources=[_ListSource("bench", bench), _ListSource("agent", agent)])
    clock = SimClock(ClockConfig(mode=ClockMode.HYBRID, start_ns=_T0))
    obs = _Observer()
    tasks: set[asyncio.Task[None]] = set()

    async def turn(holder: str) -> None:
        lease = clock.leases.acquire("agent-turn", holder)
        try:
            await asyncio.sleep(turn_s)
        finally:
            clock.leases.release(lease)

    def executor(record: FireRecord, effect: Effect) -> None:
        if isinstance(effect, DeliverPrompt):
            task = asyncio.get_running_loop().create_task(turn(record.event_id))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    loop = RunLoop(sched, clock, executor, observer=obs)
    summary: RunSummary = await loop.run()
    if tasks:
        await asyncio.gather(*tasks)
    limit = summary.compression_limit
    return {
        "compression_ratio": summary.compression_ratio,
        "compression_limit": limit,
        "compression_efficiency": summary.compression_ratio / limit if limit else 0.0,
        "jumps": summary.jumps,
        "arc_days": days,
        "arc_prompts": days * prompts_per_day,
        "arc_turn_ms": turn_s * 1000,
        "arc_events_fired": summary.fires,
        "arc_events_scheduled": summary.scheduled,
        "arc_sim_span_s": summary.sim_span_ns / 1e9,
        "arc_busy_s": summary.busy_ns / 1e9,
        "arc_wall_s": summary.wall_ns / 1e9,
        "_in_order": summary.in_order and obs.in_order,
        "_complete": summary.reason == "arc complete" and not summary.unfired,
    }


async def bench_scheduler(*, quick: bool = False) -> dict[str, object]:
    """Run the three measurements; ``quick`` shrinks them to a smoke test."""
    running = asyncio.get_running_loop()
    parts = [
        await _throughput(5_000 if quick else 200_000),
        await _lateness(20 if quick else 300, seed=7),
        await _arc(3 if quick else 40, 3 if quick else 9, 0.005 if quick else 0.025),
    ]
    out: dict[str, object] = {
        "quick": quick,
        "event_loop": type(running).__module__.split(".")[0],
        "python": sys.version.split()[0],
    }
    in_order = True
    complete = True
    fired = 0
    scheduled = 0
    for part in parts:
        in_order = in_order and bool(part.pop("_in_order"))
        complete = complete and bool(part.pop("_complete"))
        for key, value in part.items():
            if key.endswith("_events_fired"):
                fired += int(value)
            elif key.endswith("_events_scheduled"):
                scheduled += int(value)
        out.update(part)
    out["in_order"] = in_order
    out["all_fired"] = complete
    out["events_fired"] = fired
    out["events_scheduled"] = scheduled
    return out


def main() -> None:
    import json

    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        figures = runner.run(bench_scheduler(quick="--quick" in sys.argv))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
