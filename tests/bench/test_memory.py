"""The memory bench's figures from a run's results, turns and calls (no daemon here)."""

from __future__ import annotations

from typing import Any

from sclated.bench._memory import default_pairs, memory_figures, restore_seconds


def _call(component: str, role: str = "memory", **kw: Any) -> dict[str, Any]:
    return {"role": role, "component": component, **kw}


def test_figures_count_memory_calls_by_component_and_time_stores_and_recalls() -> None:
    results = {"memory_token_share": 0.31, "scheduler": {"delivery_delay_ms_p50": 3.5, "delivery_delay_ms_max": 40.0}}
    turns: list[dict[str, Any]] = [
        {"memory": {"system": "mem0", "recall_ms": 20.0, "store_ms": 900.0}},
        {"memory": {"system": "mem0", "recall_ms": 30.0, "store_ms": 1100.0}},
        {"memory": {"system": "mem0", "recall_ms": 40.0, "store_ms": 1000.0, "stored": "2"}},
        {},  # a turn without a report (a harness that reports nothing)
        {"memory": {"system": "mem0", "recalled": ["User adopted a cat named Biscuit", "likes tulips"]}},
    ]
    calls = [
        _call("memory:mem0"),
        _call("memory:mem0", retry_of="x"),  # a retry is not a new call
        _call("memory:embeddings"),
        _call("memory:embeddings"),
        _call("memory:native"),
        _call("agent", role="agent"),
    ]
    got = memory_figures(results, turns, calls)
    assert got["memory_calls"] == 4
    assert got["memory_calls_by_component"] == {"memory:embeddings": 2, "memory:mem0": 1, "memory:native": 1}
    assert (got["store_ms_p50"], got["retrieve_ms_p50"], got["stores"], got["retrievals"]) == (1000.0, 30.0, 3, 3)
    assert got["memory_token_share"] == 0.31 and got["delivery_delay_ms_p50"] == 3.5
    assert got["memory_errors"] == []
    assert (got["items_stored"], got["question_recalled"], got["answer_recalled"]) == (2, 2, True)


def test_a_broken_memory_system_shows_in_the_figures() -> None:
    turns = [{"memory": {"system": "hindsight", "error": "HTTP 500 from recall"}}]
    got = memory_figures({}, turns, [_call("agent", role="agent")])
    assert got["memory_calls"] == 0 and got["store_ms_p50"] is None and got["retrieve_ms_p50"] is None
    assert got["memory_errors"] == ["HTTP 500 from recall"] and got["memory_token_share"] is None


def test_the_default_pairs_are_what_harnesses_declare() -> None:
    pairs = default_pairs()
    assert ("reference", "mem0") in pairs and ("reference", "hindsight") in pairs
    assert all(m != "native" for _, m in pairs)


def test_restore_is_the_call_and_the_branchs_sandbox_preparation() -> None:
    branch = {"scheduler": {"overhead_s": {"sandbox_prepare": 6.25, "grading": 1.0}}}
    assert restore_seconds(0.5, branch) == 6.75


def test_a_branch_that_never_prepared_has_no_restore_figure() -> None:
    # The figure the bench once waited for never came: missing must read as missing, not 0.
    assert restore_seconds(0.5, {}) is None
    assert restore_seconds(0.5, {"scheduler": {"overhead_s": {"grading": 1.0}}}) is None


def test_a_question_that_recalled_nothing_or_not_the_answer_says_so() -> None:
    stored = {"memory": {"system": "mem0", "stored": 1}}
    nothing = memory_figures({}, [stored, {"memory": {"system": "mem0", "recalled": []}}], [])
    assert (nothing["question_recalled"], nothing["answer_recalled"]) == (0, False)
    other = memory_figures({}, [stored, {"memory": {"system": "mem0", "recalled": ["likes tulips"]}}], [])
    assert (other["question_recalled"], other["answer_recalled"]) == (1, False)


def test_a_memory_system_that_never_ran_is_a_problem_though_the_run_succeeded() -> None:
    # Hermes + Hindsight once: the run succeeded, only embeddings were called, and the
    # plugin (inside Hermes) reports failures only.
    idle = memory_figures(
        {}, [{"memory": {"system": "hindsight"}}, {}], [_call("memory:embeddings")], system="hindsight"
    )
    assert idle["problems"] == ["no model call of memory:hindsight (the system never ran)"]
    assert idle["store_recall_reported"] is False
    measured = {"system": "mem0", "store_ms": 900.0, "recall_ms": 20.0}
    stored_nothing = memory_figures({}, [{"memory": measured}], [_call("memory:mem0")], system="mem0")
    assert stored_nothing["problems"] == ["nothing stored"]
    recalled_nothing = memory_figures(
        {}, [{"memory": {**measured, "stored": 1}}, {"memory": measured}], [_call("memory:mem0")], system="mem0"
    )
    assert recalled_nothing["problems"] == ["the question recalled nothing"]
    worked = memory_figures(
        {},
        [{"memory": {**measured, "stored": 1}}, {"memory": {**measured, "recalled": ["a cat"]}}],
        [_call("memory:mem0")],
        system="mem0",
    )
    assert worked["problems"] == [] and worked["store_recall_reported"] is True
