"""The warnings a reader of a score must see, each from the figure that triggers it."""

from __future__ import annotations

from sclated.runs._health import run_warnings


def test_a_clean_run_has_no_warning() -> None:
    results = {
        "capture": {"calls": 4, "calls_failed": 0, "prompt_tokens": 90, "completion_tokens": 9, "drain": "ok"},
        "scheduler": {"early_deliveries": 0, "out_of_order": 0, "negative_delays": 0},
        "judges": [{"endpoint": "http://judge", "model": "gpt-4o", "embedded": False}],
    }
    assert run_warnings(results) == []


def test_each_fault_is_said_in_words() -> None:
    results = {
        "capture": {
            "calls": 11,
            "calls_failed": 11,
            "failed_by_cause": {"unreachable": 11},
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "calls_lost": 2,
            "calls_unleased": 1,
            "drain": "the capture proxy did not exit within the grace period",
        },
        "scheduler": {"early_deliveries": 3, "out_of_order": 1, "negative_delays": 2},
        "judges": [{"endpoint": "embedded", "model": "smollm2", "embedded": True}],
    }
    text = "\n".join(run_warnings(results))
    for needle in (
        "11 model call attempt(s) failed (unreachable 11) of 11 calls",
        "no tokens",
        "2 captured call record(s) were lost",
        "1 model call(s) ran without a clock lease",
        "did not exit",
        "3 message(s) were seen inside before their scheduled time",
        "1 message(s) were received out of the schedule's order",
        "2 delivery delay(s) were negative",
        "embedded model",
    ):
        assert needle in text, needle


def test_a_harness_on_the_wall_clock_is_said_and_a_probe_disagreeing_wins() -> None:
    simulated = {"harness": {"harness": "claude-code", "process_clock": "simulated"}}
    assert run_warnings(simulated) == []
    wall = {"harness": {"harness": "codex", "process_clock": "wall"}}
    assert run_warnings(wall) == [
        "the codex process itself reads the wall clock (a static executable libfaketime cannot reach); "
        "the commands it runs see simulated time"
    ]
    disagree = {"harness": {"harness": "x", "process_clock": "simulated", "warning": "x is declared to read ..."}}
    assert run_warnings(disagree) == ["x is declared to read ..."]
