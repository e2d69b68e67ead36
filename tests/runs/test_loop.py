"""RunLoop: the scheduler and the clock driven together.

Real durations stay at a few milliseconds; every run is bounded by a timeout
so a loop that fails to stop fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sclated.clock import ClockConfig, ClockMode, Jump, Lease, LeaseChange, LeaseTable, SimClock
from sclated.errors import FailedPrecondition, InvalidArgument
from sclated.runs import RunLoop, RunSummary
from sclated.scheduler import (
    After,
    At,
    DeliverPrompt,
    Effect,
    EventSpec,
    FireRecord,
    InputRecord,
    Notify,
    Priority,
    Scheduler,
    Snapshot,
    StopRun,
    When,
)

MS = 1_000_000
S = 1_000 * MS
T0 = 1_700_000_000 * S


class Src:
    def __init__(self, name: str, specs: Iterable[EventSpec]) -> None:
        self.name = name
        self._specs = list(specs)

    def poll(self, snapshot: Snapshot) -> list[EventSpec]:
        out, self._specs = self._specs, []
        return out


class Recorder:
    """A RunObserver keeping everything it is told."""

    def __init__(self) -> None:
        self.fires: list[tuple[FireRecord, int]] = []
        self.jumps: list[Jump] = []
        self.leases: list[LeaseChange] = []
        self.inputs: list[InputRecord] = []

    def on_fire(self, record: FireRecord, wall_ns: int) -> None:
        self.fires.append((record, wall_ns))

    def on_jump(self, jump: Jump) -> None:
        self.jumps.append(jump)

    def on_lease(self, change: LeaseChange) -> None:
        self.leases.append(change)

    def on_input(self, record: InputRecord) -> None:
        self.inputs.append(record)


def noop(record: FireRecord, effect: Effect) -> None:
    return None


def make_loop(
    mode: ClockMode,
    specs: Iterable[EventSpec] = (),
    *,
    executor: Any = noop,
    rate: float = 1.0,
    end_ns: int | None = None,
    observer: Recorder | None = None,
    leases: LeaseTable | None = None,
) -> RunLoop:
    sched = Scheduler(start_ns=T0, sources=[Src("bench", specs)])
    clock = SimClock(ClockConfig(mode=mode, start_ns=T0, rate=rate), leases=leases)
    return RunLoop(sched, clock, executor, end_ns=end_ns, observer=observer)


async def run(loop: RunLoop, limit_s: float = 5.0) -> RunSummary:
    return await asyncio.wait_for(loop.run(), limit_s)


# -- basic behaviour ---------------------------------------------------------------


async def test_discrete_fires_each_event_at_its_due_time_and_stops_idle() -> None:
    rec = Recorder()
    specs = [EventSpec(f"e{i}", At(T0 + i * 3600 * S)) for i in range(5)]
    specs.append(EventSpec("child", After(("e4",), 5 * S)))
    loop = make_loop(ClockMode.DISCRETE, specs, observer=rec)
    summary = await run(loop)
    assert summary.reason.startswith("idle")
    assert [f.event_id for f, _ in rec.fires] == ["e0", "e1", "e2", "e3", "e4", "child"]
    assert all(f.fired_ns == f.due_ns for f, _ in rec.fires)
    assert summary.in_order and summary.fires == 6 and summary.unfired == []
    assert summary.sim_span_ns == 4 * 3600 * S + 5 * S
    assert summary.jumps == len(rec.jumps) == 5  # e0 is due at the start: no jump


async def test_stop_run_effect_stops_with_its_reason_and_lists_the_unfired() -> None:
    specs = [
        EventSpec("a", At(T0 + S)),
        EventSpec("stop", At(T0 + 2 * S), (StopRun("enough"),)),
        EventSpec("later", At(T0 + 3 * S)),
    ]
    seen: list[str] = []

    def executor(record: FireRecord, effect: Effect) -> None:
        seen.append(effect.kind)

    summary = await run(make_loop(ClockMode.DISCRETE, specs, executor=executor))
    assert summary.reason == "enough"
    assert summary.unfired == ["later"]
    assert seen == ["stop_run"]  # the executor is told about the stop too


async def test_end_ns_bounds_the_run() -> None:
    specs = [EventSpec("a", At(T0 + S)), EventSpec("b", At(T0 + 10 * S))]
    loop = make_loop(ClockMode.DISCRETE, specs, end_ns=T0 + 5 * S)
    summary = await run(loop)
    assert summary.reason == "end of scenario time"
    assert summary.unfired == ["b"]
    assert summary.end_ns == T0 + 5 * S


async def test_realtime_scaled_run_finishes_when_idle() -> None:
    """REALTIME never jumps: with nothing left and nothing busy it must still stop."""
    rec = Recorder()
    specs = [EventSpec(f"e{i}", At(T0 + i * 1_000 * MS)) for i in range(1, 4)]
    loop = make_loop(ClockMode.REALTIME, specs, rate=200.0, observer=rec)  # 3 s sim in 15 ms
    summary = await run(loop, limit_s=2.0)
    assert summary.reason.startswith("idle")
    assert summary.jumps == 0
    assert [f.event_id for f, _ in rec.fires] == ["e1", "e2", "e3"]
    assert all(f.fired_ns >= f.due_ns for f, _ in rec.fires)


async def test_run_twice_at_once_is_refused() -> None:
    loop = make_loop(ClockMode.HYBRID, [EventSpec("a", At(T0 + S))])
    loop.leases.acquire("hold", "test")
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0)
    with pytest.raises(FailedPrecondition):
        await loop.run()
    loop.request_stop("test over")
    summary = await asyncio.wait_for(task, 2)
    assert summary.reason == "test over"


async def test_awaitable_effects_run_under_a_dispatch_lease() -> None:
    rec = Recorder()
    held_during: list[dict[str, int]] = []

    def executor(record: FireRecord, effect: Effect) -> Awaitable[None] | None:
        async def work() -> None:
            held_during.append(loop.leases.counts())
            await asyncio.sleep(0.002)

        return work()

    specs = [EventSpec("a", At(T0 + S), (Notify("x"),))]
    loop = make_loop(ClockMode.HYBRID, specs, executor=executor, observer=rec)
    summary = await run(loop)
    assert held_during == [{"dispatch:notify": 1}]
    assert [(c.kind, c.lease.name, c.lease.holder) for c in rec.leases] == [
        ("acquired", "dispatch:notify", "a"),
        ("released", "dispatch:notify", "a"),
    ]
    assert summary.busy_ns >= 2 * MS


async def test_inputs_reach_conditions_and_the_observer() -> None:
    rec = Recorder()
    specs = [
        EventSpec("on-submit", When(lambda s: s.world.get("submitted") is True)),
        EventSpec("tick", At(T0 + 60 * S)),
    ]
    loop = make_loop(ClockMode.DISCRETE, specs, observer=rec)

    def executor_input() -> None:
        loop.apply_world({"submitted": True})

    loop.clock.leases.acquire("agent", "agent")  # keep the loop from finishing first
    task = asyncio.create_task(run(loop))
    await asyncio.sleep(0.005)
    executor_input()
    await asyncio.sleep(0.005)
    for info in loop.leases.diagnostics():
        loop.leases.release(Lease(info.id, info.name, info.holder))
    summary = await task
    assert [f.event_id for f, _ in rec.fires] == ["on-submit", "tick"]
    assert rec.fires[0][0].due_ns == T0  # the time of the input that made it true
    assert [i.kind for i in rec.inputs] == ["world"]
    assert summary.in_order


# -- sleep_until -----------------------------------------------------------------


async def test_sleep_until_registers_the_wake_before_releasing_the_lease() -> None:
    checks: list[bool] = []
    woke: list[int] = []
    loop = make_loop(ClockMode.DISCRETE, [EventSpec("prompt", At(T0 + S), (DeliverPrompt("go"),))])

    def on_lease(change: LeaseChange) -> None:
        if change.kind == "released" and change.lease.name == "agent-turn":
            checks.append(any(p.spec.id.startswith("wake:") for p in loop.scheduler.pending()))

    loop.leases.add_listener(on_lease)

    async def agent() -> None:
        lease = loop.leases.acquire("agent-turn", "agent")
        woke.append(await loop.sleep_until(T0 + 7 * S, lease=lease))

    def executor(record: FireRecord, effect: Effect) -> None:
        if isinstance(effect, DeliverPrompt):
            asyncio.get_running_loop().create_task(agent())

    loop._executor = executor
    summary = await run(loop)
    assert checks == [True]
    assert woke == [T0 + 7 * S]  # discrete: exactly the wake time
    assert summary.reason.startswith("idle") and summary.unfired == []


async def test_task_spawned_by_the_last_event_gets_the_settle_window() -> None:
    """The last prompt's agent task registers a wake-up when it first runs:
    the loop must not declare the run idle before that task had a chance."""
    woke: list[int] = []
    loop = make_loop(ClockMode.HYBRID, [EventSpec("last", At(T0 + S), (DeliverPrompt("go"),))])

    async def agent() -> None:
        woke.append(await loop.sleep_until(loop.clock.now() + 3600 * S))

    def executor(record: FireRecord, effect: Effect) -> None:
        asyncio.get_running_loop().create_task(agent())

    loop._executor = executor
    summary = await run(loop)
    assert len(woke) == 1 and woke[0] >= T0 + S + 3600 * S
    assert summary.fires == 2


async def test_sleep_until_a_time_the_flowing_clock_reaches_during_the_call() -> None:
    """A wake-up that is not in the past when asked for is accepted, even though
    a flowing clock has moved on by the time the event is registered."""

    class SteppingWall:
        def __init__(self) -> None:
            self.t = 0

        def __call__(self) -> int:
            self.t += 1_000  # every read of the wall moves it on by 1 us
            return self.t

    sched = Scheduler(start_ns=T0)
    clock = SimClock(ClockConfig(mode=ClockMode.HYBRID, start_ns=T0), wall=SteppingWall())
    loop = RunLoop(sched, clock, noop)
    lease = loop.leases.acquire("agent-turn", "agent")
    target = clock.now() + 1_500  # the next read is +1 us, the one after +2 us
    task = asyncio.create_task(loop.sleep_until(target, lease=lease))
    await asyncio.sleep(0)
    assert not task.done()
    assert [(p.spec.id, p.due_ns) for p in sched.pending()] == [("wake:agent:1", target)]
    assert not loop.leases.held
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loop._waiters == {}


async def test_sleep_until_in_the_past_is_refused_and_leaves_no_waiter() -> None:
    loop = make_loop(ClockMode.DISCRETE, [EventSpec("a", At(T0 + S))])
    loop.clock.jump_to(T0 + 10 * S)
    lease = loop.leases.acquire("agent-turn", "agent")
    with pytest.raises(InvalidArgument):
        await loop.sleep_until(T0 + 5 * S, lease=lease)
    assert loop.leases.is_held(lease)  # the caller keeps its lease
    loop.leases.release(lease)
    summary = await run(loop)
    assert summary.reason.startswith("idle")


async def test_an_agent_s_wait_for_a_time_the_flowing_clock_passed_wakes_at_once() -> None:
    """``sclate-wait --for 0`` (or any wait shorter than the clock moves between two reads):
    the time was now when asked, and is past when the loop reads the clock again."""
    # Before: refused as "wake-up time ... is before now" every time on a flowing clock.
    wall = iter(range(0, 10**12, 1_000))  # every read of the wall moves it on by 1 us
    sched = Scheduler(start_ns=T0)
    clock = SimClock(ClockConfig(mode=ClockMode.HYBRID, start_ns=T0), wall=lambda: next(wall))
    loop = RunLoop(sched, clock, noop)
    lease = loop.leases.acquire("agent-turn", "agent")
    asked = clock.now()
    task = asyncio.create_task(loop.sleep_until(asked, lease=lease, past_is_now=True))
    await asyncio.sleep(0)
    ((pending,),) = [[p for p in sched.pending() if p.spec.id.startswith("wake:")]]
    assert pending.due_ns is not None and pending.due_ns > asked  # the loop's own now
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loop._waiters == {}


# -- leases ----------------------------------------------------------------------


async def test_leaked_lease_expires_is_reported_and_the_run_finishes() -> None:
    specs = [EventSpec(f"e{i}", At(T0 + i * 3600 * S)) for i in range(1, 4)]
    loop = make_loop(ClockMode.HYBRID, specs)
    loop.leases.acquire("model-call:42", "leaky-harness", ttl_ns=20 * MS)
    t = time.monotonic()
    summary = await run(loop, limit_s=3.0)
    assert time.monotonic() - t < 2.0
    assert [(e.info.name, e.info.holder) for e in summary.expired_leases] == [
        ("model-call:42", "leaky-harness")
    ]
    assert summary.fires == 3 and summary.unfired == []
    assert summary.as_dict()["expired_leases"] == [
        {"name": "model-call:42", "holder": "leaky-harness"}
    ]


async def test_discrete_waits_for_a_held_lease_without_moving() -> None:
    rec = Recorder()
    loop = make_loop(ClockMode.DISCRETE, [EventSpec("a", At(T0 + S))], observer=rec)
    lease = loop.leases.acquire("turn", "agent")
    task = asyncio.create_task(run(loop))
    await asyncio.sleep(0.01)
    assert rec.jumps == [] and loop.clock.now() == T0 and not rec.fires
    loop.leases.release(lease)
    summary = await task
    assert [f.event_id for f, _ in rec.fires] == ["a"]
    assert summary.jumps == 1


# -- properties ----------------------------------------------------------------


@st.composite
def timed_events(draw: st.DrawFn, max_gap_ns: int) -> list[EventSpec]:
    n = draw(st.integers(1, 12))
    specs: list[EventSpec] = []
    for i in range(n):
        prio = draw(st.sampled_from([None, Priority.HIGH, Priority.LOW]))
        prompt = draw(st.booleans())
        effects: tuple[Effect, ...] = (DeliverPrompt(f"p{i}"),) if prompt else (Notify(f"n{i}"),)
        if specs and draw(st.integers(0, 3)) == 0:
            dep = draw(st.sampled_from(specs)).id
            trig: At | After = After((dep,), draw(st.integers(0, max_gap_ns)))
        else:
            trig = At(T0 + draw(st.integers(0, max_gap_ns * 4)))
        specs.append(EventSpec(f"e{i}", trig, effects, priority=prio))
    return specs


def split(specs: list[EventSpec], n: int) -> list[Src]:
    """Several sources; a DAG dependency always lives in the same or an earlier source."""
    out: list[list[EventSpec]] = [[] for _ in range(n)]
    placed: dict[str, int] = {}
    for i, spec in enumerate(specs):
        k = i % n
        if isinstance(spec.trigger, After):
            k = max(placed[d] for d in spec.trigger.deps)
        placed[spec.id] = k
        out[k].append(spec)
    return [Src(f"s{k}", ss) for k, ss in enumerate(out)]


PROP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROP
@given(timed_events(max_gap_ns=3600 * S), st.integers(1, 3), st.booleans())
def test_discrete_jumps_land_exactly_on_due_times(
    specs: list[EventSpec], n_sources: int, busy_agent: bool
) -> None:
    async def main() -> tuple[RunSummary, Recorder, list[str]]:
        rec = Recorder()
        sched = Scheduler(start_ns=T0, sources=split(specs, n_sources))
        clock = SimClock(ClockConfig(mode=ClockMode.DISCRETE, start_ns=T0))
        problems: list[str] = []

        async def agent(eid: str) -> None:
            lease = clock.leases.acquire("agent-turn", eid)
            await asyncio.sleep(0)
            clock.leases.release(lease)

        def executor(record: FireRecord, effect: Effect) -> None:
            if busy_agent and isinstance(effect, DeliverPrompt):
                asyncio.get_running_loop().create_task(agent(record.event_id))

        def on_jump(jump: Jump) -> None:
            nxt = sched.next_due_ns()
            if clock.leases.held:
                problems.append(f"jump while held: {jump}")
            if nxt is None or jump.to_ns != nxt:
                problems.append(f"jump to {jump.to_ns}, next due {nxt}")

        clock.add_jump_listener(on_jump)
        loop = RunLoop(sched, clock, executor, observer=rec)
        return await run(loop), rec, problems

    summary, rec, problems = asyncio.run(main())
    assert problems == []
    assert summary.in_order and summary.unfired == []
    assert [f.fired_ns for f, _ in rec.fires] == [f.due_ns for f, _ in rec.fires]
    # Timed events were all known from the start, so they follow the total
    # order exactly (a DAG child appears only once its parent fired).
    keys = [
        (f.fired_ns, f.priority, f.source_rank, f.arrival)
        for f, _ in rec.fires
        if f.event_id in {s.id for s in specs if isinstance(s.trigger, At)}
    ]
    assert keys == sorted(keys)


@PROP
@given(timed_events(max_gap_ns=20 * MS), st.integers(1, 3), st.lists(st.integers(0, 3), min_size=1))
def test_hybrid_never_jumps_past_a_due_event_or_while_busy(
    specs: list[EventSpec], n_sources: int, turn_ms: list[int]
) -> None:
    """Agent turns hold a lease for a few real milliseconds while the clock flows;
    between them the clock jumps. No jump passes the next due event, none
    happens while a turn is in progress, and nothing fires before its time."""

    async def main() -> tuple[RunSummary, Recorder, list[str]]:
        rec = Recorder()
        sched = Scheduler(start_ns=T0, sources=split(specs, n_sources))
        clock = SimClock(ClockConfig(mode=ClockMode.HYBRID, start_ns=T0))
        problems: list[str] = []
        in_turn = 0
        turns = iter(turn_ms * len(specs))

        async def agent(eid: str) -> None:
            nonlocal in_turn
            lease = clock.leases.acquire("agent-turn", eid)
            in_turn += 1
            await asyncio.sleep(next(turns) / 1000)
            in_turn -= 1
            clock.leases.release(lease)

        def executor(record: FireRecord, effect: Effect) -> None:
            if isinstance(effect, DeliverPrompt):
                asyncio.get_running_loop().create_task(agent(record.event_id))

        def on_jump(jump: Jump) -> None:
            nxt = sched.next_due_ns()
            if clock.leases.held or in_turn:
                problems.append(f"jump during a turn: {jump}")
            if nxt is None or jump.to_ns > nxt:
                problems.append(f"jump to {jump.to_ns} passes next due {nxt}")

        clock.add_jump_listener(on_jump)
        loop = RunLoop(sched, clock, executor, observer=rec)
        return await run(loop), rec, problems

    summary, rec, problems = asyncio.run(main())
    assert problems == []
    assert summary.in_order and summary.unfired == []
    fires = [f for f, _ in rec.fires]
    assert all(f.fired_ns >= f.due_ns for f in fires)
    assert [f.fired_ns for f in fires] == sorted(f.fired_ns for f in fires)
    assert summary.end_ns >= max(f.due_ns for f in fires)


# -- turns and their waits ---------------------------------------------------------------


async def test_a_suspended_turn_lets_the_clock_jump_and_is_busy_again_from_the_wake_up() -> None:
    later = T0 + 3 * 3600 * S
    sched = Scheduler(start_ns=T0, sources=[Src("s", [EventSpec("next", At(later + 3600 * S), (Notify("n"),))])])
    clock = SimClock(ClockConfig(ClockMode.HYBRID, start_ns=T0))
    loop = RunLoop(sched, clock, lambda fire, effect: None)
    turn = loop.begin_turn("turn:a", "agent", T0)
    task = asyncio.create_task(loop.run())
    async with turn.suspended(later) as woke:
        assert later <= woke < later + S  # fired at its time (the hybrid clock flows on a little)
        assert turn.busy  # taken by the loop at the wake-up's fire, not later
        lease_kinds = {i.kind for i in clock.leases.diagnostics()}
        assert lease_kinds == {"turn"}
    # The turn still holds the clock: the next event (an hour on) is not jumped to.
    await asyncio.sleep(0.05)
    assert clock.now() < later + 3600 * S
    assert all(f.event_id != "next" for f in sched.fires)
    turn.end()
    await asyncio.wait_for(task, 5)
    assert any(f.event_id == "next" for f in sched.fires)
    assert turn.waits == 1 and not clock.leases.held


async def test_a_turn_cancelled_while_suspended_leaves_no_lease() -> None:
    sched = Scheduler(start_ns=T0, sources=[Src("s", [EventSpec("far", At(T0 + 30 * 86400 * S), (StopRun("x"),))])])
    clock = SimClock(ClockConfig(ClockMode.DISCRETE, start_ns=T0))
    loop = RunLoop(sched, clock, lambda fire, effect: None, stop_when_idle=False)
    turn = loop.begin_turn("turn:b", "agent", T0)

    async def wait_long() -> None:
        try:
            async with turn.suspended(T0 + 40 * 86400 * S):
                pass
        finally:
            turn.end()  # as the run's turn task does, however the turn ends

    waiter = asyncio.create_task(wait_long())
    await asyncio.sleep(0)
    assert not clock.leases.held  # released once the wake-up was registered
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not clock.leases.held and not turn.busy
    with pytest.raises(FailedPrecondition, match="has ended"):
        async with turn.suspended(T0):
            pass


async def test_a_wait_called_off_mid_turn_makes_the_turn_busy_again_at_once() -> None:
    """A wait from inside the sandbox whose caller went away (the control socket closed
    mid-wait, found by `sclated bench faults`): the wait is called off, but the turn goes
    on, so it holds the clock again from that moment. Before, the turn stayed without a
    lease until the wake-up, and the clock jumped hours ahead while the agent worked."""
    far = T0 + 2 * 3600 * S
    sched = Scheduler(start_ns=T0, sources=[Src("s", [EventSpec("next", At(far + 3600 * S), (Notify("n"),))])])
    clock = SimClock(ClockConfig(ClockMode.HYBRID, start_ns=T0))
    loop = RunLoop(sched, clock, lambda fire, effect: None)
    turn = loop.begin_turn("turn:c", "agent", T0)
    task = asyncio.create_task(loop.run())

    async def wait_two_hours() -> None:
        async with turn.suspended(far):
            pass

    waiter = asyncio.create_task(wait_two_hours())
    await asyncio.sleep(0)
    assert not turn.busy  # suspended: the clock may move
    waiter.cancel()  # its caller left
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert turn.busy and {i.name for i in clock.leases.diagnostics()} == {"turn:c:after-wait"}
    await asyncio.sleep(0.05)
    assert clock.now() < T0 + 60 * S  # no jump to the wake-up nobody waits for
    turn.end()
    await asyncio.wait_for(task, 5)
    assert not clock.leases.held and loop._waiters == {}
