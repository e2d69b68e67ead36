"""Which benchmarks and agents a daemon offers."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from adapters import AgentAdapter, BenchmarkAdapter, TaskContainers
from sclated.errors import InvalidArgument

if TYPE_CHECKING:
    from sclated.sandbox import SandboxServices

__all__ = ["AgentEntry", "Registry", "RunTaskContainers", "TaskContainersFactory", "default_registry"]


class RunTaskContainers(TaskContainers, Protocol):
    """A run's containers of benchmark images, as the run holds them: closed when it ends."""

    async def close(self) -> None:
        """Remove every container still open."""
        ...


TaskContainersFactory = Callable[[str, str], RunTaskContainers]
"""A run's containers of benchmark images, from its tenant and run id (needs the engine)."""

AgentFactory = Callable[[Mapping[str, Any], str], AgentAdapter]
"""Makes a run's agent from its options and its memory system (a name ``memory_systems`` lists)."""


@dataclass(frozen=True, slots=True)
class AgentEntry:
    name: str
    description: str
    sandboxed: bool
    factory: AgentFactory
    memory_systems: tuple[str, ...] = ("native",)
    """The memory systems it runs with, its default first (``sclate runs create --memory``)."""
    version: str = ""
    wire_apis: tuple[str, ...] = ()
    """The model APIs it speaks (empty: it makes no model calls of its own)."""
    capabilities: tuple[str, ...] = ()
    """What it can do beyond sessions and messages (``adapters.Capability`` values)."""
    image: str = ""
    """The image its sandbox runs (empty: it runs inside the daemon)."""
    process_clock: str = ""
    """The clock the harness process reads: simulated or wall (empty: it runs inside the daemon)."""
    path_options: frozenset[str] = frozenset()
    """Its options that are host paths (confined to the tenant's data roots, see DataRoots)."""

    def make(self, options: Mapping[str, Any], memory: str = "") -> AgentAdapter:
        """A run's agent; ``memory`` empty means the default (the first of ``memory_systems``)."""
        if memory and memory not in self.memory_systems:
            raise InvalidArgument(
                f"agent {self.name!r} does not run with memory system {memory!r}; it offers: "
                f"{', '.join(self.memory_systems)}",
                field="run.agent.memory",
                reason="UNSUPPORTED_MEMORY",
            )
        return self.factory(options, memory or self.memory_systems[0])


@dataclass(slots=True)
class Registry:
    benchmarks: dict[str, BenchmarkAdapter] = field(default_factory=dict)
    agents: dict[str, AgentEntry] = field(default_factory=dict)
    task_containers: TaskContainersFactory | None = None
    """Containers of a benchmark's own images (SWE-bench's instance environments); None
    outside a daemon with a sandbox runtime."""

    def add_benchmark(self, adapter: BenchmarkAdapter) -> None:
        self.benchmarks[adapter.info.name] = adapter

    def add_agent(self, entry: AgentEntry) -> None:
        self.agents[entry.name] = entry

    def benchmark(self, name: str) -> BenchmarkAdapter:
        try:
            return self.benchmarks[name]
        except KeyError:
            known = ", ".join(sorted(self.benchmarks))
            raise InvalidArgument(
                f"unknown benchmark {name!r}; this daemon has: {known}",
                field="run.benchmark.name",
                reason="UNKNOWN_BENCHMARK",
            ) from None

    def builtin_data(self) -> tuple[Path, ...]:
        """The folders of the benchmarks' own scenarios (a data root of every tenant)."""
        return tuple(dict.fromkeys(p for b in self.benchmarks.values() for p in b.info.builtin_data))

    def agent(self, name: str) -> AgentEntry:
        try:
            return self.agents[name]
        except KeyError:
            known = ", ".join(sorted(self.agents))
            raise InvalidArgument(
                f"unknown agent harness {name!r}; this daemon has: {known}",
                field="run.agent.harness",
                reason="UNKNOWN_AGENT",
            ) from None


def default_registry(services: SandboxServices | None = None) -> Registry:
    """The built-in benchmarks and agents. Sandboxed agents need ``services`` (a daemon)."""
    from adapters.gaia2 import Gaia2Benchmark
    from adapters.harnesses import HARNESSES, register_harness_images
    from adapters.longmemeval import LongMemEvalBenchmark
    from adapters.metaclaw import MetaClawBenchmark
    from adapters.personamem import PersonaMemBenchmark
    from adapters.scripted import ScriptedAgent
    from adapters.swebench import SWEBenchmark, register_images
    from adapters.synthetic import SyntheticBenchmark
    from sclated import __version__
    from sclated.runs._sandboxed import SANDBOX_CAPABILITIES, sandboxed_factory

    register_harness_images()
    register_images()
    reg = Registry()
    if services is not None:
        from sclated.runs._task_containers import EngineTaskContainers

        reg.task_containers = functools.partial(EngineTaskContainers, services.runtime)
    reg.add_benchmark(SyntheticBenchmark())
    reg.add_benchmark(MetaClawBenchmark())
    reg.add_benchmark(LongMemEvalBenchmark())
    reg.add_benchmark(Gaia2Benchmark())
    reg.add_benchmark(SWEBenchmark("swebench"))
    reg.add_benchmark(SWEBenchmark("swegym"))
    reg.add_benchmark(PersonaMemBenchmark())
    for harness in HARNESSES:
        d = harness.declaration
        reg.add_agent(
            AgentEntry(
                name=d.name,
                description=d.description,
                sandboxed=True,
                factory=sandboxed_factory(harness.make, d, services),
                memory_systems=d.memory_systems,
                version=d.version,
                wire_apis=tuple(sorted(d.wire_apis)),
                capabilities=tuple(sorted(c.value for c in d.capabilities | SANDBOX_CAPABILITIES)),
                image=d.image,
                process_clock=d.process_clock,
                path_options=d.path_options,
            )
        )
    reg.add_agent(
        AgentEntry(
            name="scripted",
            description="answers every message after a fixed busy time, inside the daemon (tests, load)",
            sandboxed=False,
            factory=lambda options, memory: ScriptedAgent(options),
            memory_systems=("none",),
            version=__version__,
            capabilities=tuple(sorted(c.value for c in ScriptedAgent.CAPABILITIES)),
        )
    )
    return reg
