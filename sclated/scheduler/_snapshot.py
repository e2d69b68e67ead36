"""Snapshots: what sources and conditions see."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["AgentAction", "Snapshot"]


@dataclass(frozen=True, slots=True)
class AgentAction:
    """Something the agent did that the benchmark may react to."""

    actor: str
    kind: str
    data: Mapping[str, Any]
    at_ns: int


class Snapshot:
    """A consistent view of a run's state at one version.

    ``world`` and ``grades`` are read-only views of dictionaries the scheduler
    replaces (never mutates) on change, so an old snapshot stays consistent.
    """

    __slots__ = ("_fired_lookup", "actions", "fire_count", "grades", "now_ns", "version", "world")

    def __init__(
        self,
        *,
        version: int,
        now_ns: int,
        world: Mapping[str, Any],
        actions: tuple[AgentAction, ...],
        grades: Mapping[str, Any],
        fire_count: int,
        fired_lookup: Callable[[str, int], int | None],
    ) -> None:
        self.version = version
        self.now_ns = now_ns
        self.world: Mapping[str, Any] = (
            MappingProxyType(dict(world)) if not isinstance(world, MappingProxyType) else world
        )
        self.actions = actions
        self.grades: Mapping[str, Any] = (
            grades if isinstance(grades, MappingProxyType) else MappingProxyType(dict(grades))
        )
        self.fire_count = fire_count
        self._fired_lookup = fired_lookup

    def fired_at(self, event_id: str) -> int | None:
        """Simulated time at which ``event_id`` fired, as of this snapshot."""
        return self._fired_lookup(event_id, self.fire_count)

    def __repr__(self) -> str:
        return f"Snapshot(version={self.version}, now_ns={self.now_ns}, fires={self.fire_count})"
