"""Save / restore / branch through sclate.v1, in-process daemon, scripted agent (no Docker)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from adapters import BenchmarkInfo, ScenarioConfig
from adapters.synthetic import SyntheticBenchmark
from sclated.daemon import Daemon, DaemonConfig
from sclated.runs import default_registry
from sclated.scheduler import After, EventSpec, Priority, SaveSnapshot
from tests.api.conftest import Api, synthetic_request
from tests.api.test_api import expect_error

# Slow enough turns that a snapshot lands while the run is still RUNNING.
SLOW = {"days": 3, "events": 2, "turn_ms": 250}


async def _run_id(api: Api, run_id: str, **kw: Any) -> pb.Run:
    run: pb.Run = await api.stub.CreateRun(synthetic_request(run_id=run_id, **kw), metadata=api.md())
    return run


async def _snapshot_after_first_verdict(api: Api, run: pb.Run, snapshot_id: str) -> pb.Snapshot:
    async for ev in api.stub.WatchRun(pb.WatchRunRequest(name=run.name), metadata=api.md()):
        if ev.WhichOneof("kind") == "verdict":
            snap: pb.Snapshot = await api.stub.SaveSnapshot(
                pb.SaveSnapshotRequest(run=run.name, snapshot_id=snapshot_id), metadata=api.md()
            )
            return snap
        assert ev.WhichOneof("kind") != "state" or ev.state.state in (pb.PENDING, pb.RUNNING)
    raise AssertionError("the run ended without a verdict")


async def _finish(api: Api, name: str) -> pb.Run:
    await api.watch_all(name)
    run: pb.Run = await api.stub.GetRun(pb.GetRunRequest(name=name), metadata=api.md())
    return run


def _rounds(run: pb.Run) -> list[tuple[str, bool, float]]:
    return [(r.round_id, r.graded, r.score) for r in run.results.round_scores]


async def _journal(api: Api, key: str) -> list[dict[str, Any]]:
    return await api.daemon.store.journal(key)


async def test_branch_from_a_mid_run_snapshot_finishes_like_an_uninterrupted_run(api: Api) -> None:
    reference = await _run_id(api, "reference", **SLOW)
    source = await _run_id(api, "source", **SLOW)
    snap = await _snapshot_after_first_verdict(api, source, "after-day0")
    assert snap.name == "runs/source/snapshots/after-day0"
    assert snap.journal_length > 0 and snap.image == ""  # the scripted agent has no sandbox
    assert snap.sim_time.ToNanoseconds() > 0 and snap.create_time.ToNanoseconds() > 0

    ref_done = await _finish(api, reference.name)
    src_done = await _finish(api, source.name)
    assert ref_done.state == src_done.state == pb.SUCCEEDED

    branch = await api.stub.RestoreSnapshot(
        pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id="branch", labels={"exp": "b1"})
    )
    assert branch.name == "runs/branch" and branch.parent == "runs/source"
    assert branch.state == pb.PENDING and branch.labels["exp"] == "b1"
    done = await _finish(api, branch.name)
    assert done.state == pb.SUCCEEDED, done.state_reason
    assert _rounds(done) == _rounds(ref_done) and len(_rounds(done)) == 3
    assert done.results.score == ref_done.results.score
    s, r = done.results.scheduler, ref_done.results.scheduler
    assert s.events_fired == r.events_fired == s.events_scheduled and s.in_order

    # The branch's journal is the source's up to the snapshot, then its own.
    src_journal = await _journal(api, "local/source")
    br_journal = await _journal(api, "local/branch")
    n = snap.journal_length
    assert br_journal[:n] == src_journal[:n] and len(br_journal) > n
    assert [e["seq"] for e in br_journal] == list(range(len(br_journal)))
    # The source is untouched; its snapshot is listed; the branch has none.
    assert (await _journal(api, "local/source")) == src_journal
    listed = await api.stub.ListSnapshots(pb.ListSnapshotsRequest(run=source.name))
    assert [x.name for x in listed.snapshots] == [snap.name]
    assert listed.snapshots[0].journal_length == n
    assert not (await api.stub.ListSnapshots(pb.ListSnapshotsRequest(run=branch.name))).snapshots


async def test_a_snapshot_at_a_turn_boundary_waits_for_the_turn_and_keeps_the_session(api: Api) -> None:
    # A snapshot taken while a turn is in flight cannot hold the agent's session (its
    # branches start a fresh one); at_turn_boundary waits for the turn to end instead.
    run = await _run_id(api, "busy", days=1, events=2, turn_ms=3000)
    async for ev in api.stub.WatchRun(pb.WatchRunRequest(name=run.name), metadata=api.md()):
        if ev.WhichOneof("kind") == "fire" and "deliver_prompt" in ev.fire.effects:
            break
    busy = await api.stub.SaveSnapshot(pb.SaveSnapshotRequest(run=run.name, snapshot_id="busy"), metadata=api.md())
    assert not busy.session_saved
    boundary = await api.stub.SaveSnapshot(
        pb.SaveSnapshotRequest(run=run.name, snapshot_id="boundary", at_turn_boundary=True), metadata=api.md()
    )
    assert boundary.session_saved
    # It came after the turn that was in flight ended: that turn's end is in its journal prefix.
    journal = await _journal(api, "local/busy")
    ends = [e for e in journal[: boundary.journal_length] if '"turn_end"' in json.dumps(e)]
    assert ends and not [e for e in journal[: busy.journal_length] if '"turn_end"' in json.dumps(e)]
    listed = await api.stub.ListSnapshots(pb.ListSnapshotsRequest(run=run.name), metadata=api.md())
    assert [(x.name.rsplit("/", 1)[1], x.session_saved) for x in listed.snapshots] == [
        ("busy", False),
        ("boundary", True),
    ]
    branch = await api.stub.RestoreSnapshot(
        pb.RestoreSnapshotRequest(snapshot=boundary.name, new_run_id="busy-br"), metadata=api.md()
    )
    assert (await _finish(api, branch.name)).state == pb.SUCCEEDED


async def test_restore_into_its_own_run_after_cancel_and_after_failure(api: Api) -> None:
    run = await _run_id(api, "own", **SLOW)
    snap = await _snapshot_after_first_verdict(api, run, "s1")
    cancelled = await api.stub.CancelRun(pb.CancelRunRequest(name=run.name))
    assert cancelled.state == pb.CANCELLED
    before = await api.watch_all(run.name)
    restored = await api.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snap.name))
    assert restored.name == run.name and restored.state == pb.PENDING and restored.parent == ""
    done = await _finish(api, run.name)
    assert done.state == pb.SUCCEEDED, done.state_reason
    assert done.results.rounds_graded == 3 and done.results.score == 1.0
    # The history is kept: new events continue after the last one.
    events = await api.watch_all(run.name)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[: len(before)] == before
    states = [e.state.state for e in events[len(before) :] if e.WhichOneof("kind") == "state"]
    assert states == [pb.PENDING, pb.RUNNING, pb.SUCCEEDED]
    snap_dir = api.daemon.config.state_dir / "runs" / "local" / "own" / "snapshots" / "s1"
    prefix = [json.loads(line) for line in (snap_dir / "journal.jsonl").read_text().splitlines()]
    assert len(prefix) == snap.journal_length
    assert (await _journal(api, "local/own"))[: len(prefix)] == prefix

    # A run that failed after the snapshot: restored, it runs from there (and fails the same way).
    bad = await _run_id(api, "fails", fail_on_round="d1.task1", **SLOW)
    snap2 = await _snapshot_after_first_verdict(api, bad, "s1")
    failed = await _finish(api, bad.name)
    assert failed.state == pb.FAILED and "d1.task1" in failed.state_reason
    full = await _journal(api, "local/fails")
    assert len(full) > snap2.journal_length
    await api.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snap2.name))
    again = await _finish(api, bad.name)
    assert again.state == pb.FAILED and "d1.task1" in again.state_reason
    # Day 0 is graded from the snapshot's journal; the run went on from there.
    assert (again.results.round_scores[0].round_id, again.results.round_scores[0].graded) == ("d0", True)
    assert (await _journal(api, "local/fails"))[: snap2.journal_length] == full[: snap2.journal_length]


async def test_bad_input_changes_nothing(api: Api, tmp_path: Path) -> None:
    run = await _run_id(api, "live", days=4, events=2, turn_ms=400)
    snap = await _snapshot_after_first_verdict(api, run, "one")
    code = grpc.StatusCode
    err = await expect_error(
        api.stub.SaveSnapshot(pb.SaveSnapshotRequest(run=run.name, snapshot_id="one")), code.ALREADY_EXISTS
    )
    assert err["sclate-field"] == "snapshot_id"
    for bad_id in ("One", "x_y", "-a", "a" * 64):
        err = await expect_error(
            api.stub.SaveSnapshot(pb.SaveSnapshotRequest(run=run.name, snapshot_id=bad_id)), code.INVALID_ARGUMENT
        )
        assert err["sclate-field"] == "snapshot_id"
    err = await expect_error(api.stub.SaveSnapshot(pb.SaveSnapshotRequest(run="live")), code.INVALID_ARGUMENT)
    assert err["sclate-field"] == "run"
    await expect_error(api.stub.SaveSnapshot(pb.SaveSnapshotRequest(run="runs/nope")), code.NOT_FOUND)
    # Into its own run while it runs: refused; branch: fine later.
    err = await expect_error(
        api.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snap.name)), code.FAILED_PRECONDITION
    )
    assert "RUNNING" in err["details"]
    for name in ("runs/live/snaps/one", "runs/live", "live/snapshots/one", "runs/Live/snapshots/one"):
        err = await expect_error(
            api.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=name, new_run_id="b")), code.INVALID_ARGUMENT
        )
        assert err["sclate-field"] == "snapshot"
    err = await expect_error(
        api.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot="runs/live/snapshots/nope", new_run_id="b")),
        code.NOT_FOUND,
    )
    assert err["sclate-field"] == "snapshot" and "runs/live/snapshots/nope" in err["details"]
    err = await expect_error(
        api.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id="Bad")), code.INVALID_ARGUMENT
    )
    assert err["sclate-field"] == "new_run_id"
    err = await expect_error(
        api.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id="live")), code.ALREADY_EXISTS
    )
    assert err["sclate-field"] == "new_run_id"
    err = await expect_error(
        api.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snap.name, labels={"a": "b"})),
        code.INVALID_ARGUMENT,
    )
    assert err["sclate-field"] == "labels"
    err = await expect_error(
        api.stub.RestoreSnapshot(
            pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id="b", labels={"Bad Key": "v"})
        ),
        code.INVALID_ARGUMENT,
    )
    done = await _finish(api, run.name)
    assert done.state == pb.SUCCEEDED
    err = await expect_error(
        api.stub.SaveSnapshot(pb.SaveSnapshotRequest(run=run.name, snapshot_id="late")), code.FAILED_PRECONDITION
    )
    assert "SUCCEEDED" in err["details"] and err["sclate-reason"] == "RUN_NOT_RUNNING"
    # Nothing was created or changed by any of it.
    listed = await api.stub.ListRuns(pb.ListRunsRequest())
    assert [r.name for r in listed.runs] == [run.name]
    await expect_error(api.stub.GetRun(pb.GetRunRequest(name="runs/b")), code.NOT_FOUND)
    snaps = await api.stub.ListSnapshots(pb.ListSnapshotsRequest(run=run.name))
    assert [s.name for s in snaps.snapshots] == [snap.name]
    snap_root = api.daemon.config.state_dir / "runs" / "local" / "live" / "snapshots"
    assert sorted(p.name for p in snap_root.iterdir()) == ["one"]
    assert await api.daemon.store.restore_marker("local/b") is None


async def test_other_tenants_snapshots_are_not_found(tenant_api: Callable[[str | None], Api]) -> None:
    alice, bob = tenant_api("alice"), tenant_api("bob")
    run = await _run_id(alice, "mine", **SLOW)
    snap = await _snapshot_after_first_verdict(alice, run, "s")
    code = grpc.StatusCode
    await expect_error(
        bob.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id="stolen"), metadata=bob.md()),
        code.NOT_FOUND,
    )
    await expect_error(bob.stub.ListSnapshots(pb.ListSnapshotsRequest(run=run.name), metadata=bob.md()), code.NOT_FOUND)
    await expect_error(
        bob.stub.SaveSnapshot(pb.SaveSnapshotRequest(run=run.name, snapshot_id="x"), metadata=bob.md()), code.NOT_FOUND
    )
    assert not (await bob.stub.ListRuns(pb.ListRunsRequest(), metadata=bob.md())).runs
    await _finish(alice, run.name)
    branch = await alice.stub.RestoreSnapshot(
        pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id="stolen"), metadata=alice.md()
    )
    assert (await _finish(alice, branch.name)).state == pb.SUCCEEDED


async def _cli(api: Api, *argv: str) -> int:
    from sclate import cli

    # The CLI's client is synchronous; the daemon lives on this loop.
    return await asyncio.to_thread(cli.main, ["--endpoint", api.daemon.tcp_address or "", *argv])


async def test_cli_snapshot_snapshots_restore(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    run = await _run_id(api, "clirun", **SLOW)
    async for ev in api.stub.WatchRun(pb.WatchRunRequest(name=run.name)):
        if ev.WhichOneof("kind") == "verdict":
            break
    assert await _cli(api, "runs", "snapshot", "clirun", "--id", "c1", "--at-turn-boundary", "-o", "json") == 0
    saved = json.loads(capsys.readouterr().out)["snapshots"]
    assert [s["name"] for s in saved] == ["runs/clirun/snapshots/c1"] and int(saved[0]["journal_length"]) > 0
    assert saved[0]["session_saved"] is True
    assert await _cli(api, "runs", "snapshots", "clirun", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["snapshots"] == saved
    assert await _cli(api, "runs", "snapshots", "clirun") == 0
    assert "runs/clirun/snapshots/c1" in capsys.readouterr().out
    args = ("runs", "restore", "clirun/snapshots/c1", "--branch", "clibranch", "--label", "k=v", "-o", "json")
    assert await _cli(api, *args) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["name"] == "runs/clibranch" and made["parent"] == "runs/clirun" and made["labels"] == {"k": "v"}
    assert (await _finish(api, "runs/clibranch")).state == pb.SUCCEEDED
    # Into its own run while it runs: the daemon's FAILED_PRECONDITION, exit 2.
    if (await api.stub.GetRun(pb.GetRunRequest(name=run.name))).state == pb.RUNNING:
        assert await _cli(api, "runs", "restore", "runs/clirun/snapshots/c1") == 2
        assert "FAILED_PRECONDITION" in capsys.readouterr().err
    assert await _cli(api, "runs", "restore", "clirun/c1") == 2
    assert "not a snapshot name" in capsys.readouterr().err
    assert await _cli(api, "runs", "restore", "clirun/snapshots/nope", "--branch", "x") == 2
    assert "NOT_FOUND" in capsys.readouterr().err


class _SnapshotSource:
    """Two scenario snapshots: one labelled at day 0's grade, one unlabelled right after."""

    name = "snapshots"

    def __init__(self) -> None:
        self._given = False

    def poll(self, snapshot: object) -> list[EventSpec]:
        if self._given:
            return []
        self._given = True
        return [
            EventSpec("snap.day0", After(("d0.grade",)), (SaveSnapshot("day0"),), priority=Priority.CONTROL),
            EventSpec("snap.auto", After(("snap.day0",), 1_000_000_000), (SaveSnapshot(),), priority=Priority.CONTROL),
        ]


