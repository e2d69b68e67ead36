"""Sources and state captures shared by the scheduler tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sclated.scheduler import EventSpec, Scheduler, Snapshot


class ListSource:
    """Returns its whole list on the first poll, nothing afterwards."""

    def __init__(self, name: str, specs: Sequence[EventSpec]) -> None:
        self.name = name
        self._specs = list(specs)
        self._given = False

    def poll(self, snapshot: Snapshot) -> Iterable[EventSpec]:
        if self._given:
            return ()
        self._given = True
        return list(self._specs)


class LazySource:
    """Hands out one event per poll, the next only after the previous one fired."""

    def __init__(self, name: str, specs: Sequence[EventSpec]) -> None:
        self.name = name
        self._specs = list(specs)
        self._next = 0
        self.polls = 0

    def poll(self, snapshot: Snapshot) -> Iterable[EventSpec]:
        self.polls += 1
        if self._next >= len(self._specs):
            return ()
        if self._next > 0 and snapshot.fired_at(self._specs[self._next - 1].id) is None:
            return ()
        spec = self._specs[self._next]
        self._next += 1
        return (spec,)


def state_of(s: Scheduler) -> tuple[Any, ...]:
    """Everything a failed call must leave as it was."""
    pending = sorted(
        (p.spec.id, p.source, p.rank, p.arrival, p.due_ns, tuple(sorted(p.remaining)))
        for p in s.pending()
    )
    return (
        tuple(s.journal),
        tuple(s.fires),
        tuple(pending),
        s.next_due_ns(),
        s.version,
        s.scheduled_count,
        tuple(s.sources()),
        dict(s.snapshot().world),
        s.now_ns,
    )
