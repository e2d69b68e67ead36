"""The capture sink's call leases end with what reported the calls: a proxy that died
mid-call (found by `sclated bench faults`: its call's lease stayed held for its 15-minute
TTL, so the run's clock could not jump and the run stalled), or the sandbox closing."""

from __future__ import annotations

from sclated.capture import CaptureSink, MemoryRecordStore
from sclated.clock import LeaseTable


async def test_a_proxy_that_goes_takes_its_calls_leases_with_it() -> None:
    leases = LeaseTable()
    sink = CaptureSink(MemoryRecordStore(), leases)
    proxy, other = object(), object()
    await sink.on_call_start("r", {"call_id": "c1", "role": "agent"}, owner=proxy)
    await sink.on_call_start("r", {"call_id": "c2", "role": "memory"}, owner=proxy)
    await sink.on_call_start("r", {"call_id": "c3", "role": "agent"}, owner=other)
    await sink.on_call_end("r", {"call_id": "c2"})
    assert sorted(leases.counts()) == ["model-call:c1", "model-call:c3"]

    assert sink.release_owned(proxy) == ["c1"]
    assert list(leases.counts()) == ["model-call:c3"]
    assert sink.release_owned(None) == []  # calls reported by nobody known are not anyone's
    # A late call_end for a released call is harmless.
    assert await sink.on_call_end("r", {"call_id": "c1"}) == {"released": False}

    assert sink.release_all() == ["c3"]
    assert not leases.held and sink.active_calls("r") == []
