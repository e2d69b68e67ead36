"""Property tests of the scheduler's invariants over random scenarios.

A scenario is a set of sources, each with At, After (a random DAG with delays)
and When (a threshold over one world key) events, random priorities and
effects, plus a list of timed world inputs. A driver fires it the way a run
loop would (sometimes late), and the invariants are checked on the journal.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sclated.scheduler import (
    After,
    At,
    Effect,
    EventSpec,
    FireRecord,
    InputRecord,
    MutateWorld,
    Notify,
    Priority,
    ReplayDivergence,
    SaveSnapshot,
    Scheduler,
    Snapshot,
    StopRun,
    When,
    replay,
)
from tests.scheduler._helpers import LazySource, ListSource

KEYS = ("a", "b", "c")
PRIORITIES = (None, Priority.HIGH, Priority.NORMAL, Priority.LOW, Priority.CONTROL)


@dataclass(frozen=True)
class EventPlan:
    id: str
    source: int
    kind: str  # "at" | "after" | "when"
    time_ns: int = 0
    deps: tuple[str, ...] = ()
    delay_ns: int = 0
    key: str = "a"
    threshold: int = 0
    priority: Priority | None = None
    effect: str = "notify"  # "notify" | "stop" | "save" | "mutate"
    mutate_key: str = "a"
    mutate_value: int = 0


@dataclass(frozen=True)
class Scenario:
    n_sources: int
    lazy: tuple[bool, ...]
    events: tuple[EventPlan, ...]
    inputs: tuple[tuple[int, str, int], ...]  # (time, key, value), sorted by time
    jitter: tuple[int, ...]  # lateness of successive pops


def _threshold_predicate(key: str, threshold: int) -> Callable[[Snapshot], bool]:
    def holds(snap: Snapshot) -> bool:
        return int(snap.world.get(key, 0)) >= threshold

    return holds


def _effects(plan: EventPlan) -> tuple[Effect, ...]:
    if plan.effect == "stop":
        return (StopRun("done"),)
    if plan.effect == "save":
        return (SaveSnapshot(plan.id),)
    if plan.effect == "mutate":
        return (MutateWorld({plan.mutate_key: plan.mutate_value}),)
    return (Notify(plan.id),)


def spec_of(plan: EventPlan) -> EventSpec:
    trigger: At | After | When
    if plan.kind == "at":
        trigger = At(plan.time_ns)
    elif plan.kind == "after":
        trigger = After(plan.deps, plan.delay_ns)
    else:
        trigger = When(
            _threshold_predicate(plan.key, plan.threshold), f"{plan.key}>={plan.threshold}"
        )
    return EventSpec(
        plan.id, trigger, _effects(plan), priority=plan.priority, data={"kind": plan.kind}
    )


def make_scheduler(sc: Scenario) -> Scheduler:
    """A fresh scheduler with fresh sources for the scenario (as replay needs)."""
    s = Scheduler(start_ns=0)
    for i in range(sc.n_sources):
        specs = [spec_of(p) for p in sc.events if p.source == i]
        # A lazy source hands out At events one at a time; its DAG and
        # condition events come in its first batch.
        if sc.lazy[i]:
            timed = [s_ for s_ in specs if isinstance(s_.trigger, At)]
            rest = [s_ for s_ in specs if not isinstance(s_.trigger, At)]
            s.add_source(ClampingLazySource(f"src{i}", timed, rest))
        else:
            s.add_source(ListSource(f"src{i}", specs))
    return s


class ClampingLazySource(LazySource):
    """Hands out its At events one by one, never in the past (a previous fire
    may have been late), and remembers what it handed out."""

    emitted: ClassVar[dict[str, EventSpec]] = {}

    def __init__(self, name: str, timed: list[EventSpec], first: list[EventSpec]) -> None:
        super().__init__(name, timed)
        self._first = first

    def poll(self, snapshot: Snapshot) -> list[EventSpec]:
        out, self._first = self._first, []
        for spec in super().poll(snapshot):
            assert isinstance(spec.trigger, At)
            spec = replace(spec, trigger=At(max(spec.trigger.time_ns, snapshot.now_ns)))
            ClampingLazySource.emitted[spec.id] = spec
            out.append(spec)
        return out


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    n_sources = draw(st.integers(1, 3))
    lazy = tuple(draw(st.booleans()) for _ in range(n_sources))
    n_events = draw(st.integers(1, 14))
    events: list[EventPlan] = []
    for i in range(n_events):
        src = draw(st.integers(0, n_sources - 1))
        # A dependency must be known when its dependent is registered: no
        # later source, and no At event a lazy source has not handed out yet.
        kind = draw(st.sampled_from(["at", "at", "after", "when"]))
        candidates = [
            e.id for e in events if e.source <= src and not (lazy[e.source] and e.kind == "at")
        ]
        if kind == "after" and not candidates:
            kind = "at"
        plan = EventPlan(
            id=f"e{i}",
            source=src,
            kind=kind,
            time_ns=draw(st.integers(0, 200)),
            deps=tuple(
                draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3, unique=True))
            )
            if kind == "after"
            else (),
            delay_ns=draw(st.integers(0, 50)),
            key=draw(st.sampled_from(KEYS)),
            threshold=draw(st.integers(0, 4)),
            priority=draw(st.sampled_from(PRIORITIES)),
            effect=draw(st.sampled_from(["notify", "notify", "stop", "save", "mutate"])),
            mutate_key=draw(st.sampled_from(KEYS)),
            mutate_value=draw(st.integers(0, 5)),
        )
        events.append(plan)
    times = sorted(draw(st.lists(st.integers(0, 300), max_size=6)))
    inputs = tuple((t, draw(st.sampled_from(KEYS)), draw(st.integers(0, 5))) for t in times)
    jitter = tuple(draw(st.lists(st.sampled_from([0, 0, 0, 1, 7, 40]), min_size=1, max_size=8)))
    return Scenario(n_sources, lazy, tuple(events), inputs, jitter)


def run_scenario(sc: Scenario, *, check_choice: bool = True) -> Scheduler:
    """Fire the scenario as a run loop would; at each pop check the choice was the minimum."""
    ClampingLazySource.emitted.clear()
    s = make_scheduler(sc)
    k = 0
    pops = 0
    while True:
        nd = s.next_due_ns()
        it = sc.inputs[k][0] if k < len(sc.inputs) else None
        if nd is None and it is None:
            break
        if it is not None and (nd is None or it < max(nd, s.now_ns)):
            _, key, value = sc.inputs[k]
            s.advance(max(it, s.now_ns))
            s.apply_world({key: value})
            k += 1
            continue
        assert nd is not None
        at = max(nd, s.now_ns) + sc.jitter[pops % len(sc.jitter)]
        if it is not None:
            at = min(at, max(it, nd, s.now_ns))
        ready = [p.key() for p in s.pending() if p.due_ns is not None]
        rec = s.pop_due(at)
        pops += 1
        assert rec is not None
        if check_choice:
            # The total order: the fired event is the least ready one.
            assert (rec.due_ns, rec.priority, rec.source_rank, rec.arrival) == min(ready)
    return s


def _fires(s: Scheduler) -> list[FireRecord]:
    return [e for e in s.journal if isinstance(e, FireRecord)]


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_fire_order_and_timing_invariants(sc: Scenario) -> None:
    s = run_scenario(sc)
    plans = {p.id: p for p in sc.events}
    fires = _fires(s)
    assert fires == s.fires
    fired = {f.event_id: f for f in fires}
    assert len(fired) == len(fires), "an event fired twice"

    # Non-decreasing simulated time, never before due.
    for prev, cur in itertools.pairwise(fires):
        assert prev.fired_ns <= cur.fired_ns
    for f in fires:
        assert f.fired_ns >= f.due_ns
        plan = plans[f.event_id]
        assert f.priority == int(spec_of(plan).effective_priority)
        if plan.kind == "at":
            if sc.lazy[plan.source]:
                lazy_spec = ClampingLazySource.emitted[f.event_id]
                assert isinstance(lazy_spec.trigger, At)
                assert f.due_ns == lazy_spec.trigger.time_ns >= plan.time_ns
            else:
                assert f.due_ns == plan.time_ns
        if plan.effect in ("stop", "save") and plan.priority is None:
            assert f.priority == Priority.CONTROL

    # DAG: due exactly the delay after the last dependency's fire, and after all of them fired.
    for f in fires:
        plan = plans[f.event_id]
        if plan.kind != "after":
            continue
        assert all(d in fired for d in plan.deps)
        assert all(fired[d].seq < f.seq for d in plan.deps)
        assert f.due_ns == max(fired[d].fired_ns for d in plan.deps) + plan.delay_ns

    # Conditions: due at the first state change (or registration) where they hold.
    world: dict[str, int] = {}
    first_true: dict[str, int] = {}
    version_at: dict[str, int] = {}
    conds = [p for p in sc.events if p.kind == "when"]

    def check(t: int, version: int) -> None:
        for p in conds:
            if p.id not in first_true and world.get(p.key, 0) >= p.threshold:
                first_true[p.id] = t
                version_at[p.id] = version

    check(0, 0)
    version = 0
    for entry in s.journal:
        if isinstance(entry, InputRecord) and entry.kind == "world":
            world.update(entry.payload)
            version = entry.version
            check(entry.at_ns, version)
        elif isinstance(entry, FireRecord):
            changes = [e.changes for e in entry.effects if isinstance(e, MutateWorld)]
            if changes:
                for c in changes:
                    world.update(c)
                version += 1
                check(entry.fired_ns, version)
    for p in conds:
        if p.id in first_true:
            assert p.id in fired, f"{p.id} held at {first_true[p.id]} but never fired"
            assert fired[p.id].due_ns == first_true[p.id]
            assert fired[p.id].snapshot_version >= version_at[p.id]
        else:
            assert p.id not in fired, f"{p.id} fired although its condition never held"

    # Everything that could fire did; the rest is blocked on a condition.
    for p in sc.events:
        if p.id not in fired:
            assert p.kind in ("when", "after")
    assert s.next_due_ns() is None


@SETTINGS
@given(scenarios())
def test_replay_reproduces_every_fire(sc: Scenario) -> None:
    s = run_scenario(sc, check_choice=False)
    seen: list[FireRecord] = []
    again = replay(s.journal, lambda: make_scheduler(sc), on_fire=seen.append)
    assert again.fires == s.fires
    assert seen == s.fires
    assert again.journal == s.journal
    assert again.version == s.version
    assert dict(again.snapshot().world) == dict(s.snapshot().world)


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.data())
def test_tampered_journal_raises_divergence(sc: Scenario, data: st.DataObject) -> None:
    s = run_scenario(sc, check_choice=False)
    fires = _fires(s)
    if not fires:
        return
    victim = data.draw(st.sampled_from(fires))
    how = data.draw(st.sampled_from(["due", "id", "drop", "version"]))
    journal: list[Any] = list(s.journal)
    pos = journal.index(victim)
    if how == "due":
        journal[pos] = replace(victim, due_ns=victim.due_ns + 1)
    elif how == "id":
        journal[pos] = replace(victim, event_id=victim.event_id + "-forged")
    elif how == "version":
        journal[pos] = replace(victim, snapshot_version=victim.snapshot_version + 1)
    else:
        if pos == len(journal) - 1:
            return  # dropping the last entry leaves a consistent prefix
        del journal[pos]
    with pytest.raises(ReplayDivergence):
        replay(journal, lambda: make_scheduler(sc))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 20), st.sampled_from(PRIORITIES), st.integers(0, 2), st.booleans()
        ),
        min_size=1,
        max_size=25,
    )
)
def test_at_events_fire_in_the_stated_total_order(
    rows: list[tuple[int, Priority | None, int, bool]],
) -> None:
    """Everything registered up front: the fire order is exactly the sort by
    (time, priority class, source rank, arrival), control effects first at a tie."""
    per_source: dict[int, list[EventSpec]] = {0: [], 1: [], 2: []}
    expected = []
    arrival = 0
    for i, (t, prio, src, control) in enumerate(rows):
        spec = EventSpec(f"e{i}", At(t), (StopRun(),) if control else (Notify("x"),), priority=prio)
        per_source[src].append(spec)
    for src in (0, 1, 2):
        for spec in per_source[src]:
            assert isinstance(spec.trigger, At)
            expected.append(
                (spec.trigger.time_ns, int(spec.effective_priority), src + 1, arrival, spec.id)
            )
            arrival += 1
    s = Scheduler(sources=[ListSource(f"s{i}", per_source[i]) for i in (0, 1, 2)])
    got = []
    while (nd := s.next_due_ns()) is not None:
        rec = s.pop_due(nd)
        assert rec is not None
        got.append(rec.event_id)
    assert got == [e[-1] for e in sorted(expected)]
    for t, prio_key, _, _, eid in expected:
        if prio_key == Priority.CONTROL:
            # No non-control event at the same time fires before it.
            earlier = got[: got.index(eid)]
            assert not any(
                e[0] == t and e[1] != Priority.CONTROL for e in expected if e[-1] in earlier
            )
