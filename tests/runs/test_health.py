"""The warnings a reader of a score must see, each from the figure that triggers it."""

from __future__ import annotations

from typing import Any

from sclated.runs._health import memory_token_share, run_warnings, summarize_calls, summarize_components


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
            "proxy_restarts": 1,
        },
        "scheduler": {
            "early_deliveries": 3,
            "out_of_order": 1,
            "negative_delays": 2,
            "expired_leases": [{"name": "model-call:c1", "holder": "r/agent", "kind": "other"}],
        },
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
        "the capture proxy (mitmdump) in the sandbox died 1 time(s) and was started again",
        "lease model-call:c1 of r/agent expired after its TTL",
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


def test_components_split_the_memory_role_and_its_share_counts_every_memory_token() -> None:
    def rec(role: str, component: str, prompt: int, completion: int = 0) -> dict[str, Any]:
        return {
            "role": role,
            "component": component,
            "status": 200,
            "complete": True,
            "error": None,
            "response": {},
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
        }

    records = [
        rec("agent", "agent", 900, 60),
        rec("memory", "memory:mem0", 30, 10),
        rec("memory", "memory:embeddings", 8),
        rec("memory", "memory:embeddings", 12),
        {**rec("aux", "", 5)},  # a record from before components: counted under its role
    ]
    by_component = {r["role"]: r for r in summarize_components(records)}
    assert set(by_component) == {"agent", "memory:mem0", "memory:embeddings", "aux"}
    assert by_component["memory:embeddings"]["calls"] == 2
    assert by_component["memory:embeddings"]["prompt_tokens"] == 20
    share = memory_token_share(summarize_calls(records))
    assert share == (30 + 10 + 20) / (960 + 40 + 20 + 5)
    assert memory_token_share(summarize_calls([])) is None
    # Without memory calls the share is 0, not absent: the run had calls.
    assert memory_token_share(summarize_calls(records[:1])) == 0.0
