"""`sclated bench rollouts`' figures from a group's trajectories and exports, with a
test double of the gRPC stub (the bench itself runs a real daemon: not a test)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sclate_api.v1 import sclate_pb2 as pb

from sclated.bench._rollouts import GroupProgress, _exports, _trajectory_figures
from tests.capture.test_trainer_exports import group_file


class StubDouble:
    """A test double of the SclateStub: trajectories and export files given up front."""

    def __init__(self, trajectories: dict[str, list[pb.Trajectory]], exports: dict[str, bytes]) -> None:
        self.trajectories = trajectories
        self.exports = exports

    async def StreamTrajectories(self, request: pb.StreamTrajectoriesRequest) -> AsyncIterator[pb.Trajectory]:
        for t in self.trajectories[request.run]:
            yield t

    async def ExportTrajectories(self, request: pb.ExportTrajectoriesRequest) -> AsyncIterator[pb.ExportChunk]:
        data = self.exports[request.format]
        yield pb.ExportChunk(data=data, rows=data.count(b"\n"))


def _t(calls: list[str], reason: str, mask: list[int]) -> pb.Trajectory:
    return pb.Trajectory(call_ids=calls, branch_reason=reason, role="agent", loss_mask=mask)


async def test_shared_prefix_branches_count_once_and_mismatches_are_shared() -> None:
    shared = _t(["p1", "p2"], "new_thread", [1, 1])
    stub = StubDouble(
        {
            "runs/g-0": [shared, _t(["p1", "p2", "a1", "a2"], "new_thread", [1, 1, 1])],
            "runs/g-1": [shared, _t(["b1"], "prefix_mismatch", [1, 0])],
        },
        {},
    )
    figures = await _trajectory_figures(stub, ["runs/g-0", "runs/g-1"], 10)
    assert figures["samples"] == 3 and figures["calls"] == 5
    assert figures["prefix_mismatch_share"] == 0.2  # one of five calls started a branch that way
    assert figures["trainable_tokens"] == 2 + 3 + 1


async def test_export_valid_comes_from_the_trainers_own_validation(tmp_path: Path) -> None:
    good: dict[str, bytes] = {}
    for fmt in ("skyrl", "verl"):
        (tmp_path / fmt).mkdir()
        good[fmt] = group_file(tmp_path / fmt, fmt).read_bytes()
    valid, checked_by, detail = await _exports(StubDouble({}, good), "g1", tmp_path)
    assert valid and checked_by == ["sclate", "skyrl", "verl"], detail
    rows = [json.loads(line) for line in good["skyrl"].decode().splitlines()]
    rows[0]["loss_masks"] = rows[0]["loss_masks"][:-1]
    broken: dict[str, Any] = {**good, "skyrl": "".join(json.dumps(r) + "\n" for r in rows).encode()}
    valid, _, detail = await _exports(StubDouble({}, broken), "g2", tmp_path)
    assert not valid, detail
    valid, _, detail = await _exports(StubDouble({}, {"skyrl": b"", "verl": b""}), "g3", tmp_path)
    assert not valid and detail["skyrl"]["rows"] == 0


def test_a_branch_runs_once_it_fires_an_event_the_source_did_not() -> None:
    progress = GroupProgress({"day01/r1", "day02/r1"})
    progress.fired("runs/g-0", "day02/r1", 0.5)  # the snapshot's own event: not yet running
    progress.fired("runs/g-0", "day02/r2", 3.0)
    progress.fired("runs/g-1", "day02/r2", 4.0)
    progress.fired("runs/g-0", "day03/r1", 9.0)  # later fires change nothing
    progress.ended("runs/g-0", "SUCCEEDED", 20.0)
    progress.ended("runs/g-1", "FAILED", 25.0)
    figures = progress.figures(2)
    assert figures["branch_s"] == 4.0 and figures["group_wall_s"] == 25.0
    assert figures["runs_succeeded"] == 1 and figures["run_states"] == {"SUCCEEDED": 1, "FAILED": 1}
    # A run that never got running leaves branch_s unknown, not the others' maximum.
    assert GroupProgress(set()).figures(1)["branch_s"] is None
    progress.fired("runs/g-2", "day01/r1", 1.0)
    assert progress.figures(3)["branch_s"] is None
