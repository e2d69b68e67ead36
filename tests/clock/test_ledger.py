"""WallLedger: wall time split by kind of work, overlaps counted once."""

from __future__ import annotations

import pytest

from sclated.clock import LeaseTable, WallLedger
from sclated.errors import InvalidArgument


class FakeWall:
    """Test double for the monotonic clock: moves only when told."""

    def __init__(self) -> None:
        self.t = 1_000

    def __call__(self) -> int:
        return self.t

    def advance(self, ns: int) -> None:
        self.t += ns


def _setup() -> tuple[FakeWall, LeaseTable, WallLedger]:
    wall = FakeWall()
    leases = LeaseTable(wall=wall)
    ledger = WallLedger(leases, priority=["turn", "model_call", "grading"], wall=wall)
    return wall, leases, ledger


def test_time_goes_to_the_kind_in_progress_and_idle_to_the_scheduler() -> None:
    wall, leases, ledger = _setup()
    wall.advance(5)  # nothing held
    turn = leases.acquire("turn:a", "agent", kind="turn")
    wall.advance(100)
    leases.release(turn)
    grade = leases.acquire("grade:a", "bench", kind="grading")
    wall.advance(30)
    leases.release(grade)
    wall.advance(7)
    assert ledger.totals_ns() == {"scheduler": 12, "turn": 100, "grading": 30}
    assert ledger.elapsed_ns() == 142 == sum(ledger.totals_ns().values())


def test_overlapping_work_is_charged_once_to_the_higher_priority() -> None:
    wall, leases, ledger = _setup()
    grade = leases.acquire("grade:a", "bench", kind="grading")
    wall.advance(10)
    call = leases.acquire("model-call:1", "run/agent", kind="model_call")
    wall.advance(40)  # both held: the model call wins
    leases.release(call)
    wall.advance(10)
    leases.release(grade)
    assert ledger.totals_ns() == {"grading": 20, "model_call": 40}


def test_counted_leases_of_one_kind_and_expiry() -> None:
    wall, leases, ledger = _setup()
    a = leases.acquire("turn:a", "x", kind="turn")
    leases.acquire("turn:b", "x", kind="turn", ttl_ns=50)
    wall.advance(20)
    leases.release(a)
    wall.advance(40)
    leases.expire()  # b expired at 50 after its start: still charged until it is noticed
    wall.advance(5)
    assert ledger.totals_ns() == {"turn": 60, "scheduler": 5}


def test_segments_for_work_without_a_lease_and_unknown_kinds_rank_last() -> None:
    wall, leases, ledger = _setup()
    with ledger.segment("time_publication"):
        wall.advance(3)
    ledger.begin("settle")
    wall.advance(2)
    other = leases.acquire("dispatch:x", "y", kind="session_control")
    wall.advance(4)  # settle was seen first, so it outranks session_control
    leases.release(other)
    ledger.end("settle")
    ledger.end("settle")  # a second end is a no-op
    wall.advance(1)
    assert ledger.totals_ns() == {"time_publication": 3, "settle": 6, "scheduler": 1}


def test_a_priority_list_with_a_kind_twice_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="twice"):
        WallLedger(LeaseTable(), priority=["turn", "turn"])
