"""Unit tests of the scheduler: triggers, order, inputs, bad input."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from sclated.errors import InvalidArgument, ScheduleError
from sclated.scheduler import (
    After,
    At,
    DeliverPrompt,
    EventSpec,
    FireRecord,
    InputRecord,
    MutateWorld,
    Notify,
    Priority,
    SaveSnapshot,
    Scheduler,
    Snapshot,
    StopRun,
    When,
)
from tests.scheduler._helpers import LazySource, ListSource, state_of


def drain(s: Scheduler) -> list[FireRecord]:
    """Fire everything that becomes due, each at its due time or now if that is later."""
    out = []
    while (nxt := s.next_due_ns()) is not None:
        rec = s.pop_due(max(nxt, s.now_ns))
        assert rec is not None
        out.append(rec)
    return out


def ids(fires: Iterable[FireRecord]) -> list[str]:
    return [f.event_id for f in fires]


# -- triggers ----------------------------------------------------------------


def test_at_events_fire_in_time_order_at_their_time() -> None:
    src = ListSource("b", [EventSpec("c", At(30)), EventSpec("a", At(10)), EventSpec("b", At(20))])
    s = Scheduler(sources=[src])
    assert s.next_due_ns() == 10
    assert s.pop_due(9) is None
    assert s.now_ns == 9
    fires = drain(s)
    assert ids(fires) == ["a", "b", "c"]
    assert [(f.due_ns, f.fired_ns) for f in fires] == [(10, 10), (20, 20), (30, 30)]
    assert [f.seq for f in fires] == [0, 1, 2]


def test_late_pop_fires_one_event_per_call_with_the_late_time() -> None:
    s = Scheduler(sources=[ListSource("b", [EventSpec("a", At(10)), EventSpec("b", At(20))])])
    first = s.pop_due(25)
    second = s.pop_due(25)
    assert first is not None and second is not None
    assert (first.event_id, first.due_ns, first.fired_ns) == ("a", 10, 25)
    assert (second.event_id, second.due_ns, second.fired_ns) == ("b", 20, 25)
    assert s.pop_due(25) is None


def test_tie_order_is_priority_then_source_rank_then_arrival() -> None:
    first = ListSource(
        "first",
        [
            EventSpec("first-normal-1", At(5)),
            EventSpec("first-normal-2", At(5)),
            EventSpec("first-low", At(5), priority=Priority.LOW),
        ],
    )
    second = ListSource(
        "second",
        [
            EventSpec("second-high", At(5), priority=Priority.HIGH),
            EventSpec("second-normal", At(5)),
            EventSpec("second-stop", At(5), (StopRun(),)),
            EventSpec("second-save", At(5), (SaveSnapshot("x"),)),
        ],
    )
    s = Scheduler(sources=[first, second])
    s.register([EventSpec("direct-normal", At(5))])
    assert ids(drain(s)) == [
        "second-stop",
        "second-save",
        "second-high",
        "direct-normal",  # registered directly: rank 0, ahead of every source
        "first-normal-1",
        "first-normal-2",
        "second-normal",
        "first-low",
    ]


def test_control_effect_gives_control_priority_unless_priority_is_explicit() -> None:
    assert EventSpec("a", At(0), (Notify("x"), StopRun())).effective_priority is Priority.CONTROL
    assert EventSpec("a", At(0), (SaveSnapshot(),)).effective_priority is Priority.CONTROL
    assert EventSpec("a", At(0), (Notify("x"),)).effective_priority is Priority.NORMAL
    assert (
        EventSpec("a", At(0), (StopRun(),), priority=Priority.LOW).effective_priority
        is Priority.LOW
    )


def test_explicit_source_rank_orders_ties() -> None:
    s = Scheduler()
    s.add_source(ListSource("late", [EventSpec("late", At(1))]), rank=1)
    s.add_source(ListSource("early", [EventSpec("early", At(1))]), rank=-5)
    assert ids(drain(s)) == ["early", "late"]


def test_after_waits_for_fire_records_not_for_scheduling() -> None:
    s = Scheduler(
        sources=[
            ListSource(
                "b",
                [
                    EventSpec("root", At(100)),
                    EventSpec("other", At(40)),
                    EventSpec("child", After(("root", "other"), 7)),
                ],
            )
        ]
    )
    # Scheduled but not fired: the child is not ready.
    assert s.next_due_ns() == 40
    s.pop_due(40)
    assert s.next_due_ns() == 100
    assert [p.due_ns for p in s.pending() if p.spec.id == "child"] == [None]
    s.pop_due(130)  # root fires late, at 130
    assert s.next_due_ns() == 137
    child = s.pop_due(137)
    assert child is not None and child.event_id == "child" and child.due_ns == 137


def test_after_on_already_fired_dependency_is_due_from_its_fire_time() -> None:
    s = Scheduler(sources=[ListSource("b", [EventSpec("root", At(10))])])
    drain(s)
    s.advance(12)
    s.register([EventSpec("child", After(("root",), 5))])
    assert s.next_due_ns() == 15


def test_when_fires_at_the_time_of_the_input_that_made_it_true() -> None:
    src = ListSource(
        "b", [EventSpec("w", When(lambda snap: snap.world.get("door") == "open", "door open"))]
    )
    s = Scheduler(start_ns=0, sources=[src])
    assert s.next_due_ns() is None
    s.advance(50)
    s.apply_world({"door": "closed"})
    assert s.next_due_ns() is None
    s.advance(70)
    s.apply_world({"door": "open"})
    assert s.next_due_ns() == 70
    s.advance(90)
    s.apply_world({"door": "closed"})  # latched: it became due at 70
    rec = s.pop_due(95)
    assert rec is not None and (rec.event_id, rec.due_ns, rec.fired_ns) == ("w", 70, 95)


def test_when_that_holds_at_registration_is_due_now() -> None:
    s = Scheduler(start_ns=3)
    s.advance(8)
    s.register([EventSpec("w", When(lambda snap: True))])
    assert s.next_due_ns() == 8


def test_when_sees_actions_grades_and_mutations_from_fires() -> None:
    src = ListSource(
        "b",
        [
            EventSpec(
                "on-action", When(lambda snap: any(a.kind == "submit" for a in snap.actions))
            ),
            EventSpec("on-grade", When(lambda snap: snap.grades.get("q1") is True)),
            EventSpec("on-world", When(lambda snap: snap.world.get("k") == 1)),
            EventSpec("mutate", At(40), (MutateWorld({"k": 1}),)),
        ],
    )
    s = Scheduler(sources=[src])
    s.advance(10)
    s.apply_action("agent", "submit", {"x": 1})
    s.advance(20)
    s.apply_grade("q1", True)
    fires = drain(s)
    due = {f.event_id: f.due_ns for f in fires}
    assert due == {"on-action": 10, "on-grade": 20, "mutate": 40, "on-world": 40}
    assert s.snapshot().actions[0].at_ns == 10


def test_fire_records_carry_the_snapshot_version_they_saw() -> None:
    s = Scheduler(
        sources=[
            ListSource(
                "b", [EventSpec("m", At(1), (MutateWorld({"a": 1}),)), EventSpec("n", At(2))]
            )
        ]
    )
    v0 = s.version
    m, n = drain(s)
    assert m.snapshot_version == v0
    assert n.snapshot_version == v0 + 1
    assert s.snapshot().world == {"a": 1}


def test_old_snapshots_stay_consistent() -> None:
    s = Scheduler()
    s.apply_world({"a": 1})
    snap = s.snapshot()
    s.apply_world({"a": 2})
    assert snap.world["a"] == 1
    assert s.snapshot().world["a"] == 2
    with pytest.raises(TypeError):
        snap.world["a"] = 3  # type: ignore[index]


def test_snapshot_fired_at_is_as_of_the_snapshot() -> None:
    s = Scheduler(sources=[ListSource("b", [EventSpec("a", At(5)), EventSpec("b", At(6))])])
    before = s.snapshot()
    drain(s)
    assert before.fired_at("a") is None
    assert s.snapshot().fired_at("a") == 5
    assert s.snapshot().fired_at("nope") is None


def test_lazy_source_is_polled_after_its_own_fires_and_on_version_changes() -> None:
    lazy = LazySource("lazy", [EventSpec(f"e{i}", At(10 * i)) for i in range(1, 4)])
    s = Scheduler(sources=[lazy])
    assert lazy.polls == 1
    assert s.scheduled_count == 1
    s.apply_world({"x": 1})
    assert lazy.polls == 2
    assert ids(drain(s)) == ["e1", "e2", "e3"]
    assert s.scheduled_count == 3


def test_direct_events_do_not_poll_sources() -> None:
    lazy = LazySource("lazy", [])
    s = Scheduler(sources=[lazy])
    s.register([EventSpec("d", At(1))])
    drain(s)
    assert lazy.polls == 1


def test_register_is_journaled_and_does_not_bump_the_version() -> None:
    s = Scheduler()
    s.register([EventSpec("d", At(1))])
    entry = s.journal[-1]
    assert isinstance(entry, InputRecord)
    assert (entry.kind, entry.payload, entry.version) == ("register", ["d"], 0)
    assert s.version == 0


def test_advance_never_goes_backwards() -> None:
    s = Scheduler(start_ns=10)
    with pytest.raises(InvalidArgument):
        s.advance(9)
    with pytest.raises(InvalidArgument):
        s.pop_due(9)
    assert s.now_ns == 10


def test_negative_start_and_bad_sources_are_rejected() -> None:
    with pytest.raises(InvalidArgument):
        Scheduler(start_ns=-1)
    s = Scheduler(sources=[ListSource("a", [])])
    with pytest.raises(InvalidArgument):
        s.add_source(ListSource("a", []))
    with pytest.raises(InvalidArgument):
        s.add_source(ListSource("", []))
    with pytest.raises(InvalidArgument):
        s.add_source(ListSource("direct", []))
    with pytest.raises(InvalidArgument):
        s.register([EventSpec("x", At(1))], source="nobody")
    with pytest.raises(InvalidArgument):
        s.apply_grade("", True)


def test_fires_carry_effects_and_data() -> None:
    spec = EventSpec("a", At(1), (DeliverPrompt("hi", session="s1"),), data={"day": 3})
    s = Scheduler(sources=[ListSource("b", [spec])])
    (rec,) = drain(s)
    assert rec.effects == (DeliverPrompt("hi", session="s1"),)
    assert rec.data == {"day": 3}
    assert rec.source == "b" and rec.source_rank == 1
    assert not s.pending() and s.is_fired("a")


# -- bad input -----------------------------------------------------------------


def _boom(snap: Snapshot) -> bool:
    raise KeyError("missing")


def _base() -> Scheduler:
    s = Scheduler(
        start_ns=0,
        sources=[
            ListSource(
                "b",
                [
                    EventSpec("x", At(100)),
                    EventSpec("y", After(("x",), 5)),
                    EventSpec("w", When(lambda snap: snap.world.get("k") == 1)),
                    EventSpec("done", At(10)),
                ],
            )
        ],
    )
    s.apply_world({"k": 0})
    drain_until = s.pop_due(10)
    assert drain_until is not None
    s.advance(20)
    return s


BAD_BATCHES: dict[str, tuple[list[EventSpec], str, str]] = {
    "past": ([EventSpec("ok", At(30)), EventSpec("late", At(19))], "late", "EVENT_IN_PAST"),
    "self-dependency": ([EventSpec("loop", After(("loop",), 1))], "loop", "DEPENDENCY_CYCLE"),
    "cycle": (
        [
            EventSpec("c1", After(("c3",), 1)),
            EventSpec("c2", After(("c1",), 1)),
            EventSpec("c3", After(("c2", "x"), 1)),
        ],
        "c1",
        "DEPENDENCY_CYCLE",
    ),
    "unknown-dependency": (
        [EventSpec("orphan", After(("x", "ghost"), 1))],
        "orphan",
        "UNKNOWN_DEPENDENCY",
    ),
    "negative-delay": ([EventSpec("neg", After(("x",), -1))], "neg", "NEGATIVE_DELAY"),
    "no-dependency": ([EventSpec("none", After((), 1))], "none", "NO_DEPENDENCY"),
    "duplicate-of-scheduled": ([EventSpec("x", At(500))], "x", "DUPLICATE_EVENT"),
    "duplicate-of-fired": ([EventSpec("done", At(500))], "done", "DUPLICATE_EVENT"),
    "duplicate-in-batch": (
        [EventSpec("twin", At(50)), EventSpec("twin", At(60))],
        "twin",
        "DUPLICATE_EVENT",
    ),
    "raising-condition": (
        [EventSpec("ok2", At(30)), EventSpec("bad-cond", When(_boom))],
        "bad-cond",
        "CONDITION_FAILED",
    ),
    "after-fired-dep-in-past": (
        [EventSpec("stale", After(("done",), 5))],
        "stale",
        "EVENT_IN_PAST",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_bad_registration_names_the_event_and_changes_nothing(case: str) -> None:
    specs, bad_id, reason = BAD_BATCHES[case]
    s = _base()
    before = state_of(s)
    with pytest.raises(ScheduleError) as info:
        s.register(specs)
    err = info.value
    assert err.event_id == bad_id
    assert repr(bad_id) in str(err)
    assert err.reason == reason
    assert state_of(s) == before
    # Still usable, and the rejected batch left no trace behind.
    s.register([EventSpec("after-error", At(30))])
    assert [p.arrival for p in s.pending() if p.spec.id == "after-error"] == [4]
    assert ids(drain(s))[:1] == ["after-error"]


def test_raising_condition_error_chains_the_cause() -> None:
    s = Scheduler()
    with pytest.raises(ScheduleError) as info:
        s.register([EventSpec("bad", When(_boom))])
    assert isinstance(info.value.__cause__, KeyError)
    assert "KeyError" in str(info.value)


def test_bad_events_from_a_source_leave_the_scheduler_unchanged() -> None:
    s = _base()
    before = state_of(s)
    with pytest.raises(ScheduleError) as info:
        s.add_source(ListSource("broken", [EventSpec("fine", At(40)), EventSpec("old", At(1))]))
    assert info.value.event_id == "old"
    assert state_of(s) == before
    # The rejected source is not half-registered: the name is free again.
    s.add_source(ListSource("broken", [EventSpec("fine", At(40))]))
    assert "broken" in s.sources()


def test_non_event_from_a_source_is_a_schedule_error() -> None:
    s = Scheduler()
    with pytest.raises(ScheduleError) as info:
        s.register(["not an event"])  # type: ignore[list-item]
    assert info.value.reason == "NOT_AN_EVENT"
