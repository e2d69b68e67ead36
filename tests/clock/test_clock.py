"""SimClock: modes, jumps, monotonicity, and the lease rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sclated.clock import ClockConfig, ClockMode, Jump, LeaseTable, SimClock
from sclated.errors import FailedPrecondition, InvalidArgument


class FakeWall:
    """A wall clock the test moves by hand."""

    def __init__(self, start: int = 1_000_000) -> None:
        self.t = start

    def __call__(self) -> int:
        return self.t


def make(mode: ClockMode, *, start: int = 0, rate: float = 1.0) -> tuple[SimClock, FakeWall]:
    wall = FakeWall()
    return SimClock(ClockConfig(mode=mode, start_ns=start, rate=rate), wall=wall), wall


def test_hybrid_flows_at_wall_rate() -> None:
    clock, wall = make(ClockMode.HYBRID, start=500)
    assert clock.now() == 500
    wall.t += 1_234
    assert clock.now() == 1_734
    assert clock.wall_until(2_000) == 266
    assert clock.wall_until(100) == 0
    assert clock.flows


@pytest.mark.parametrize("rate", [0.5, 2.0, 60.0])
def test_realtime_scales_by_rate(rate: float) -> None:
    clock, wall = make(ClockMode.REALTIME, start=0, rate=rate)
    wall.t += 1_000_000
    assert clock.now() == int(1_000_000 * rate)
    target = clock.now() + 3_000_000
    wait = clock.wall_until(target)
    assert wait is not None
    wall.t += wait
    assert clock.now() >= target  # waiting the returned wall time is enough
    wall.t -= 2
    assert clock.now() >= target  # and never goes back


def test_realtime_never_jumps() -> None:
    clock, _ = make(ClockMode.REALTIME)
    assert not clock.can_jump()
    with pytest.raises(FailedPrecondition):
        clock.jump_to(10)


def test_discrete_stands_still_and_jumps() -> None:
    clock, wall = make(ClockMode.DISCRETE, start=7)
    wall.t += 10**9
    assert clock.now() == 7
    assert clock.wall_until(100) is None
    assert not clock.flows
    jump = clock.jump_to(100)
    assert jump == Jump(7, 100, wall.t)
    assert jump.skipped_ns == 93
    wall.t += 10**9
    assert clock.now() == 100
    assert (clock.jumps, clock.skipped_ns) == (1, 93)


def test_jump_to_the_past_or_present_is_a_noop() -> None:
    clock, _ = make(ClockMode.HYBRID, start=50)
    seen: list[Jump] = []
    clock.add_jump_listener(seen.append)
    assert clock.jump_to(50) is None
    assert clock.jump_to(10) is None
    assert clock.now() == 50
    assert clock.jumps == 0 and not seen


def test_hybrid_jump_then_flows_from_the_target() -> None:
    clock, wall = make(ClockMode.HYBRID, start=0)
    seen: list[Jump] = []
    clock.add_jump_listener(seen.append)
    wall.t += 10
    clock.jump_to(1_000)
    wall.t += 5
    assert clock.now() == 1_005
    assert seen == [Jump(10, 1_000, wall.t - 5)]


def test_no_jump_while_a_lease_is_held() -> None:
    clock, _ = make(ClockMode.HYBRID)
    lease = clock.leases.acquire("agent-turn", "agent")
    assert not clock.can_jump()
    with pytest.raises(FailedPrecondition) as info:
        clock.jump_to(10**9)
    assert info.value.reason == "LEASE_HELD"
    assert "agent-turn" in str(info.value) and "agent" in str(info.value)
    assert clock.now() == 0 and clock.jumps == 0
    clock.leases.release(lease)
    assert clock.can_jump()
    assert clock.jump_to(10**9) is not None


def test_discrete_no_jump_while_a_lease_is_held() -> None:
    clock, _ = make(ClockMode.DISCRETE)
    clock.leases.acquire("x", "y")
    with pytest.raises(FailedPrecondition):
        clock.jump_to(5)


def test_set_time_moves_without_counting_a_jump_and_never_backwards() -> None:
    clock, _ = make(ClockMode.DISCRETE, start=10)
    clock.set_time(40)
    assert clock.now() == 40 and clock.jumps == 0
    with pytest.raises(InvalidArgument):
        clock.set_time(39)


def test_shared_lease_table_is_used() -> None:
    table = LeaseTable()
    clock = SimClock(ClockConfig(), leases=table)
    assert clock.leases is table


@pytest.mark.parametrize(
    "kwargs", [{"start_ns": -1}, {"rate": 0.0}, {"rate": -2.0}, {"settle_passes": -1}]
)
def test_bad_config_is_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidArgument):
        ClockConfig(**kwargs)  # type: ignore[arg-type]


async def test_publishers_see_the_time_after_a_jump() -> None:
    clock, _ = make(ClockMode.DISCRETE)
    got: list[int] = []

    async def publish(t: int) -> None:
        got.append(t)

    clock.add_publisher(publish)
    clock.jump_to(42)
    await clock.publish()
    clock.remove_publisher(publish)
    clock.remove_publisher(publish)  # removing twice is harmless
    clock.jump_to(43)
    await clock.publish()
    assert got == [42]


@settings(max_examples=200, deadline=None)
@given(
    mode=st.sampled_from([ClockMode.HYBRID, ClockMode.DISCRETE, ClockMode.REALTIME]),
    rate=st.sampled_from([1.0, 0.25, 3.0]),
    steps=st.lists(
        st.tuples(st.sampled_from(["wall", "jump", "lease", "unlease"]), st.integers(-50, 10_000)),
        max_size=40,
    ),
)
def test_clock_never_goes_backwards(
    mode: ClockMode, rate: float, steps: list[tuple[str, int]]
) -> None:
    """Whatever the wall clock does (including stutters backwards) and whatever jumps are asked."""
    clock, wall = make(mode, start=100, rate=rate)
    last = clock.now()
    leases = []
    for op, n in steps:
        if op == "wall":
            wall.t += n
        elif op == "jump":
            if clock.can_jump():
                before = clock.now()
                jump = clock.jump_to(before + n)
                if n > 0:
                    assert jump is not None and clock.now() == before + n
                else:
                    assert jump is None
            elif mode is not ClockMode.REALTIME:
                with pytest.raises(FailedPrecondition):
                    clock.jump_to(clock.now() + n)
        elif op == "lease":
            leases.append(clock.leases.acquire("l", "h"))
        elif leases:
            clock.leases.release(leases.pop())
        now = clock.now()
        assert now >= last
        if mode is ClockMode.DISCRETE and op == "wall":
            assert now == last
        last = now
