"""The capture sink's lease bookkeeping against a flood of ``call_start`` from a sandbox."""

from __future__ import annotations

import pytest

from sclated.capture import CaptureSink, MemoryRecordStore
from sclated.capture._sink import MAX_CALLS_IN_FLIGHT, MAX_NAME_CHARS
from sclated.clock import LeaseTable
from sclated.errors import InvalidArgument, ResourceExhausted


async def test_call_starts_past_the_in_flight_bound_are_refused_until_calls_end() -> None:
    # Before: every distinct call id took a lease (15 min TTL) and an entry, without
    # bound, so a flood held the run's clock and grew the daemon.
    leases = LeaseTable()
    sink = CaptureSink(MemoryRecordStore(), leases)
    for i in range(MAX_CALLS_IN_FLIGHT):
        assert await sink.on_call_start("r1", {"call_id": f"c{i}", "role": "agent"}) == {"leased": True}
    with pytest.raises(ResourceExhausted) as refused:
        await sink.on_call_start("r1", {"call_id": "one-more", "role": "agent"})
    assert refused.value.reason == "TOO_MANY_CALLS"
    assert len(leases) == MAX_CALLS_IN_FLIGHT
    # A resent call_start of a call in flight is still answered, without a second lease.
    assert await sink.on_call_start("r1", {"call_id": "c0", "role": "agent"}) == {"leased": False}
    # Another run's calls are counted on their own.
    assert await sink.on_call_start("r2", {"call_id": "c0", "role": "agent"}) == {"leased": True}
    assert await sink.on_call_end("r1", {"call_id": "c0"}) == {"released": True}
    assert await sink.on_call_end("r1", {"call_id": "c0"}) == {"released": False}
    assert await sink.on_call_start("r1", {"call_id": "one-more", "role": "agent"}) == {"leased": True}


@pytest.mark.parametrize(
    "msg",
    [
        {"call_id": "c" * (MAX_NAME_CHARS + 1), "role": "agent"},
        {"call_id": "c1", "role": "r" * (MAX_NAME_CHARS + 1)},
        {"call_id": 5, "role": "agent"},
        {"call_id": "c1", "role": ""},
    ],
    ids=["long-call-id", "long-role", "numeric-call-id", "empty-role"],
)
async def test_call_ids_and_roles_that_are_not_short_names_are_refused(msg: dict[str, object]) -> None:
    # Before: a call id of any length named a lease held for 15 minutes.
    leases = LeaseTable()
    sink = CaptureSink(MemoryRecordStore(), leases)
    with pytest.raises(InvalidArgument) as bad:
        await sink.on_call_start("r1", dict(msg))
    assert bad.value.field in ("call_id", "role")
    assert len(leases) == 0
