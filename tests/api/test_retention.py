"""Retention through sclate.v1: what an expired run still answers, and the clear
FAILED_PRECONDITION for what it no longer holds."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.daemon import Daemon, DaemonConfig
from sclated.runs import TERMINAL_STATES, HistoryExpiry, Retention
from tests.api.conftest import Api, synthetic_request
from tests.api.test_api import expect_error
from tests.api.test_snapshots import SLOW, _finish, _run_id, _snapshot_after_first_verdict

S = 1_000_000_000
HOUR_S = 3600


@pytest.fixture
async def hour_api(tmp_path: Path) -> AsyncIterator[Api]:
    """A daemon whose retention is one hour (its own sweeps find nothing that old)."""
    d = Daemon(DaemonConfig(state_dir=tmp_path / "state", listen="127.0.0.1:0", retention="1h"))
    await d.start()
    async with grpc.aio.insecure_channel(d.tcp_address or "") as ch:
        yield Api(d, pb_grpc.SclateStub(ch), ch)
    await d.stop()


async def _sweep_at(api: Api, later_s: float) -> int:
    """Sweep as the daemon would ``later_s`` from now; the expiry time it records."""
    later = time.time_ns() + int(later_s * S)
    expiry = HistoryExpiry(api.daemon.store, Retention(HOUR_S), TERMINAL_STATES, now_ns=lambda: later)
    await expiry.sweep()
    return later


async def _two_hours_later(api: Api) -> int:
    return await _sweep_at(api, 2 * HOUR_S)


async def test_an_expired_run_keeps_its_results_and_refuses_its_history_clearly(hour_api: Api) -> None:
    api = hour_api
    run = await api.create(days=2, events=3)
    events = await api.watch_all(run.name)
    done = await api.stub.GetRun(pb.GetRunRequest(name=run.name))
    assert done.state == pb.SUCCEEDED and not done.history_expired
    # Before: when it will expire, the end time plus the retention.
    assert done.history_expire_time.ToNanoseconds() == done.end_time.ToNanoseconds() + HOUR_S * S
    assert not (await api.stub.GetRun(pb.GetRunRequest(name=run.name))).history_expired

    expired_at = await _two_hours_later(api)

    got = await api.stub.GetRun(pb.GetRunRequest(name=run.name))
    assert got.history_expired and got.history_expire_time.ToNanoseconds() == expired_at
    # Everything `runs get` shows is still there.
    assert got.state == pb.SUCCEEDED and got.results == done.results and got.last_event_seq == events[-1].seq
    assert got.results.score == 1.0 and got.results.rounds_graded == 2
    listed = await api.stub.ListRuns(pb.ListRunsRequest(filter="state=SUCCEEDED"))
    assert [(r.name, r.history_expired) for r in listed.runs] == [(run.name, True)]

    err = await expect_error(api.watch_all(run.name), grpc.StatusCode.FAILED_PRECONDITION)
    assert err["sclate-reason"] == "HISTORY_EXPIRED"
    assert "retention" in err["details"] and f"after_seq >= {events[-1].seq}" in err["details"]
    # Watching on from where the expired events end is fine (nothing more comes).
    assert await api.watch_all(run.name, after=events[-1].seq) == []
    for call in (
        api.stub.StreamTrajectories(pb.StreamTrajectoriesRequest(run=run.name)),
        api.stub.ExportTrajectories(pb.ExportTrajectoriesRequest(run=run.name, format="skyrl")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in call:
                pass
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION, info.value.details()
        assert "retention" in (info.value.details() or "")
        assert dict(info.value.trailing_metadata() or ())["sclate-reason"] == "HISTORY_EXPIRED"
    # Deleting it still works.
    await api.stub.DeleteRun(pb.DeleteRunRequest(name=run.name))
    await expect_error(api.stub.GetRun(pb.GetRunRequest(name=run.name)), grpc.StatusCode.NOT_FOUND)


async def test_a_running_or_recently_ended_run_is_not_expired(hour_api: Api) -> None:
    api = hour_api
    recent = await api.create()
    await api.watch_all(recent.name)
    running = await api.create(days=3, events=2, turn_ms=300)
    await _sweep_at(api, HOUR_S / 2)  # `recent` ended half an hour before this "now"
    assert not (await api.stub.GetRun(pb.GetRunRequest(name=recent.name))).history_expired
    await _two_hours_later(api)
    assert (await api.stub.GetRun(pb.GetRunRequest(name=recent.name))).history_expired
    # A run that has not ended is never expired, however old.
    got_running = await api.stub.GetRun(pb.GetRunRequest(name=running.name))
    assert got_running.state in (pb.PENDING, pb.RUNNING) and not got_running.history_expired
    assert not got_running.HasField("history_expire_time")
    events = await api.watch_all(running.name)  # its whole history, from the start
    assert [e.seq for e in events] == list(range(1, len(events) + 1)) and events[-1].state.state == pb.SUCCEEDED


async def test_without_retention_nothing_expires(api: Api) -> None:
    run = await api.create()
    await api.watch_all(run.name)
    got = await api.stub.GetRun(pb.GetRunRequest(name=run.name))
    assert not got.HasField("history_expire_time") and not got.history_expired
    assert (await api.daemon.manager.history_expiry.sweep()).runs == 0
    assert len(await api.watch_all(run.name)) == got.last_event_seq


async def test_snapshots_outlive_their_runs_history(hour_api: Api) -> None:
    api = hour_api
    source = await _run_id(api, "source", **SLOW)
    snap = await _snapshot_after_first_verdict(api, source, "s1")
    first = await _finish(api, source.name)
    assert first.state == pb.SUCCEEDED
    await _two_hours_later(api)
    assert (await api.stub.GetRun(pb.GetRunRequest(name=source.name))).history_expired
    assert [s.name for s in (await api.stub.ListSnapshots(pb.ListSnapshotsRequest(run=source.name))).snapshots] == [
        snap.name
    ]

    # A branch from the snapshot runs as it would have before the expiry.
    branch = await api.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id="branch"))
    branched = await _finish(api, branch.name)
    assert branched.state == pb.SUCCEEDED and branched.results.score == first.results.score
    assert not branched.history_expired

    # Restored into its own run: journal and calls come back, the old events stay gone.
    expired_through = first.last_event_seq
    await api.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snap.name))
    again = await _finish_after(api, source.name, expired_through)
    assert again.state == pb.SUCCEEDED and not again.history_expired
    assert again.results.rounds_graded == first.results.rounds_graded
    err = await expect_error(api.watch_all(source.name), grpc.StatusCode.FAILED_PRECONDITION)
    assert err["sclate-reason"] == "HISTORY_EXPIRED" and f"1..{expired_through}" in err["details"]
    tail = await api.watch_all(source.name, after=expired_through)
    assert [e.seq for e in tail] == list(range(expired_through + 1, again.last_event_seq + 1))
    assert [e.state.state for e in tail if e.WhichOneof("kind") == "state"][-1] == pb.SUCCEEDED


async def _finish_after(api: Api, name: str, after: int) -> pb.Run:
    await api.watch_all(name, after=after)
    run: pb.Run = await api.stub.GetRun(pb.GetRunRequest(name=name))
    return run


async def _long_run(api: Api) -> tuple[pb.Run, int]:
    """A finished run with more events than one read of the store returns (1000)."""
    run: pb.Run = await api.stub.CreateRun(synthetic_request(days=40, events=5, turn_ms=0))
    events = await api.watch_all(run.name)
    assert len(events) > 1000
    return run, len(events)


@pytest.mark.timeout(60)  # the watch used to spin here forever
async def test_a_watch_whose_events_expire_under_it_ends_with_the_reason(hour_api: Api) -> None:
    api = hour_api
    run, _ = await _long_run(api)
    stream = api.stub.WatchRun(pb.WatchRunRequest(name=run.name))
    got = 0
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in stream:
            got += 1
            if got == 1:
                # The daemon holds the first 1000 in hand; the next read finds them gone.
                await _two_hours_later(api)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "retention" in (info.value.details() or "") and got == 1000


@pytest.mark.timeout(60)
async def test_a_watch_of_a_run_deleted_under_it_ends_with_not_found(api: Api) -> None:
    """It used to spin: the store had nothing after the cursor, the stale row said more was coming."""
    run, _ = await _long_run(api)
    got = 0
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in api.stub.WatchRun(pb.WatchRunRequest(name=run.name)):
            got += 1
            if got == 1:
                await api.stub.DeleteRun(pb.DeleteRunRequest(name=run.name))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND, info.value.details()
    assert got == 1000
