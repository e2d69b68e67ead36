"""Smoke test of `sclated bench gaia2`: both loops run the same generated scenario and
agree; shape and correctness, never speed (the figures come from the benchmark)."""

from __future__ import annotations

import argparse
import json

from sclated.bench._gaia2 import SHAPES, bench_gaia2


async def test_small_bench_runs_both_loops_and_finds_parity() -> None:
    out = await bench_gaia2(argparse.Namespace(quick=False, gaia2_n=[40]))
    assert json.loads(json.dumps(out)) == out
    assert out["parity"] is True
    assert [(c["shape"], c["n"]) for c in out["cases"]] == [(s, 40) for s in SHAPES]
    for case in out["cases"]:
        assert case["parity_problems"] == []
        assert case["sclate_in_order"] is True
        assert case["are_events_per_s"] > 0 and case["sclate_events_per_s"] > 0
        # Independent events are exact; a chain adds up microseconds per hop.
        assert case["max_time_diff_s"] < (1e-6 if case["shape"] == "independent" else 0.1)
    assert out["sclate_lateness_ms_max"] >= 0 and out["are_lateness_s_max"] >= 0
