"""`sclated bench cluster`: each figure it reports can come out bad, and is then missed.

The figure logic (:func:`cluster_report`) is fed what a real invocation collects;
the whole benchmark against a real local cluster is run by hand (see docs/scale-out.md).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sclated.bench._cli import run_bench_cli
from sclated.bench._cluster import API_P99_MS, ClusterRaw, cluster_report


def _healthy() -> ClusterRaw:
    return ClusterRaw(
        nodes=2,
        runs=4,
        seed=7,
        local_wall_s=2.0,
        cluster_wall_s=3.0,
        local_run_s=[1.0, 1.2, 1.1, 0.9],
        cluster_run_s=[1.5, 1.7, 1.6, 1.4],
        local_succeeded=4,
        cluster_succeeded=4,
        placed=["aaaa@vm", "bbbb@vm", "aaaa@vm", "bbbb@vm"],
        latencies_ms={"GetRun": [2.0] * 200, "ListRuns": [4.0] * 200},
        kill_runs=4,
        kill_succeeded=4,
        moved=2,
        resume_s=[1.5, 2.5],
        records_lost=0,
        records_checked=40,
        local_single_s=0.7,
        cluster_single_s=2.5,
    )


def test_a_healthy_invocation_meets_the_targets() -> None:
    report = cluster_report(_healthy())
    assert report["meets_targets"], report["missed_targets"]
    assert report["runs"] == report["runs_succeeded"] == 8
    assert report["runs_per_node"] == [2, 2]
    assert report["resume_after_node_kill_s"] == 2.5
    assert report["per_run_overhead_s"] == pytest.approx(1.8)
    assert report["cluster_run_s_mean"] == pytest.approx(1.55)
    assert report["api_latency_ms_p99"] == 4.0


@pytest.mark.parametrize(
    ("change", "missed"),
    [
        ({"cluster_succeeded": 3}, "runs_succeeded 7 != runs 8"),
        ({"kill_succeeded": 2}, "runs_succeeded 6 != runs 8"),
        ({"local_succeeded": 3}, "local runs succeeded 3 != 4"),
        ({"records_lost": 1}, "records_lost 1"),
        ({"moved": 0, "resume_s": []}, "runs_moved 0"),
        ({"latencies_ms": {"GetRun": [2.0] * 90 + [API_P99_MS + 10] * 10}}, "api_latency_ms_p99"),
    ],
)
def test_each_bad_figure_is_missed(change: dict[str, object], missed: str) -> None:
    report = cluster_report(replace(_healthy(), **change))  # type: ignore[arg-type]
    assert not report["meets_targets"]
    assert any(m.startswith(missed) for m in report["missed_targets"]), report["missed_targets"]


def test_one_node_is_refused() -> None:
    with pytest.raises(SystemExit, match="--nodes must be at least 2"):
        run_bench_cli("cluster", ["--nodes", "1", "--json"])
