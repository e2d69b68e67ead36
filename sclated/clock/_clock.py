"""The hybrid simulated clock.

Simulated time is integer nanoseconds since the Unix epoch and never goes
backwards. In every mode but DISCRETE it flows at ``rate`` times wall time; in
HYBRID and DISCRETE it also *jumps* forward when no lease is held (the run
loop decides when, after a settle window, and never past the next due event).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sclated.clock._leases import LeaseTable
from sclated.errors import FailedPrecondition, InvalidArgument

__all__ = ["MAX_SIM_NS", "ClockConfig", "ClockMode", "Jump", "SimClock", "TimePublisher"]

TimePublisher = Callable[[int], Awaitable[None]]
MAX_SIM_NS = 2**63 - 1
"""The latest simulated time a run can hold: its times are stored as 64-bit integers."""


class ClockMode(enum.Enum):
    HYBRID = "hybrid"
    """Flows at wall rate; jumps to the next event when nothing is busy."""
    REALTIME = "realtime"
    """Flows at ``rate`` times wall rate; never jumps."""
    DISCRETE = "discrete"
    """Stands still; jumps from event to event (replay, oracle runs)."""


@dataclass(frozen=True, slots=True)
class ClockConfig:
    mode: ClockMode = ClockMode.HYBRID
    start_ns: int = 0
    rate: float = 1.0
    settle_passes: int = 2
    """Event-loop passes with nothing busy before a jump (looptime's lesson:
    a waiter that is about to register must get the chance to)."""

    def __post_init__(self) -> None:
        if self.start_ns < 0:
            raise InvalidArgument(f"clock start must not be negative, got {self.start_ns}", field="start_ns")
        if not self.rate > 0:
            raise InvalidArgument(f"clock rate must be positive, got {self.rate}", field="rate")
        if self.settle_passes < 0:
            raise InvalidArgument("settle_passes must not be negative", field="settle_passes")


@dataclass(frozen=True, slots=True)
class Jump:
    from_ns: int
    to_ns: int
    wall_ns: int

    @property
    def skipped_ns(self) -> int:
        return self.to_ns - self.from_ns


class SimClock:
    def __init__(
        self,
        config: ClockConfig,
        *,
        leases: LeaseTable | None = None,
        wall: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.config = config
        self.mode = config.mode
        self.leases = leases if leases is not None else LeaseTable(wall=wall)
        self._wall = wall
        self._anchor_sim = config.start_ns
        self._anchor_wall = wall()
        self._last = config.start_ns
        self._publishers: list[TimePublisher] = []
        self._jump_listeners: list[Callable[[Jump], None]] = []
        self.jumps = 0
        self.skipped_ns = 0
        self.start_wall_ns = self._anchor_wall

    @property
    def mode_name(self) -> str:
        return self.mode.value

    @property
    def rate(self) -> float:
        return self.config.rate

    @property
    def flows(self) -> bool:
        return self.mode is not ClockMode.DISCRETE

    def now(self) -> int:
        if self.mode is ClockMode.DISCRETE:
            return self._last
        elapsed = self._wall() - self._anchor_wall
        t = self._anchor_sim + (elapsed if self.config.rate == 1.0 else int(elapsed * self.config.rate))
        # Monotone even if the wall source stutters.
        if t < self._last:
            return self._last
        self._last = t
        return t

    def wall_until(self, sim_ns: int) -> int | None:
        """Wall nanoseconds until the flowing clock reaches ``sim_ns`` (None if it never will)."""
        if not self.flows:
            return None
        delta = sim_ns - self.now()
        if delta <= 0:
            return 0
        return delta if self.config.rate == 1.0 else int(delta / self.config.rate) + 1

    def can_jump(self) -> bool:
        return self.mode is not ClockMode.REALTIME and not self.leases.held

    def jump_to(self, target_ns: int) -> Jump | None:
        """Move simulated time forward to ``target_ns``; a target at or before now is a no-op."""
        if self.mode is ClockMode.REALTIME:
            raise FailedPrecondition("a REALTIME clock never jumps", reason="CLOCK_MODE")
        if self.leases.held:
            holders = ", ".join(f"{i.name} ({i.holder})" for i in self.leases.diagnostics())
            raise FailedPrecondition(f"cannot jump while leases are held: {holders}", reason="LEASE_HELD")
        now = self.now()
        if target_ns <= now:
            return None
        wall = self._wall()
        self._anchor_sim = target_ns
        self._anchor_wall = wall
        self._last = target_ns
        jump = Jump(now, target_ns, wall)
        self.jumps += 1
        self.skipped_ns += jump.skipped_ns
        for listener in self._jump_listeners:
            listener(jump)
        return jump

    def set_time(self, sim_ns: int) -> None:
        """Place the clock at ``sim_ns`` without counting a jump (resume after a restart)."""
        if sim_ns < self._last:
            raise InvalidArgument(f"the clock never goes backwards: {sim_ns} < {self._last}", field="sim_ns")
        self._anchor_sim = sim_ns
        self._anchor_wall = self._wall()
        self._last = sim_ns

    # -- publication to sandboxes -------------------------------------------
    def add_publisher(self, publisher: TimePublisher) -> None:
        """Awaited with the new time after every jump, before any event at that time is dispatched."""
        self._publishers.append(publisher)

    def remove_publisher(self, publisher: TimePublisher) -> None:
        if publisher in self._publishers:
            self._publishers.remove(publisher)

    def add_jump_listener(self, listener: Callable[[Jump], None]) -> None:
        self._jump_listeners.append(listener)

    async def publish(self) -> None:
        if not self._publishers:
            return
        t = self.now()
        for publisher in list(self._publishers):
            await publisher(t)
