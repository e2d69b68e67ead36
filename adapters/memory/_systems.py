"""The memory systems a harness can run with, declared once.

A memory system is a real program installed into a harness's image as one more
layer (image ``<harness image>-<system>``, recipe ``images/memory-<system>/``),
its files in the memory volume so snapshots and branches keep them, its model
and embedding calls sent to the capture proxy's memory listener so they are
counted as the memory role (component ``memory:<system>``, embeddings
``memory:embeddings``). How a harness attaches it is the harness's own business
(its plugin mechanism, an MCP server, a library call): see each harness's
``memory_systems`` and its docstring.

``native`` is the harness's own memory (files it keeps itself): no layer, no
server.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from adapters._base import ProxyEndpoints
from sclated.errors import InvalidArgument
from sclated.scheduler import EventSource

__all__ = [
    "HINDSIGHT",
    "MEM0",
    "MEMORY_SYSTEMS",
    "NATIVE",
    "MemoryServer",
    "MemorySystem",
    "memory_environment",
    "memory_routines",
    "memory_system",
]

NATIVE = "native"


@dataclass(frozen=True, slots=True)
class MemoryServer:
    """A memory system that runs as its own server in the sandbox, beside the harness:
    started before the harness (and again on a restored or adopted sandbox, on the data
    it left), stopped after it."""

    start: tuple[str, ...]
    """Starts it in the background and returns once it answers (non-zero: it did not)."""
    stop: tuple[str, ...]
    """Stops it cleanly (its database shut down, the files consistent)."""
    url: str
    """Where the harness reaches it, inside the sandbox."""
    consolidate: tuple[str, ...] = ()
    """Runs its background work now and returns when it is done (a scheduler event)."""
    consolidate_schedule: str = ""
    """When the run's scheduler runs ``consolidate`` (cron, simulated time), attributed
    to the memory role; empty: only when a benchmark asks."""
    start_timeout_s: float = 300.0
    user: str = ""
    """The image's user its start and stop run as (empty: root). Sandboxes drop every
    capability, so root could not switch to it, nor signal or read what it owns."""


@dataclass(frozen=True, slots=True)
class MemorySystem:
    name: str
    description: str
    package: str
    """The pinned distribution (what ``images/memory-<name>/requirements.txt`` installs)."""
    data_dir: str
    """Its files in the sandbox (under /memory: kept by snapshots and branches)."""
    image_folder: str
    python: str = ""
    """The interpreter that can import it (a library used in-process), empty for a server."""
    server: MemoryServer | None = None
    image_files: tuple[tuple[str, Path], ...] = ()
    """Files of this repository copied into its image layer: name in the build context ->
    the file on the host (its recipe's Dockerfile copies them into place)."""

    @property
    def component(self) -> str:
        return f"memory:{self.name}"


MEM0 = MemorySystem(
    name="mem0",
    description="Mem0 (mem0ai) as a library: LLM fact extraction on add, vector search on recall; "
    "embedded Qdrant on local disk and a SQLite history",
    package="mem0ai==2.2.1",
    data_dir="/memory/mem0",
    image_folder="memory-mem0",
    python="/opt/mem0/venv/bin/python",
    # sclate-mem0: Mem0 as Claude Code hooks and an MCP server (Mem0's own MCP server is hosted-only).
    image_files=(("mem0_tools.py", Path(__file__).resolve().parent / "mem0_tools.py"),),
)

HINDSIGHT = MemorySystem(
    name="hindsight",
    description="Hindsight (hindsight-api-slim) as a server in the sandbox: retain, recall, reflect and "
    "consolidation over PostgreSQL with pgvector (pg0), reranking by reciprocal rank fusion",
    package="hindsight-api-slim[embedded-db]==1.1.0",
    data_dir="/memory/hindsight",
    image_folder="memory-hindsight",
    server=MemoryServer(
        start=("sclate-hindsight", "start"),
        stop=("sclate-hindsight", "stop"),
        url="http://127.0.0.1:8888",
        consolidate=("sclate-hindsight", "consolidate"),
        # Nightly, as Hindsight's own auto-consolidation would between sessions, but at a
        # simulated time the scheduler knows (auto-consolidation is off: it would run at
        # wall times nobody scheduled).
        consolidate_schedule="30 3 * * *",
        user="hindsight",
    ),
)

MEMORY_SYSTEMS: Mapping[str, MemorySystem] = {m.name: m for m in (MEM0, HINDSIGHT)}


def memory_system(name: str, offered: tuple[str, ...], harness: str) -> MemorySystem | None:
    """The memory system a run names (None: the harness's own), refused unless the
    harness offers it."""
    name = name or NATIVE
    if name not in offered:
        raise InvalidArgument(
            f"harness {harness!r} does not run with memory system {name!r}; it offers: {', '.join(offered)}",
            field="run.agent.memory",
            reason="UNSUPPORTED_MEMORY",
        )
    return MEMORY_SYSTEMS.get(name)


def memory_environment(
    system: MemorySystem, endpoints: ProxyEndpoints, *, embedded_model: bool = False
) -> dict[str, str]:
    """Where a memory system's own model and embedding calls go: the memory role's
    listener for memory systems (component ``memory:<system>``).

    ``embedded_model``: the run's model is the daemon's small embedded one. Hindsight's
    fact extraction is beyond it (measured: every extraction call ran to its token cap
    and Hindsight dropped the output, storing nothing), so Hindsight then retains in its
    documented ``chunks`` mode (the text as it came, embedded, no extraction call); its
    consolidation still asks the model, for at most 256 tokens. A real model gets
    Hindsight's defaults."""
    env = {
        "SCLATE_MEMORY_SYSTEM": system.name,
        "SCLATE_MEMORY_SYSTEM_BASE_URL": endpoints.memory_system_url + endpoints.openai_prefix,
        "SCLATE_MEMORY_SYSTEM_API_KEY": endpoints.api_key,
        "SCLATE_MEMORY_SYSTEM_MODEL": endpoints.model,
        "SCLATE_MEMORY_SYSTEM_DIR": system.data_dir,
    }
    if system is HINDSIGHT and embedded_model:
        env["HINDSIGHT_API_RETAIN_EXTRACTION_MODE"] = "chunks"
        # It rambles to whatever cap it is given: 1,024 tokens took 60-110 s per call.
        env["HINDSIGHT_API_CONSOLIDATION_MAX_COMPLETION_TOKENS"] = "256"
    return env


def memory_routines(system: MemorySystem | None) -> list[EventSource]:
    """The memory system's own background work as scheduler events (its consolidation)."""
    if system is None or system.server is None:
        return []
    server = system.server
    if not server.consolidate or not server.consolidate_schedule:
        return []
    from adapters.reference_harness import CronLine, HarnessCronSource
    from sclated.runtime import next_fire

    line = CronLine(server.consolidate_schedule, shlex.join(server.consolidate), 1)
    return [HarnessCronSource([line], next_fire, name=f"{system.name}:consolidate", holder="memory", timeout_s=1800)]
