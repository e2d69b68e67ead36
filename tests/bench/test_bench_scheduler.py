"""Smoke test of the scheduler benchmark: shape and correctness, never speed."""

from __future__ import annotations

import json

from sclated.bench import bench_scheduler

FLOATS = (
    "fires_per_second",
    "lateness_ms_p50",
    "lateness_ms_max",
    "compression_ratio",
    "compression_limit",
    "throughput_wall_s",
    "lateness_wall_s",
    "arc_wall_s",
)
INTS = ("jumps", "events_fired", "events_scheduled", "arc_events_fired", "throughput_events_fired")


async def test_quick_bench_reports_every_figure_in_order() -> None:
    out = await bench_scheduler(quick=True)
    assert json.loads(json.dumps(out)) == out  # one flat, JSON-able dict
    assert all(not isinstance(v, dict | list) for v in out.values())
    for key in FLOATS:
        assert isinstance(out[key], float), key
    for key in INTS:
        assert isinstance(out[key], int) and not isinstance(out[key], bool), key
    assert out["quick"] is True
    assert out["in_order"] is True
    assert out["all_fired"] is True
    assert out["throughput_exact_due"] is True
    assert out["event_loop"] in ("asyncio", "uvloop")
    assert out["events_fired"] == out["events_scheduled"]
    assert isinstance(out["events_fired"], int) and out["events_fired"] > 5_000
    # The span is measured from the start of run(); a flowing clock may have
    # moved a little since the scenario's origin.
    assert isinstance(out["arc_sim_span_s"], float) and out["arc_sim_span_s"] > 3 * 86_400 - 1
    assert isinstance(out["jumps"], int) and out["jumps"] > 0
    assert out["lateness_jumps"] == 0  # a lease was held throughout
