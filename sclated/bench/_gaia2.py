"""`sclated bench gaia2`: ARE's own event loop and sclate's scheduler, side by side.

The same generated Gaia2 scenario (ARE's ``Scenario`` with one small app: N
ENV events either independent, 1 s apart, or one chain, each 1 s after the
last), oracle mode, no model:

- ARE: its own queue-based oracle loop (``Environment.run``), in ARE's own
  environment; throughput is N over the loop's wall time, lateness how far ARE's
  clock (which runs on the wall clock between jumps) had moved past an event's
  time when it ran.
- sclate: a run of the ``gaia2`` benchmark on the scripted agent, HYBRID clock
  (simulated time flows while the world executes an event, jumps over the gaps):
  throughput is N over the run loop's wall time, lateness ``fired - due`` of
  every world event.
- parity: both executed the same events in the same order at the same simulated
  times (``adapters.gaia2._parity``), and the worlds agree on the counter.

Both run on this machine in one command, one case after the other.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from adapters import BenchmarkInfo, ScenarioConfig
from adapters.gaia2 import Gaia2Scenario, WorldProcess
from adapters.gaia2._parity import compare_orders
from sclated.runs import RunWorker
from sclated.runs._registry import AgentEntry, Registry
from sclated.runs._spec import RunSpec

__all__ = ["bench_gaia2"]

SIZES = (1_000, 10_000)
SHAPES = ("independent", "chain")


@dataclass(frozen=True, slots=True)
class _Generated:
    """The bench's own benchmark entry: one generated scenario."""

    shape: str
    n: int

    @property
    def info(self) -> BenchmarkInfo:
        return BenchmarkInfo("gaia2", "generated load shape", "none")

    def load(self, config: ScenarioConfig) -> Gaia2Scenario:
        return Gaia2Scenario(
            f"generated_{self.shape}_{self.n}", {"generated": {"shape": self.shape, "n": self.n}}, oracle=True
        )


class _FireSink:
    """Keeps each world event's lateness (fired - due) from the run's fire events."""

    def __init__(self) -> None:
        self.lateness_ns: list[int] = []

    def emit(self, kind: str, payload: dict[str, Any], sim_ns: int) -> None:
        if kind == "fire" and "world_event" in payload.get("effects", ()):
            self.lateness_ns.append(sim_ns - int(payload["due_ns"]))

    def journal(self, entry: dict[str, Any]) -> None:
        pass

    def progress(self, sim_ns: int) -> None:
        pass


async def _are(shape: str, n: int) -> dict[str, Any]:
    process = WorldProcess()
    await process.start()
    try:
        return await process.request("are_oracle", source={"generated": {"shape": shape, "n": n}})
    finally:
        await process.close()


async def _sclate(shape: str, n: int) -> tuple[dict[str, Any], list[dict[str, Any]], list[int]]:
    from adapters.scripted import ScriptedAgent

    registry = Registry()
    registry.add_benchmark(_Generated(shape, n))
    registry.add_agent(
        AgentEntry("scripted", "bench", sandboxed=False, factory=lambda options, memory: ScriptedAgent(options))
    )
    spec = RunSpec.from_dict({"benchmark": {"name": "gaia2"}, "agent": {"harness": "scripted"}})
    sink = _FireSink()
    worker = RunWorker("bench/gaia2", spec, registry, sink)
    outcome = await worker.run()
    if outcome.state != "SUCCEEDED":
        raise RuntimeError(f"sclate's run of {shape} x {n} ended {outcome.state}: {outcome.reason}")
    verdict = worker.verdicts.get("gaia2")
    executed = list(verdict.details.get("executed", ())) if verdict is not None else []
    return outcome.results["scheduler"], executed, sink.lateness_ns


async def _case(shape: str, n: int) -> dict[str, Any]:
    wall = time.perf_counter()
    are = await _are(shape, n)
    sched, executed, lateness_ns = await _sclate(shape, n)
    # "Same simulated times, to the second or better": the HYBRID clock flows for the
    # microseconds each fire takes, and a chain adds them up; max_time_diff_s says how far.
    parity = compare_orders(executed, are["order"], tick_s=1, time_tolerance_s=1.0)
    are_rate = n / are["run_s"] if are["run_s"] > 0 else 0.0
    sclate_rate = n / sched["wall_s"] if sched["wall_s"] > 0 else 0.0
    problems = []
    if len(executed) != n:
        problems.append(f"sclate executed {len(executed)} of {n} events")
    if len([e for e in are["order"] if e["event_type"] != "CONDITION"]) != n:
        problems.append(f"ARE executed {len(are['order'])} of {n} events")
    return {
        "shape": shape,
        "n": n,
        "are_events_per_s": round(are_rate, 1),
        "sclate_events_per_s": round(sclate_rate, 1),
        "speedup": round(sclate_rate / are_rate, 1) if are_rate else None,
        "are_run_s": round(are["run_s"], 3),
        "sclate_run_s": round(sched["wall_s"], 3),
        "are_lateness_s_max": round(float(are["lateness_s_max"]), 4),
        "sclate_lateness_ms_max": round(max(lateness_ns, default=0) / 1e6, 3),
        "sclate_in_order": sched["in_order"],
        "max_time_diff_s": round(parity.max_time_diff_s, 6),
        "parity": parity.equal and not problems,
        "parity_problems": [*problems, *parity.problems[:5]],
        "case_wall_s": round(time.perf_counter() - wall, 1),
    }


async def bench_gaia2(args: argparse.Namespace) -> dict[str, Any]:
    sizes = (100, 1_000) if args.quick else tuple(args.gaia2_n or SIZES)
    cases = [await _case(shape, n) for n in sizes for shape in SHAPES]
    headline = next((c for c in cases if c["shape"] == "independent" and c["n"] == max(sizes)), cases[-1])
    return {
        "sizes": list(sizes),
        "headline": f"independent x {headline['n']}",
        "are_events_per_s": headline["are_events_per_s"],
        "sclate_events_per_s": headline["sclate_events_per_s"],
        "speedup": headline["speedup"],
        "are_lateness_s_max": max(c["are_lateness_s_max"] for c in cases),
        "sclate_lateness_ms_max": max(c["sclate_lateness_ms_max"] for c in cases),
        "parity": all(c["parity"] for c in cases),
        "cases": cases,
    }
