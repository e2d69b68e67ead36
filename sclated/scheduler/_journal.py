"""The journal: fire records and inputs, in the order they happened.

Together with the same sources, a journal replays to the same fires.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sclated.scheduler._effects import Effect

if TYPE_CHECKING:
    from sclated.scheduler._events import EventSpec

__all__ = ["FireRecord", "InputRecord", "JournalEntry"]


@dataclass(frozen=True, slots=True)
class FireRecord:
    seq: int
    """Position in the journal (fires and inputs share the sequence)."""
    event_id: str
    source: str
    due_ns: int
    fired_ns: int
    priority: int
    source_rank: int
    arrival: int
    snapshot_version: int
    """The snapshot version the event saw when it fired."""
    effects: tuple[Effect, ...]
    data: Mapping[str, Any] = field(default_factory=dict)

    def replay_key(self) -> tuple[int, str, str, int, int, int]:
        return (
            self.seq,
            self.event_id,
            self.source,
            self.due_ns,
            self.fired_ns,
            self.snapshot_version,
        )


@dataclass(frozen=True, slots=True)
class InputRecord:
    """A state change that came from outside the scheduler."""

    seq: int
    kind: Literal["action", "world", "grade", "register"]
    at_ns: int
    version: int
    """The snapshot version this input created."""
    payload: Any
    source: str = ""
    specs: tuple[EventSpec, ...] = ()


JournalEntry = FireRecord | InputRecord
