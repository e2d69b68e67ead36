"""K-way branching through sclate.v1: one snapshot, K runs as one group (in-process
daemon, scripted agent, no Docker)."""

from __future__ import annotations

import json
from typing import Any

import grpc
from sclate_api.v1 import sclate_pb2 as pb

from sclated.runs._manager import branch_seed
from tests.api.conftest import Api
from tests.api.test_api import expect_error
from tests.api.test_snapshots import SLOW, _finish, _rounds, _run_id, _snapshot_after_first_verdict
from tests.runs.capture_records import call


async def test_a_group_of_k_branches_from_one_snapshot(api: Api) -> None:
    source = await _run_id(api, "source", **SLOW)
    snap = await _snapshot_after_first_verdict(api, source, "mid")
    src_done = await _finish(api, source.name)
    reply = await api.stub.BranchRun(
        pb.BranchRunRequest(snapshot=snap.name, count=3, group_id="grpo-1", labels={"exp": "k3"})
    )
    assert reply.group == "grpo-1"
    assert [r.name for r in reply.runs] == ["runs/grpo-1-0", "runs/grpo-1-1", "runs/grpo-1-2"]
    assert [r.group_index for r in reply.runs] == [0, 1, 2]
    assert all(r.group == "grpo-1" and r.parent == "runs/source" and r.labels["exp"] == "k3" for r in reply.runs)
    seeds = [r.agent.model.sampling_seed for r in reply.runs]
    assert seeds == [branch_seed("grpo-1", i) for i in range(3)] and len(set(seeds)) == 3

    # Watched as a group: every run's events, each run's in order, until all ended.
    by_run: dict[str, list[int]] = {}
    async for ev in api.stub.WatchGroup(pb.WatchGroupRequest(group="grpo-1")):
        by_run.setdefault(ev.run, []).append(ev.seq)
    assert sorted(by_run) == [r.name for r in reply.runs]
    assert all(seqs == sorted(seqs) and seqs[0] == 1 for seqs in by_run.values())

    listed = await api.stub.ListRuns(pb.ListRunsRequest(filter="group=grpo-1"))
    assert sorted(r.name for r in listed.runs) == [r.name for r in reply.runs]
    for run in listed.runs:
        done = await _finish(api, run.name)
        assert done.state == pb.SUCCEEDED, done.state_reason
        assert _rounds(done) == _rounds(src_done)
    other = await api.stub.ListRuns(pb.ListRunsRequest(filter="group=nope"))
    assert not other.runs


async def test_a_repeated_request_returns_the_same_group_and_bad_ones_are_refused(api: Api) -> None:
    source = await _run_id(api, "src2", **SLOW)
    snap = await _snapshot_after_first_verdict(api, source, "s")
    req = pb.BranchRunRequest(snapshot=snap.name, count=2, request_id="req-1", sampling_seeds=[7, 8])
    first = await api.stub.BranchRun(req)
    again = await api.stub.BranchRun(req)
    assert first.group == again.group and first.group.startswith("g-")
    assert [r.name for r in first.runs] == [r.name for r in again.runs]
    assert [r.agent.model.sampling_seed for r in first.runs] == [7, 8]
    # The same group id without the same request: refused, nothing made.
    err = await expect_error(
        api.stub.BranchRun(pb.BranchRunRequest(snapshot=snap.name, count=2, group_id=first.group)),
        grpc.StatusCode.ALREADY_EXISTS,
    )
    assert "already exists" in err["details"]
    for bad, field in (
        (pb.BranchRunRequest(snapshot=snap.name, count=0), "count"),
        (pb.BranchRunRequest(snapshot=snap.name, count=65), "count"),
        (pb.BranchRunRequest(snapshot=snap.name, count=2, sampling_seeds=[1]), "sampling_seeds"),
        (pb.BranchRunRequest(snapshot=snap.name, count=2, group_id="Bad Id"), "group_id"),
    ):
        err = await expect_error(api.stub.BranchRun(bad), grpc.StatusCode.INVALID_ARGUMENT)
        assert err.get("sclate-field") == field, err
    await expect_error(
        api.stub.BranchRun(pb.BranchRunRequest(snapshot="runs/src2/snapshots/none", count=2)),
        grpc.StatusCode.NOT_FOUND,
    )
    await expect_error(
        api.stub.WatchGroup(pb.WatchGroupRequest(group="nothing-here")).read(), grpc.StatusCode.NOT_FOUND
    )
    for run in first.runs:
        await _finish(api, run.name)


async def test_a_group_exports_its_continuations_with_one_group_key(api: Api) -> None:
    source = await _run_id(api, "gsrc", **SLOW)
    # One agent call before the snapshot: the group's shared prompt state.
    first = call("gsrc", "a1", t=1, prompt=[1, 2, 3], completion=[4, 5])
    assert await api.daemon.store.put_call("local/gsrc", "a1", "agent", first)
    snap = await _snapshot_after_first_verdict(api, source, "s")
    await _finish(api, source.name)
    reply = await api.stub.BranchRun(pb.BranchRunRequest(snapshot=snap.name, count=2, group_id="gx"))
    for i, run in enumerate(reply.runs):
        await _finish(api, run.name)
        # Each member continues the shared exchange its own way.
        cont = call(f"gx-{i}", f"b{i}", t=5, prompt=[1, 2, 3, 4, 5, 9], completion=[20 + i, 30 + i])
        assert await api.daemon.store.put_call(f"local/gx-{i}", f"b{i}", "agent", cont)
    req = pb.ExportTrajectoriesRequest(group="gx", format="verl", reward_mode="run")
    chunks = [c async for c in api.stub.ExportTrajectories(req)]
    rows = [json.loads(line) for line in b"".join(c.data for c in chunks).decode().splitlines()]
    assert chunks[-1].rows == len(rows) == 2
    assert rows[0]["uid"] == rows[1]["uid"]  # one GRPO group: the same prompt state
    assert sorted(r["group"]["index"] for r in rows) == [0, 1] and all(r["group"]["size"] == 2 for r in rows)
    # The prompt is the shared state up to the snapshot; each continuation starts there
    # (the new observation, not trained, then what the member sampled).
    assert all(r["prompts"] == [1, 2, 3, 4, 5] for r in rows)
    assert sorted((r["responses"], r["response_mask"]) for r in rows) == [
        ([9, 20, 30], [0, 1, 1]),
        ([9, 21, 31], [0, 1, 1]),
    ]
    # Exactly one of run and group.
    both = pb.ExportTrajectoriesRequest(run=reply.runs[0].name, group="gx", format="verl")
    await expect_error(_drain(api.stub.ExportTrajectories(both)), grpc.StatusCode.INVALID_ARGUMENT)


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass
