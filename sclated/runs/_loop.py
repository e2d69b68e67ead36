"""The run loop: one scheduler, one clock, the executors of effects.

Each pass it expires leaked leases, fires whatever is due, and otherwise
either jumps the clock (nothing busy, after a settle window) or waits for the
next due time, a lease change or an input, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sclated.clock import ExpiredLease, Jump, Lease, LeaseChange, SimClock, WallLedger
from sclated.errors import FailedPrecondition, InvalidArgument
from sclated.scheduler import (
    At,
    Effect,
    EventSpec,
    FireRecord,
    InputRecord,
    MutateWorld,
    Priority,
    Scheduler,
    StopRun,
    Wake,
)

__all__ = ["EffectExecutor", "RunLoop", "RunObserver", "RunSummary", "Turn"]

# What the loop's own dispatch leases count as in the wall-time ledger.
_DISPATCH_WORK = {"agent_control": "session_control", "save_snapshot": "snapshot"}

EffectExecutor = Callable[[FireRecord, Effect], Awaitable[None] | None]
"""Executes one effect. Return None for work done at once; an awaitable for
work the loop must finish (under a dispatch lease) before the next fire. Long
work (an agent turn) belongs in a task that holds its own lease."""


class RunObserver(Protocol):
    def on_fire(self, record: FireRecord, wall_ns: int) -> None: ...
    def on_jump(self, jump: Jump) -> None: ...
    def on_lease(self, change: LeaseChange) -> None: ...
    def on_input(self, record: InputRecord) -> None: ...


@dataclass(slots=True)
class RunSummary:
    reason: str
    fires: int
    scheduled: int
    in_order: bool
    unfired: list[str]
    start_ns: int
    end_ns: int
    wall_ns: int
    busy_ns: int
    jumps: int
    skipped_ns: int
    expired_leases: list[ExpiredLease] = field(default_factory=list)

    @property
    def sim_span_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def compression_ratio(self) -> float:
        return self.sim_span_ns / self.wall_ns if self.wall_ns else 0.0

    @property
    def compression_limit(self) -> float:
        """Simulated span over busy time: what a loop with zero overhead would reach."""
        return self.sim_span_ns / self.busy_ns if self.busy_ns else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "events_fired": self.fires,
            "events_scheduled": self.scheduled,
            "in_order": self.in_order,
            "unfired": self.unfired,
            "sim_span_s": self.sim_span_ns / 1e9,
            "wall_s": self.wall_ns / 1e9,
            "busy_s": self.busy_ns / 1e9,
            "compression_ratio": self.compression_ratio,
            "compression_limit": self.compression_limit if self.busy_ns else None,
            "jumps": self.jumps,
            "expired_leases": [{"name": e.info.name, "holder": e.info.holder} for e in self.expired_leases],
        }


class Turn:
    """The agent's work on one delivered message: busy (a lease held) until it ends.

    A wait inside the turn reads ``async with turn.suspended(until) as woke:``:
    the wake-up event is registered before the lease is let go, so the clock
    can never jump past it, and when the wake-up fires the loop takes the
    turn's lease again *at that fire*, before anything else can jump the clock.
    """

    def __init__(self, loop: RunLoop, name: str, holder: str, sim_ns: int) -> None:
        self._loop = loop
        self.name = name
        self.holder = holder
        self.lease: Lease | None = loop.leases.acquire(name, holder, sim_ns=sim_ns, kind="turn")
        self.waits = 0
        self._ended = False

    @property
    def busy(self) -> bool:
        return self.lease is not None and self._loop.leases.is_held(self.lease)

    @contextlib.asynccontextmanager
    async def suspended(self, until_ns: int, *, past_is_now: bool = False) -> AsyncIterator[int]:
        """Let the clock move until ``until_ns`` (simulated); yields the time it woke at.
        ``past_is_now``: see :meth:`RunLoop.wake_at`."""
        if self.lease is None:
            raise FailedPrecondition(f"turn {self.name!r} has ended; it cannot wait", reason="TURN_ENDED")
        self.waits += 1
        lease, self.lease = self.lease, None
        try:
            woke, self.lease = await self._loop.wake_at(
                until_ns,
                release=lease,
                reacquire=(f"{self.name}:after-wait", self.holder, "turn"),
                waiter=self.holder,
                past_is_now=past_is_now,
            )
        except BaseException:
            if self._loop.leases.is_held(lease):
                self.lease = lease  # refused before it let go: the turn keeps its lease
            elif not self._ended:
                # The wait was called off (its caller went away: the control socket closed
                # mid-wait): the turn goes on, so it is busy again from now, not when the
                # wake-up would have come (the clock must not jump while the agent works).
                self.lease = self._loop.leases.acquire(
                    f"{self.name}:after-wait", self.holder, sim_ns=self._loop.clock.now(), kind="turn"
                )
            raise
        yield woke

    def end(self) -> None:
        """Release the turn's lease (idempotent)."""
        self._ended = True
        lease, self.lease = self.lease, None
        if lease is not None:
            self._loop.leases.release(lease)


class RunLoop:
    def __init__(
        self,
        scheduler: Scheduler,
        clock: SimClock,
        executor: EffectExecutor,
        *,
        end_ns: int | None = None,
        observer: RunObserver | None = None,
        stop_when_idle: bool = True,
        ledger: WallLedger | None = None,
    ) -> None:
        if clock.now() != scheduler.now_ns and scheduler.now_ns > clock.now():
            raise InvalidArgument("the clock starts before the scheduler's time", field="clock")
        self.scheduler = scheduler
        self.clock = clock
        self.leases = clock.leases
        self._executor = executor
        self._end_ns = end_ns
        self._observer = observer
        self._stop_when_idle = stop_when_idle
        self.ledger = ledger if ledger is not None else WallLedger(clock.leases, priority=())
        """Where the loop's wall time goes (publication, settle, waiting, dispatch)."""
        self._changed = asyncio.Event()
        self._stop_reason: str | None = None
        self._waiters: dict[str, asyncio.Future[int]] = {}
        self._reacquire: dict[str, tuple[str, str, str]] = {}
        self._reacquired: dict[str, Lease] = {}
        self._wait_ids = itertools.count(1)
        self._expired: list[ExpiredLease] = []
        self._last_fire_key: tuple[int, int, int, int] | None = None
        self._in_order = True
        self._running = False
        self.leases.add_listener(self._on_lease)
        if observer is not None:
            clock.add_jump_listener(observer.on_jump)

    # -- outside world --------------------------------------------------------
    def wake(self) -> None:
        """Tell the loop something changed (an input, a lease, a stop request)."""
        self._changed.set()

    def request_stop(self, reason: str) -> None:
        if self._stop_reason is None:
            self._stop_reason = reason
        self.wake()

    def apply_action(self, actor: str, kind: str, data: dict[str, Any] | None = None) -> InputRecord:
        self.scheduler.advance(self.clock.now())
        rec = self.scheduler.apply_action(actor, kind, data)
        self._after_input(rec)
        return rec

    def apply_world(self, changes: dict[str, Any]) -> InputRecord:
        self.scheduler.advance(self.clock.now())
        rec = self.scheduler.apply_world(changes)
        self._after_input(rec)
        return rec

    def apply_grade(self, check_id: str, outcome: Any) -> InputRecord:
        self.scheduler.advance(self.clock.now())
        rec = self.scheduler.apply_grade(check_id, outcome)
        self._after_input(rec)
        return rec

    def register(self, specs: list[EventSpec], *, now_ns: int | None = None) -> InputRecord:
        """Register events (journaled); ``now_ns``: the time their triggers were checked
        against (read once by the caller; the flowing clock would be later)."""
        return self._register_at(self.clock.now() if now_ns is None else now_ns, specs)

    def _register_at(self, now: int, specs: list[EventSpec]) -> InputRecord:
        self.scheduler.advance(now)
        self.scheduler.register(specs)
        rec = self.scheduler.journal[-1]
        assert isinstance(rec, InputRecord)
        self._after_input(rec)
        return rec

    def _after_input(self, rec: InputRecord) -> None:
        if self._observer is not None:
            self._observer.on_input(rec)
        self.wake()

    async def sleep_until(
        self, sim_ns: int, *, lease: Lease | None = None, waiter: str = "agent", past_is_now: bool = False
    ) -> int:
        """Register a wake-up at ``sim_ns``, release ``lease``, and return when it fires."""
        woke, _ = await self.wake_at(sim_ns, release=lease, waiter=waiter, past_is_now=past_is_now)
        return woke

    async def wake_at(
        self,
        sim_ns: int,
        *,
        release: Lease | None = None,
        reacquire: tuple[str, str, str] | None = None,
        waiter: str = "agent",
        past_is_now: bool = False,
    ) -> tuple[int, Lease | None]:
        """Register a wake-up at ``sim_ns``, then release ``release``; return when it fires.

        The wake event is registered *before* the lease is released, so the
        clock can never jump past it (Temporal's lesson: skipping before the
        waiter is registered). ``reacquire`` = (name, holder, kind): a lease the
        loop takes when the wake-up fires, before it dispatches or jumps again,
        so the waiter is busy again from that very instant; it is returned.
        A time before now is refused, unless ``past_is_now``: then it wakes at now
        (an agent's wait, whose time was read from a clock that has flowed on since).
        """
        now = self.clock.now()
        if sim_ns < now:
            if not past_is_now:
                raise InvalidArgument(f"wake-up time {sim_ns} is before now ({now})", field="until")
            sim_ns = now
        wait_id = f"wake:{waiter}:{next(self._wait_ids)}"
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters[wait_id] = fut
        if reacquire is not None:
            self._reacquire[wait_id] = reacquire
        try:
            # Validated against the same `now` as above: a flowing clock read a
            # second time would already be past a wake-up asked for "now".
            spec = EventSpec(wait_id, At(sim_ns), (Wake(wait_id),), priority=Priority.HIGH)
            self._register_at(now, [spec])
            if release is not None:
                self.leases.release(release)
            woke = await fut
            return woke, self._reacquired.pop(wait_id, None)
        except BaseException:
            taken = self._reacquired.pop(wait_id, None)
            if taken is not None:
                self.leases.release(taken)
            raise
        finally:
            self._waiters.pop(wait_id, None)
            self._reacquire.pop(wait_id, None)
            # One waiter fewer may make the run idle: let the loop look again.
            self.wake()

    def begin_turn(self, name: str, holder: str, sim_ns: int) -> Turn:
        """A turn that is busy from now (its lease taken at once, so the clock cannot jump)."""
        return Turn(self, name, holder, sim_ns)

    # -- the loop ---------------------------------------------------------------
    def _on_lease(self, change: LeaseChange) -> None:
        if self._observer is not None:
            self._observer.on_lease(change)
        if change.held_count == 0 or change.kind == "acquired":
            self._changed.set()

    async def run(self) -> RunSummary:
        if self._running:
            raise FailedPrecondition("this run loop is already running")
        self._running = True
        start_ns = self.clock.now()
        start_wall = time.monotonic_ns()
        busy_start = self.leases.busy_ns()
        settle = 0
        passes_since_yield = 0
        reason = "stopped"
        # Locals: this loop runs once per fire and several times per jump.
        sched = self.scheduler
        clock = self.clock
        leases = self.leases
        end_ns = self._end_ns
        settle_passes = clock.config.settle_passes
        ledger = self.ledger
        try:
            while True:
                if self._stop_reason is not None:
                    reason = self._stop_reason
                    break
                if leases.held:
                    self._expire()
                now = clock.now()
                if end_ns is not None and now >= end_ns and not self._due_by(end_ns):
                    reason = "end of scenario time"
                    break
                fire = sched.pop_due(now if end_ns is None or now < end_ns else end_ns)
                if fire is not None:
                    if settle:
                        settle = 0
                        ledger.end("settle")
                    await self._dispatch(fire)
                    passes_since_yield += 1
                    if passes_since_yield >= 256:
                        # A long burst of instant fires must still let other tasks run.
                        passes_since_yield = 0
                        await asyncio.sleep(0)
                    continue
                nxt = sched.next_due_ns()
                if end_ns is not None and (nxt is None or nxt > end_ns):
                    nxt = end_ns
                if nxt is None and self._stop_when_idle and not self._waiters and not leases.held:
                    # Idle in any clock mode; but a task just handed a prompt
                    # may be about to take a lease or register a wake-up, so
                    # it gets the same settle window as a jump.
                    if settle < settle_passes:
                        if settle == 0:
                            ledger.begin("settle")
                        settle += 1
                        await asyncio.sleep(0)
                        continue
                    reason = "idle: nothing scheduled and nothing busy"
                    break
                if nxt is not None and clock.can_jump():
                    if settle < settle_passes:
                        # Let tasks that are about to take a lease or register an event run first.
                        if settle == 0:
                            ledger.begin("settle")
                        settle += 1
                        await asyncio.sleep(0)
                        continue
                    settle = 0
                    ledger.end("settle")
                    if clock.jump_to(nxt) is not None:
                        with ledger.segment("time_publication"):
                            await clock.publish()
                    continue
                settle = 0
                ledger.end("settle")
                passes_since_yield = 0
                if leases.held:
                    await self._wait_for_change(nxt)
                else:
                    # Nothing busy and no jump allowed (a REALTIME clock, or a
                    # waiter with nothing scheduled): scenario time passing.
                    with ledger.segment("waiting"):
                        await self._wait_for_change(nxt)
        finally:
            ledger.end("settle")
            self._running = False
        end_wall = time.monotonic_ns()
        return RunSummary(
            reason=reason,
            fires=len(self.scheduler.fires),
            scheduled=self.scheduler.scheduled_count,
            in_order=self._in_order,
            unfired=sorted(p.spec.id for p in self.scheduler.pending()),
            start_ns=start_ns,
            end_ns=self.clock.now(),
            wall_ns=end_wall - start_wall,
            busy_ns=self.leases.busy_ns() - busy_start,
            jumps=self.clock.jumps,
            skipped_ns=self.clock.skipped_ns,
            expired_leases=list(self._expired),
        )

    def _due_by(self, t: int) -> bool:
        nxt = self.scheduler.next_due_ns()
        return nxt is not None and nxt <= t

    def _expire(self) -> None:
        expired = self.leases.expire()
        if expired:
            self._expired.extend(expired)

    async def _wait_for_change(self, nxt: int | None) -> None:
        timeout_ns: int | None = None
        if nxt is not None:
            timeout_ns = self.clock.wall_until(nxt)
        deadline = self.leases.next_expiry_wall_ns()
        if deadline is not None:
            until_expiry = max(0, deadline - time.monotonic_ns())
            timeout_ns = until_expiry if timeout_ns is None else min(timeout_ns, until_expiry)
        self._changed.clear()
        if timeout_ns == 0:
            await asyncio.sleep(0)
            return
        if timeout_ns is None:
            await self._changed.wait()
            return
        # asyncio.timeout rather than wait_for: no extra task per wait, which
        # matters on the path from a released lease to the next jump.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_ns / 1e9):
                await self._changed.wait()

    async def _dispatch(self, fire: FireRecord) -> None:
        key = (fire.fired_ns, fire.priority, fire.source_rank, fire.arrival)
        last = self._last_fire_key
        if last is not None and fire.fired_ns < last[0]:
            self._in_order = False
        self._last_fire_key = key
        if self._observer is not None:
            self._observer.on_fire(fire, time.monotonic_ns())
        for effect in fire.effects:
            if isinstance(effect, Wake):
                fut = self._waiters.get(effect.waiter)
                if fut is not None and not fut.done():
                    again = self._reacquire.pop(effect.waiter, None)
                    if again is not None:
                        name, holder, kind = again
                        self._reacquired[effect.waiter] = self.leases.acquire(
                            name, holder, sim_ns=fire.fired_ns, kind=kind
                        )
                    fut.set_result(fire.fired_ns)
                continue
            if isinstance(effect, MutateWorld):
                continue  # applied by the scheduler itself
            result = self._executor(fire, effect)
            if result is not None:
                lease = self.leases.acquire(
                    f"dispatch:{effect.kind}",
                    fire.event_id,
                    sim_ns=fire.fired_ns,
                    kind=_DISPATCH_WORK.get(effect.kind, "dispatch"),
                )
                try:
                    await result
                finally:
                    self.leases.release(lease)
            if isinstance(effect, StopRun):
                self.request_stop(effect.reason)
