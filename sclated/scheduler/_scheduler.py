"""The open event scheduler: a pure, synchronous state machine.

It knows sources, pending events, the snapshot state and the journal. It does
no I/O and owns no clock: the run loop tells it what time it is.

Order is total and deterministic: ``(due time, priority, source rank, arrival)``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sclated.errors import InvalidArgument, ScheduleError, SclateError
from sclated.scheduler._effects import Effect, MutateWorld
from sclated.scheduler._events import After, At, EventSource, EventSpec, When
from sclated.scheduler._journal import FireRecord, InputRecord, JournalEntry
from sclated.scheduler._snapshot import AgentAction, Snapshot

__all__ = ["PendingEvent", "ReplayDivergence", "Scheduler", "replay"]

_DIRECT = "direct"
"""Source name for events registered directly (wake-ups, API calls)."""


class ReplayDivergence(SclateError):
    default_reason = "REPLAY_DIVERGENCE"


@dataclass(slots=True)
class PendingEvent:
    spec: EventSpec
    source: str
    rank: int
    arrival: int
    due_ns: int | None = None
    remaining: set[str] = field(default_factory=set)
    """After-trigger dependencies that have not fired yet."""

    def key(self) -> tuple[int, int, int, int]:
        assert self.due_ns is not None
        return (self.due_ns, int(self.spec.effective_priority), self.rank, self.arrival)


class Scheduler:
    def __init__(self, *, start_ns: int = 0, sources: Iterable[EventSource] = ()) -> None:
        if start_ns < 0:
            raise InvalidArgument("start time must not be negative", field="start_ns")
        self._now = start_ns
        self.start_ns = start_ns
        self._sources: dict[str, tuple[EventSource, int]] = {}
        # Only unfired events: a fired one lives on as its fire record, so a
        # long run does not keep (and garbage-collect over) every spec twice.
        self._events: dict[str, PendingEvent] = {}
        self._scheduled = 0
        self._ready: list[tuple[int, int, int, int, str]] = []
        self._conditions: dict[str, PendingEvent] = {}
        self._dependents: dict[str, list[str]] = {}
        self._fired: dict[str, tuple[int, int]] = {}  # id -> (fire index, fired_ns)
        self._arrivals = itertools.count()
        self.journal: list[JournalEntry] = []
        self.fires: list[FireRecord] = []
        # Snapshot state; dicts are replaced, never mutated, so snapshots stay consistent.
        self._version = 0
        self._version_ns = start_ns
        self._world: Mapping[str, Any] = MappingProxyType({})
        self._grades: Mapping[str, Any] = MappingProxyType({})
        self._actions: tuple[AgentAction, ...] = ()
        self._snapshot: Snapshot | None = None
        for source in sources:
            self.add_source(source)

    # -- state --------------------------------------------------------------
    @property
    def now_ns(self) -> int:
        return self._now

    @property
    def version(self) -> int:
        return self._version

    @property
    def scheduled_count(self) -> int:
        return self._scheduled

    def sources(self) -> list[str]:
        return list(self._sources)

    def snapshot(self) -> Snapshot:
        snap = self._snapshot
        if (
            snap is None
            or snap.version != self._version
            or snap.now_ns != self._now
            or snap.fire_count != len(self.fires)
        ):
            snap = Snapshot(
                version=self._version,
                now_ns=self._now,
                world=self._world,
                actions=self._actions,
                grades=self._grades,
                fire_count=len(self.fires),
                fired_lookup=self._fired_lookup,
            )
            self._snapshot = snap
        return snap

    def _fired_lookup(self, event_id: str, fire_count: int) -> int | None:
        hit = self._fired.get(event_id)
        if hit is None or hit[0] >= fire_count:
            return None
        return hit[1]

    def pending(self) -> list[PendingEvent]:
        """Events registered but not fired, in no particular order."""
        return list(self._events.values())

    def knows(self, event_id: str) -> bool:
        """True when ``event_id`` is scheduled or has fired (registering it again is an error)."""
        return event_id in self._events or event_id in self._fired

    def is_fired(self, event_id: str) -> bool:
        return event_id in self._fired

    def next_due_ns(self) -> int | None:
        """The earliest due time among ready events (None when only blocked or conditional ones remain)."""
        return self._ready[0][0] if self._ready else None

    # -- registration ---------------------------------------------------------
    def add_source(self, source: EventSource, *, rank: int | None = None) -> None:
        name = source.name
        if not name or name == _DIRECT:
            raise InvalidArgument(f"source name {name!r} is empty or reserved", field="source.name")
        if name in self._sources:
            raise InvalidArgument(f"a source named {name!r} is already registered", field="source.name")
        self._sources[name] = (source, len(self._sources) + 1 if rank is None else rank)
        try:
            self._poll(name)
        except BaseException:
            # A source whose first events are rejected is not half-registered.
            del self._sources[name]
            raise

    def register(self, specs: Sequence[EventSpec], *, source: str = _DIRECT) -> None:
        """Register events directly (not from a poll); journaled so replay sees them."""
        if source != _DIRECT and source not in self._sources:
            raise InvalidArgument(f"unknown source {source!r}", field="source")
        self._add(list(specs), source)
        self._record_input("register", payload=[s.id for s in specs], source=source, specs=tuple(specs), bump=False)

    def _rank_of(self, source: str) -> int:
        return 0 if source == _DIRECT else self._sources[source][1]

    def _validate(self, specs: list[EventSpec], source: str) -> None:
        batch_ids: set[str] = set()
        has_after = False
        for spec in specs:
            if not isinstance(spec, EventSpec):
                raise ScheduleError(f"source {source!r} returned {spec!r}, not an EventSpec", reason="NOT_AN_EVENT")
            eid = spec.id
            if not eid or not isinstance(eid, str):
                raise ScheduleError(f"source {source!r} returned an event without an id", event_id=str(eid))
            if eid in self._events or eid in self._fired or eid in batch_ids:
                raise ScheduleError(f"event {eid!r} is already scheduled", event_id=eid, reason="DUPLICATE_EVENT")
            batch_ids.add(eid)
            for effect in spec.effects:
                if not isinstance(effect, Effect):
                    raise ScheduleError(f"event {eid!r} has an effect that is not an Effect: {effect!r}", event_id=eid)
            trig = spec.trigger
            if isinstance(trig, At):
                if trig.time_ns < self._now:
                    raise ScheduleError(
                        f"event {eid!r} is due at {trig.time_ns} ns, before the current simulated time {self._now} ns",
                        event_id=eid,
                        reason="EVENT_IN_PAST",
                    )
            elif isinstance(trig, After):
                has_after = True
                if trig.delay_ns < 0:
                    raise ScheduleError(
                        f"event {eid!r} has a negative delay ({trig.delay_ns} ns)",
                        event_id=eid,
                        reason="NEGATIVE_DELAY",
                    )
                if not trig.deps:
                    raise ScheduleError(f"event {eid!r} waits on no dependency", event_id=eid, reason="NO_DEPENDENCY")
            elif isinstance(trig, When):
                if not callable(trig.predicate):
                    raise ScheduleError(f"event {eid!r} has a condition that is not callable", event_id=eid)
            else:
                raise ScheduleError(
                    f"event {eid!r} has an unknown trigger {trig!r}", event_id=eid, reason="BAD_TRIGGER"
                )
        if not has_after:
            return  # the common case (timed events from a lazy source) ends here
        # Dependencies: known, and no cycle. Existing events never depend on new
        # ones, so a cycle can only run through this batch.
        by_id = {s.id: s for s in specs}
        for spec in specs:
            if isinstance(spec.trigger, After):
                for dep in spec.trigger.deps:
                    if dep not in self._events and dep not in self._fired and dep not in by_id:
                        raise ScheduleError(
                            f"event {spec.id!r} depends on unknown event {dep!r}",
                            event_id=spec.id,
                            reason="UNKNOWN_DEPENDENCY",
                        )
        self._check_cycles(by_id)
        for spec in specs:
            trig = spec.trigger
            if isinstance(trig, After) and all(d in self._fired for d in trig.deps):
                due = max(self._fired[d][1] for d in trig.deps) + trig.delay_ns
                if due < self._now:
                    raise ScheduleError(
                        f"event {spec.id!r} would be due at {due} ns, before the current simulated time {self._now} ns",
                        event_id=spec.id,
                        reason="EVENT_IN_PAST",
                    )

    @staticmethod
    def _check_cycles(by_id: Mapping[str, EventSpec]) -> None:
        state: dict[str, int] = {}  # 1 visiting, 2 done

        def deps_of(eid: str) -> tuple[str, ...]:
            trig = by_id[eid].trigger
            return tuple(d for d in trig.deps if d in by_id) if isinstance(trig, After) else ()

        for root in by_id:
            if state.get(root):
                continue
            stack: list[tuple[str, Iterator[str]]] = [(root, iter(deps_of(root)))]
            path = [root]
            state[root] = 1
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    state[node] = 2
                    stack.pop()
                    path.pop()
                    continue
                if state.get(nxt) == 1:
                    cycle = [*path[path.index(nxt) :], nxt]
                    raise ScheduleError(
                        f"event {root!r} is part of a dependency cycle: {' -> '.join(cycle)}",
                        event_id=root,
                        reason="DEPENDENCY_CYCLE",
                    )
                if not state.get(nxt):
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, iter(deps_of(nxt))))

    def _add(self, specs: list[EventSpec], source: str) -> None:
        if not specs:
            return
        self._validate(specs, source)
        # Conditions are evaluated before anything changes, so a predicate that
        # raises leaves the state as it was.
        conditions = [s for s in specs if isinstance(s.trigger, When)]
        holds_now: dict[str, bool] = {}
        if conditions:
            snap = self.snapshot()
            holds_now = {s.id: self._holds(s, snap) for s in conditions}
        # Nothing has changed yet; from here on nothing can fail.
        rank = self._rank_of(source)
        for spec in specs:
            pend = PendingEvent(spec, source, rank, next(self._arrivals))
            self._events[spec.id] = pend
            self._scheduled += 1
            trig = spec.trigger
            if isinstance(trig, At):
                self._make_ready(pend, trig.time_ns)
            elif isinstance(trig, After):
                pend.remaining = {d for d in trig.deps if d not in self._fired}
                for d in pend.remaining:
                    self._dependents.setdefault(d, []).append(spec.id)
                if not pend.remaining:
                    self._make_ready(pend, max(self._fired[d][1] for d in trig.deps) + trig.delay_ns)
            elif holds_now[spec.id]:
                self._make_ready(pend, self._now)
            else:
                self._conditions[spec.id] = pend

    def _make_ready(self, pend: PendingEvent, due_ns: int) -> None:
        pend.due_ns = due_ns
        heapq.heappush(self._ready, (*pend.key(), pend.spec.id))

    @staticmethod
    def _holds(spec: EventSpec, snap: Snapshot) -> bool:
        trig = spec.trigger
        assert isinstance(trig, When)
        try:
            return bool(trig.predicate(snap))
        except Exception as exc:  # a broken predicate is the adapter's bug, named as such
            raise ScheduleError(
                f"condition of event {spec.id!r} raised {type(exc).__name__}: {exc}",
                event_id=spec.id,
                reason="CONDITION_FAILED",
            ) from exc

    def _poll(self, source_name: str) -> None:
        source = self._sources[source_name][0]
        specs = list(source.poll(self.snapshot()))
        if specs:
            self._add(specs, source_name)

    # -- firing ---------------------------------------------------------------
    def advance(self, now_ns: int) -> None:
        if now_ns < self._now:
            raise InvalidArgument(f"simulated time never goes backwards: {now_ns} < {self._now}", field="now_ns")
        self._now = now_ns

    def pop_due(self, now_ns: int) -> FireRecord | None:
        """Fire the first event due at or before ``now_ns``, or return None."""
        if now_ns < self._now:
            self.advance(now_ns)  # raises
        self._now = now_ns
        ready = self._ready
        if not ready or ready[0][0] > now_ns:
            return None
        due, prio, rank, arrival, eid = heapq.heappop(ready)
        pend = self._events.pop(eid)
        rec = FireRecord(
            seq=len(self.journal),
            event_id=eid,
            source=pend.source,
            due_ns=due,
            fired_ns=now_ns,
            priority=prio,
            source_rank=rank,
            arrival=arrival,
            snapshot_version=self._version,
            effects=pend.spec.effects,
            data=pend.spec.data,
        )
        self._fired[eid] = (len(self.fires), now_ns)
        self.fires.append(rec)
        self.journal.append(rec)
        for dep_id in self._dependents.pop(eid, ()):
            dependent = self._events[dep_id]
            dependent.remaining.discard(eid)
            if not dependent.remaining:
                trig = dependent.spec.trigger
                assert isinstance(trig, After)
                self._make_ready(dependent, max(self._fired[d][1] for d in trig.deps) + trig.delay_ns)
        changes = [e.changes for e in rec.effects if isinstance(e, MutateWorld)]
        if pend.source != _DIRECT:
            self._poll(pend.source)
        if changes:
            world = dict(self._world)
            for c in changes:
                world.update(c)
            self._world = MappingProxyType(world)
            self._bump()
        return rec

    # -- inputs from outside ------------------------------------------------------
    def apply_action(self, actor: str, kind: str, data: Mapping[str, Any] | None = None) -> InputRecord:
        action = AgentAction(actor, kind, MappingProxyType(dict(data or {})), self._now)
        self._actions = (*self._actions, action)
        return self._record_input("action", payload={"actor": actor, "kind": kind, "data": dict(data or {})})

    def apply_world(self, changes: Mapping[str, Any]) -> InputRecord:
        world = dict(self._world)
        world.update(changes)
        self._world = MappingProxyType(world)
        return self._record_input("world", payload=dict(changes))

    def apply_grade(self, check_id: str, outcome: Any) -> InputRecord:
        if not check_id:
            raise InvalidArgument("a grade needs a check id", field="check_id")
        grades = dict(self._grades)
        grades[check_id] = outcome
        self._grades = MappingProxyType(grades)
        return self._record_input("grade", payload={"check_id": check_id, "outcome": outcome})

    def _record_input(
        self,
        kind: Any,
        *,
        payload: Any,
        source: str = "",
        specs: tuple[EventSpec, ...] = (),
        bump: bool = True,
    ) -> InputRecord:
        if bump:
            self._version += 1
            self._version_ns = self._now
        rec = InputRecord(len(self.journal), kind, self._now, self._version, payload, source, specs)
        self.journal.append(rec)
        if bump:
            self._after_change()
        return rec

    def _bump(self) -> None:
        self._version += 1
        self._version_ns = self._now
        self._after_change()

    def _after_change(self) -> None:
        for name in list(self._sources):
            self._poll(name)
        if self._conditions:
            snap = self.snapshot()
            for eid, pend in list(self._conditions.items()):
                if self._holds(pend.spec, snap):
                    del self._conditions[eid]
                    self._make_ready(pend, self._version_ns)


def replay(
    journal: Sequence[JournalEntry],
    make_scheduler: Callable[[], Scheduler],
    *,
    on_fire: Callable[[FireRecord], None] | None = None,
) -> Scheduler:
    """Rebuild a scheduler from fresh sources and a journal, checking every fire.

    Raises :class:`ReplayDivergence` naming the first entry that differs.
    """
    sched = make_scheduler()
    for entry in journal:
        if isinstance(entry, InputRecord):
            sched.advance(entry.at_ns)
            if entry.kind == "action":
                sched.apply_action(entry.payload["actor"], entry.payload["kind"], entry.payload["data"])
            elif entry.kind == "world":
                sched.apply_world(entry.payload)
            elif entry.kind == "grade":
                sched.apply_grade(entry.payload["check_id"], entry.payload["outcome"])
            else:
                sched.register(entry.specs, source=entry.source)
            got_seq = sched.journal[-1].seq
            if got_seq != entry.seq:
                raise ReplayDivergence(f"input at journal position {entry.seq} replayed at {got_seq}")
            continue
        rec = sched.pop_due(entry.fired_ns)
        if rec is None or rec.replay_key() != entry.replay_key():
            raise ReplayDivergence(
                f"journal entry {entry.seq}: recorded fire of {entry.event_id!r} at {entry.fired_ns} ns, "
                f"replay gave {rec.event_id if rec else 'nothing'!r}",
                reason="REPLAY_DIVERGENCE",
            )
        if on_fire is not None:
            on_fire(rec)
    return sched
