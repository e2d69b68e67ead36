"""bench e2e's figures and targets, from a run as GetRun returns it (every field present)."""

from __future__ import annotations

from typing import Any

from sclated.bench._e2e import e2e_figures


def _run(**scheduler: Any) -> dict[str, Any]:
    s = {
        "events_fired": 59,
        "events_scheduled": 59,
        "deliveries": 20,
        "deliveries_checked": 20,
        "out_of_order": 0,
        "early_deliveries": 0,
        "negative_delays": 0,
        "sim_span_s": 3 * 86400,
        "run_wall_s": 100.0,
        "agent_s": 95.0,
        "overhead_s": {"grading": 3.0, "session_control": 2.0},
        "overhead_fraction": 0.05,
        "compression_limit_agent": 2700.0,
    }
    s.update(scheduler)
    return {
        "state": "SUCCEEDED",
        "results": {
            "rounds": 6,
            "rounds_graded": 6,
            "score": 0.0,
            "scheduler": s,
            "capture": {"calls": 11, "calls_failed": 0, "calls_lost": 0, "calls_unleased": 0},
            "calls": [{"role": "agent", "calls": 11, "prompt_tokens": 900, "completion_tokens": 90}],
        },
        "export_rows": {"skyrl": 11},
    }


def test_a_clean_run_meets_the_targets_and_a_zero_score_stays_a_number() -> None:
    figures = e2e_figures(_run(), "builtin:tiny")
    assert figures["meets_targets"] and figures["missed_targets"] == []
    assert figures["score"] == 0.0 and figures["overhead_s"] == {"grading": 3.0, "session_control": 2.0}
    assert figures["tokens_by_role"] == {"agent": 990}


def test_each_target_can_be_missed() -> None:
    assert e2e_figures(_run(early_deliveries=2), "x")["missed_targets"] == ["early_deliveries"]
    assert e2e_figures(_run(overhead_fraction=0.2), "x")["missed_targets"] == ["overhead_fraction"]
    lost = _run()
    lost["results"]["capture"]["calls_lost"] = 1
    assert e2e_figures(lost, "x")["missed_targets"] == ["calls_lost"]
    failed = _run()
    failed["state"] = "FAILED"
    assert not e2e_figures(failed, "x")["meets_targets"]
