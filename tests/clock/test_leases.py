"""LeaseTable: counting, TTL and heartbeats, expiry reports, busy time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sclated.clock import LeaseChange, LeaseTable
from sclated.errors import InvalidArgument


class FakeWall:
    def __init__(self, start: int = 1_000) -> None:
        self.t = start

    def __call__(self) -> int:
        return self.t


def test_counted_and_named() -> None:
    table = LeaseTable(wall=FakeWall())
    a1 = table.acquire("model-call", "agent")
    a2 = table.acquire("model-call", "memory")
    b = table.acquire("cron", "cron:nightly")
    assert table.held and len(table) == 3
    assert table.counts() == {"model-call": 2, "cron": 1}
    assert table.release(a1) is True
    assert table.release(a1) is False  # a second release is a no-op
    assert table.counts() == {"model-call": 1, "cron": 1}
    table.release(a2)
    table.release(b)
    assert not table.held and table.counts() == {}
    assert not table.is_held(b)


def test_bad_acquire_is_rejected() -> None:
    table = LeaseTable()
    with pytest.raises(InvalidArgument):
        table.acquire("", "h")
    with pytest.raises(InvalidArgument):
        table.acquire("n", "")
    with pytest.raises(InvalidArgument):
        table.acquire("n", "h", ttl_ns=0)
    assert not table.held


def test_diagnostics_name_holders_oldest_first() -> None:
    wall = FakeWall()
    table = LeaseTable(wall=wall)
    table.acquire("turn", "agent", sim_ns=5)
    wall.t += 10
    table.acquire("call", "memory", ttl_ns=100)
    diag = table.diagnostics()
    assert [(d.name, d.holder) for d in diag] == [("turn", "agent"), ("call", "memory")]
    assert diag[0].acquired_sim_ns == 5 and diag[0].expires_wall_ns is None
    assert diag[1].expires_wall_ns == wall.t + 100


def test_expire_releases_and_reports_only_overdue_leases() -> None:
    wall = FakeWall()
    table = LeaseTable(wall=wall)
    short = table.acquire("short", "leaky-tool", ttl_ns=100)
    long = table.acquire("long", "agent", ttl_ns=1_000)
    forever = table.acquire("forever", "daemon")
    assert table.next_expiry_wall_ns() == wall.t + 100
    assert table.expire(wall.t + 99) == []
    expired = table.expire(wall.t + 100)
    assert [(e.info.name, e.info.holder, e.expired_wall_ns) for e in expired] == [
        ("short", "leaky-tool", wall.t + 100)
    ]
    assert not table.is_held(short) and table.is_held(long) and table.is_held(forever)
    assert table.release(short) is False
    assert table.next_expiry_wall_ns() == wall.t + 1_000


def test_heartbeat_pushes_the_deadline_out() -> None:
    wall = FakeWall()
    table = LeaseTable(wall=wall)
    lease = table.acquire("turn", "agent", ttl_ns=100)
    wall.t += 80
    assert table.heartbeat(lease)
    wall.t += 80
    assert table.expire() == []
    assert table.heartbeat(lease, ttl_ns=10)
    wall.t += 11
    (gone,) = table.expire()
    assert gone.info.heartbeats == 2
    assert table.heartbeat(lease) is False


def test_default_ttl_applies() -> None:
    wall = FakeWall()
    table = LeaseTable(wall=wall, default_ttl_ns=50)
    table.acquire("x", "y")
    wall.t += 50
    assert len(table.expire()) == 1
    assert not table.held


def test_listeners_see_every_change_with_the_count() -> None:
    wall = FakeWall()
    table = LeaseTable(wall=wall)
    seen: list[LeaseChange] = []
    table.add_listener(seen.append)
    a = table.acquire("a", "h", ttl_ns=5)
    b = table.acquire("b", "h")
    table.heartbeat(b)
    table.release(b)
    wall.t += 5
    table.expire()
    assert not table.is_held(a)
    assert [(c.kind, c.lease.name, c.held_count) for c in seen] == [
        ("acquired", "a", 1),
        ("acquired", "b", 2),
        ("heartbeat", "b", 2),
        ("released", "b", 1),
        ("expired", "a", 0),
    ]


def test_busy_time_counts_overlaps_once() -> None:
    wall = FakeWall()
    table = LeaseTable(wall=wall)
    a = table.acquire("a", "h")
    wall.t += 10
    b = table.acquire("b", "h")
    wall.t += 5
    table.release(a)
    wall.t += 5
    assert table.busy_ns() == 20  # the current stretch counts
    table.release(b)
    wall.t += 100  # idle: not busy
    assert table.busy_ns() == 20
    c = table.acquire("c", "h")
    wall.t += 7
    table.release(c)
    assert table.busy_ns() == 27


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["acq", "rel", "tick", "expire", "beat"]), st.integers(1, 50)),
        max_size=40,
    )
)
def test_busy_time_is_the_union_of_held_intervals(ops: list[tuple[str, int]]) -> None:
    wall = FakeWall()
    table = LeaseTable(wall=wall)
    leases = []
    busy = 0
    for op, n in ops:
        if op == "acq":
            leases.append(table.acquire("l", "h", ttl_ns=n * 3))
        elif op == "rel" and leases:
            table.release(leases.pop(n % len(leases)))
        elif op == "tick":
            if table.held:
                busy += n
            wall.t += n
        elif op == "expire":
            for e in table.expire():
                assert e.info.expires_wall_ns is not None and e.info.expires_wall_ns <= wall.t
            assert all(
                i.expires_wall_ns is None or i.expires_wall_ns > wall.t for i in table.diagnostics()
            )
        elif leases:
            table.heartbeat(leases[n % len(leases)])
        assert table.busy_ns() == busy
        assert table.held == bool(table.diagnostics())
