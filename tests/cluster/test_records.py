"""The records a remote worker keeps until the control plane acknowledges them."""

from __future__ import annotations

import asyncio

import pytest

from sclated.cluster import RecordBuffer


def test_records_are_numbered_and_events_take_the_runs_sequence() -> None:
    buf = RecordBuffer(next_event_seq=7)
    buf.journal({"t": "fire", "seq": 0})
    buf.emit("fire", {"event_id": "a"}, 10)
    buf.progress(10)
    buf.emit("turn", {"round_id": "r"}, 20)
    batch = buf.batch(0)
    assert [r.rseq for r in batch.records] == [1, 2, 3, 4]
    assert [r.kind for r in batch.records] == ["journal", "event", "progress", "event"]
    assert [r.data["seq"] for r in batch.records if r.kind == "event"] == [7, 8]


def test_only_acknowledged_records_are_dropped_and_a_lost_answer_is_redelivered() -> None:
    buf = RecordBuffer(1)
    for i in range(5):
        buf.emit("fire", {"i": i}, i)
    first = buf.batch(0, limit=3)
    assert [r.rseq for r in first.records] == [1, 2, 3]
    # The answer was lost (the daemon died before storing it): the same records come again.
    again = buf.batch(0)
    assert [r.rseq for r in again.records] == [1, 2, 3, 4, 5]
    assert again.records[:3] == first.records
    assert buf.ack(3) == 2
    assert [r.rseq for r in buf.batch(0).records] == [4, 5]
    assert buf.batch(0).acked == 3
    with pytest.raises(ValueError, match="past the last record"):
        buf.ack(9)


def test_nothing_comes_after_the_end() -> None:
    buf = RecordBuffer(1)
    buf.end("SUCCEEDED", "all days done", {"score": 1.0})
    with pytest.raises(RuntimeError, match="after the run's end"):
        buf.emit("fire", {}, 0)
    assert buf.batch(0).records[-1].kind == "end"


async def test_a_pull_waits_for_the_next_record() -> None:
    buf = RecordBuffer(1)
    empty = await buf.wait_batch(0, 0.05)
    assert empty.records == []
    pull = asyncio.get_running_loop().create_task(buf.wait_batch(0, 10.0))
    await asyncio.sleep(0.05)
    assert not pull.done()
    buf.emit("fire", {}, 1)
    got = await asyncio.wait_for(pull, 5)
    assert [r.rseq for r in got.records] == [1]
