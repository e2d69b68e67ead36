"""The two adapter interfaces: benchmarks and agents.

A benchmark adapter turns upstream task data (unchanged) into event sources on
simulated time and grades what the agent did. An agent adapter drives one
harness: sessions, message delivery, turn-end detection, state save/restore,
and the harness's own routines (crons, consolidation) as event sources.
Benchmarks and agents never call each other; the run wires both to one
scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sclated.scheduler import DeliverPrompt, EventSource, Grade

__all__ = [
    "AgentAdapter",
    "BenchmarkAdapter",
    "BenchmarkInfo",
    "GradeContext",
    "JudgeReply",
    "RoundInfo",
    "Scenario",
    "ScenarioConfig",
    "TurnResult",
    "Verdict",
]


@dataclass(frozen=True, slots=True)
class BenchmarkInfo:
    name: str
    description: str
    data_format: str
    """Which upstream layout ``data_dir`` must have."""
    builtin_scenarios: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ScenarioConfig:
    data_dir: Path | None = None
    """Upstream-layout data; None means the adapter's own built-in scenario."""
    scenario: str | None = None
    """A built-in scenario name, when ``data_dir`` is None."""
    subset: tuple[str, ...] = ()
    """Upstream ids to keep (days, question ids); empty keeps all."""
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RoundInfo:
    """One gradable unit (a MetaClaw round, a LongMemEval question)."""

    round_id: str
    day: str
    kind: str
    gradable: bool = True
    why_ungradable: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    round_id: str
    score: float | None
    """None when ungradable; otherwise in [0, 1]."""
    graded: bool
    reason: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What one delivered message produced, once the harness's turn ended."""

    reply: str
    started_ns: int
    ended_ns: int
    received_wall_ns: int
    """Monotonic wall time at which the harness received the message (delivery delay);
    the host's and a container's monotonic clocks are the same kernel clock."""
    details: Mapping[str, Any] = field(default_factory=dict)
    received_sim_ns: int | None = None
    """The simulated time the harness itself read from its own clock when the message
    arrived (inside a sandbox: libfaketime's). None for an agent without a clock of its
    own; then the delivery cannot be checked for order and earliness."""
    received_seq: int | None = None
    """The harness's own count of messages received (per harness process)."""


@dataclass(frozen=True, slots=True)
class JudgeReply:
    """What the judge model said, and who the judge was (recorded with each verdict)."""

    text: str
    endpoint: str
    """The judge's base URL, or "embedded" for the daemon's embedded model."""
    model: str
    embedded: bool
    """True when the daemon's small embedded model judged: such scores are not
    comparable with published ones."""

    def details(self) -> dict[str, Any]:
        return {"judge_endpoint": self.endpoint, "judge_model": self.model, "judge_embedded": self.embedded}


class GradeContext(Protocol):
    """What grading may use: the agent's workspace and replies, a judge model."""

    async def exec_in_workspace(self, command: str, *, timeout_s: float = 120.0) -> tuple[int, str]: ...

    def reply_for(self, round_id: str) -> str | None: ...

    async def judge(self, prompt: str) -> JudgeReply:
        """Ask the run's judge model (see sclated.runs._judge; the embedded one by default)."""
        ...


class Scenario(Protocol):
    """A loaded benchmark scenario, ready to be put on a scheduler."""

    @property
    def name(self) -> str: ...

    @property
    def start_ns(self) -> int: ...

    @property
    def rounds(self) -> Sequence[RoundInfo]: ...

    def sources(self) -> Sequence[EventSource]: ...

    def workspace_seed(self) -> Path | None:
        """A directory copied into the agent's workspace before the first session."""
        ...

    async def grade(self, effect: Grade, ctx: GradeContext) -> Verdict: ...


class BenchmarkAdapter(Protocol):
    @property
    def info(self) -> BenchmarkInfo: ...

    def load(self, config: ScenarioConfig) -> Scenario: ...


class AgentAdapter(Protocol):
    """Drives one harness instance (in a sandbox, or in-process for tests)."""

    @property
    def name(self) -> str: ...

    async def start_session(self, session: str) -> None: ...

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        """Deliver a message and return when the harness's turn has ended."""
        ...

    async def stop_session(self) -> None: ...

    async def save_state(self, dest: Path) -> None: ...

    async def restore_state(self, src: Path) -> None: ...

    def routines(self) -> Sequence[EventSource]:
        """The harness's own crons and consolidation jobs, as event sources."""
        ...
