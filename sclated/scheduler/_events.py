"""Event specifications and their triggers."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sclated.scheduler._effects import Effect

if TYPE_CHECKING:
    from sclated.scheduler._snapshot import Snapshot

__all__ = ["After", "At", "EventSource", "EventSpec", "Priority", "Trigger", "When"]


class Priority(enum.IntEnum):
    """The second key of the total order; lower fires first at a tie."""

    CONTROL = 0
    HIGH = 10
    NORMAL = 20
    LOW = 30


@dataclass(frozen=True, slots=True)
class At:
    """Fire at a simulated time (ns since the epoch)."""

    time_ns: int


@dataclass(frozen=True, slots=True)
class When:
    """Fire at the first snapshot where ``predicate`` holds.

    Re-checked each time the snapshot version changes (never by polling in a
    loop), so the predicate should depend on snapshot *state*; a condition on
    time alone is an :class:`At`.
    """

    predicate: Callable[[Snapshot], bool]
    description: str = ""


@dataclass(frozen=True, slots=True)
class After:
    """Fire ``delay_ns`` after the last of ``deps`` has *fired*."""

    deps: tuple[str, ...]
    delay_ns: int = 0


Trigger = At | When | After


@dataclass(frozen=True, slots=True)
class EventSpec:
    id: str
    trigger: Trigger
    effects: tuple[Effect, ...] = ()
    priority: Priority | None = None
    """None: CONTROL if any effect is a control effect, else NORMAL."""
    data: Mapping[str, Any] = field(default_factory=dict)
    """Free-form attributes carried into the fire record (round ids, days)."""

    @property
    def effective_priority(self) -> Priority:
        if self.priority is not None:
            return self.priority
        if any(e.control for e in self.effects):
            return Priority.CONTROL
        return Priority.NORMAL


class EventSource(Protocol):
    """Anything that proposes events: a benchmark's progression, an agent's crons.

    ``poll`` is called when the source is added, after each of its own events
    fires, and after each snapshot version change. It returns only events it
    has not returned before. It must be a deterministic function of the
    snapshots it has seen, so that a journal replays to the same fires.
    """

    @property
    def name(self) -> str: ...

    def poll(self, snapshot: Snapshot) -> Iterable[EventSpec]: ...
