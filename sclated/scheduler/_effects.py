"""Effects: typed values a fire hands to whoever executes them.

The scheduler does no I/O. It applies only :class:`MutateWorld` to its own
state (a pure change, so replay reproduces it); every other effect goes to the
run's executors. Adapters may define their own effects by subclassing
:class:`Effect` with a new ``kind``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

__all__ = [
    "AgentControl",
    "DeliverPrompt",
    "Effect",
    "ExecInSandbox",
    "Grade",
    "MutateWorld",
    "Notify",
    "SaveSnapshot",
    "StopRun",
    "Wake",
    "WorldEvent",
]


@dataclass(frozen=True, slots=True)
class Effect:
    kind: ClassVar[str] = "effect"
    control: ClassVar[bool] = False
    """Control effects (stop, snapshot) put their event first at a tie."""


@dataclass(frozen=True, slots=True)
class DeliverPrompt(Effect):
    """A user turn for the agent: a task, a question, a follow-up."""

    kind: ClassVar[str] = "deliver_prompt"
    text: str
    session: str | None = None
    round_id: str | None = None


@dataclass(frozen=True, slots=True)
class Notify(Effect):
    """Something the agent is told without being asked to act (an email arrives)."""

    kind: ClassVar[str] = "notify"
    text: str
    channel: str = "notification"


@dataclass(frozen=True, slots=True)
class MutateWorld(Effect):
    kind: ClassVar[str] = "mutate_world"
    changes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WorldEvent(Effect):
    """One of a benchmark's own world events (a Gaia2 email arriving, an oracle action),
    executed by the scenario's world at the fire's time. The run awaits it before
    anything else fires, so the world changes in exactly the journal's order."""

    kind: ClassVar[str] = "world_event"
    event_id: str


@dataclass(frozen=True, slots=True)
class AgentControl(Effect):
    """Start, stop, save or restore the agent (or its memory system)."""

    kind: ClassVar[str] = "agent_control"
    action: Literal["start", "stop", "save", "restore", "consolidate"]
    target: Literal["agent", "memory"] = "agent"
    label: str | None = None


@dataclass(frozen=True, slots=True)
class Grade(Effect):
    """Ask the benchmark adapter to grade a check; the outcome comes back as an input."""

    kind: ClassVar[str] = "grade"
    check_id: str
    spec: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExecInSandbox(Effect):
    """Run a command inside the agent's sandbox (a cron job, a world script)."""

    kind: ClassVar[str] = "exec_in_sandbox"
    command: str
    holder: str = "cron"
    timeout_s: float = 600.0


@dataclass(frozen=True, slots=True)
class Wake(Effect):
    """Resume a waiter registered with ``sleep_until``."""

    kind: ClassVar[str] = "wake"
    waiter: str


@dataclass(frozen=True, slots=True)
class SaveSnapshot(Effect):
    kind: ClassVar[str] = "save_snapshot"
    control: ClassVar[bool] = True
    label: str = ""


@dataclass(frozen=True, slots=True)
class StopRun(Effect):
    kind: ClassVar[str] = "stop_run"
    control: ClassVar[bool] = True
    reason: str = "scenario complete"