class _SyntheticWithSnapshots:
    def __init__(self) -> None:
        self._inner = SyntheticBenchmark()

    @property
    def info(self) -> BenchmarkInfo:
        return dataclasses.replace(self._inner.info, name="synthetic-snap")

    def load(self, config: ScenarioConfig) -> Any:
        scenario = self._inner.load(config)
        sources = scenario.sources()
        scenario.sources = lambda: [*sources, _SnapshotSource()]  # type: ignore[method-assign]
        return scenario


async def test_a_scenario_save_snapshot_effect_takes_a_snapshot(tmp_path: Path) -> None:
    registry = default_registry()
    registry.add_benchmark(_SyntheticWithSnapshots())
    d = Daemon(DaemonConfig(state_dir=tmp_path / "state", listen="127.0.0.1:0"), registry=registry)
    await d.start()
    try:
        async with grpc.aio.insecure_channel(d.tcp_address or "") as ch:
            api = Api(d, pb_grpc.SclateStub(ch), ch)
            req = synthetic_request(run_id="scen", days=2, events=2)
            req.run.benchmark.name = "synthetic-snap"
            run = await api.stub.CreateRun(req)
            done = await _finish(api, run.name)
            assert done.state == pb.SUCCEEDED, done.state_reason
            snaps = (await api.stub.ListSnapshots(pb.ListSnapshotsRequest(run=run.name))).snapshots
            assert snaps[0].name == "runs/scen/snapshots/day0"
            assert len(snaps) == 2 and snaps[1].name.startswith("runs/scen/snapshots/snap-")
            assert 0 < snaps[0].journal_length < snaps[1].journal_length
            # The prefix holds the fire that took the snapshot: a restored run does not take it again.
            journal = await d.store.journal("local/scen")
            fired = [e.get("event_id") for e in journal[: snaps[0].journal_length]]
            assert "snap.day0" in fired and "snap.auto" not in fired
            await api.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snaps[0].name))
            again = await _finish(api, run.name)
            assert again.state == pb.SUCCEEDED, again.state_reason
            after = (await api.stub.ListSnapshots(pb.ListSnapshotsRequest(run=run.name))).snapshots
            # Only the unlabelled one was taken again, under a fresh name.
            assert len(after) == 3 and after[2].name == f"{snaps[1].name}-2"
    finally:
        await d.stop()
