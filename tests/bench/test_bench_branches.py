"""`sclated bench branches`: the figures from a run's trajectories (no daemon here)."""

from __future__ import annotations

from typing import Any

from sclated.bench import BENCHES
from sclated.bench._branches import branch_figures


def traj(calls: str, reason: str, role: str = "agent") -> dict[str, Any]:
    return {"call_ids": list(calls), "branch_reason": reason, "role": role}


def test_branch_figures_count_calls_branches_and_mismatched_starts() -> None:
    trajectories = [
        # One session of three calls whose third was re-run from the second (a fork).
        traj("abc", "new_thread"),
        traj("abd", "fork"),
        # A session broken twice: each break is a call that starts a branch.
        traj("ef", "prefix_mismatch"),
        traj("gh", "prefix_mismatch"),
        # A root with a fork under it: its own reason is on the branch of its first children.
        traj("ij", "prefix_mismatch"),
        traj("ik", "fork"),
        traj("m", "role", role="memory"),
    ]
    out = branch_figures(trajectories)
    assert out["calls"] == 12  # a to k and m: a shared call counts once
    assert out["branches"] == 7
    assert out["calls_per_branch_mean"] == round(15 / 7, 3) and out["calls_per_branch_max"] == 3
    assert out["prefix_mismatch_share"] == round(3 / 12, 4)  # e, g and i start branches as mismatches
    assert out["branch_reasons"] == {"fork": 2, "new_thread": 1, "prefix_mismatch": 3, "role": 1}
    agent = out["by_role"]["agent"]
    assert agent["calls"] == 11 and agent["branches"] == 6 and agent["prefix_mismatch_share"] == round(3 / 11, 4)
    assert out["by_role"]["memory"] == {
        "calls": 1,
        "branches": 1,
        "calls_per_branch_mean": 1.0,
        "calls_per_branch_max": 1,
        "prefix_mismatch_share": 0.0,
        "branch_reasons": {"role": 1},
    }
    assert branch_figures([])["calls_per_branch_mean"] == 0.0
    assert "branches" in BENCHES
