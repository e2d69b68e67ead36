"""Test doubles for runs tests: a sink that keeps nothing, and a registry around one agent."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from adapters import AgentAdapter
from adapters.synthetic import SyntheticBenchmark
from sclated.runs import AgentEntry, Registry, RunSpec


class NullSink:
    """Test double for the run manager's sink: events and journal entries are dropped."""

    def emit(self, kind: str, payload: dict[str, Any], sim_ns: int) -> None:
        pass

    def journal(self, entry: dict[str, Any]) -> None:
        pass

    def progress(self, sim_ns: int) -> None:
        pass


def synthetic_with(
    name: str, factory: Callable[[Mapping[str, Any]], AgentAdapter], *, days: int, events_per_day: int
) -> tuple[Registry, RunSpec]:
    """A registry with the synthetic benchmark and one agent, and a spec that runs them."""
    registry = Registry()
    registry.add_benchmark(SyntheticBenchmark())
    registry.add_agent(
        AgentEntry(name, "test double", sandboxed=False, factory=lambda options, memory: factory(options))
    )
    spec = RunSpec.from_dict(
        {
            "benchmark": {"name": "synthetic", "options": {"days": days, "events_per_day": events_per_day}},
            "agent": {"harness": name},
        }
    )
    return registry, spec
