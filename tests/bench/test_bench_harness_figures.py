"""`sclated bench harness` figures from made-up records: each one can come out bad."""

from __future__ import annotations

from typing import Any

from sclated.bench._harness import harness_figures, session_continuity

MS = 1_000_000


def call(role: str, start_ms: int, end_ms: int, messages: list[tuple[str, str]], *, ids: bool = True) -> dict[str, Any]:
    conversation = [{"role": r, "content": t} for r, t in messages]
    return {
        "role": role,
        "method": "POST",
        "request": {"messages": [{"role": "system", "content": "sys"}, *conversation]},
        "prompt_token_ids": [1, 2, 3] if ids else None,
        "completions": [{"token_ids": [4] if ids else None}],
        "timings": {"start_ns": start_ms * MS, "end_ns": end_ms * MS},
        "status": 200,
        "complete": True,
        "error": None,
    }


RUN = {"state": "SUCCEEDED", "scheduler": {"delivery_delay_ms_p50": 3.0, "delivery_delay_ms_max": 9.0}}
FIRST = [("user", "hi")]
SECOND = [("user", "hi"), ("assistant", "hello"), ("user", "and now?")]


def test_good_records_meet_the_targets() -> None:
    calls = [call("agent", 100, 300, FIRST), call("agent", 1100, 1200, SECOND), call("memory", 5000, 5100, [])]
    out = harness_figures("h", RUN, [(0, 1000 * MS), (1000 * MS, 2000 * MS)], ["h:cron:1", "day:start"], calls)
    assert out["meets_targets"], out["missed_targets"]
    assert out["turns"] == 2 and out["calls"] == out["calls_with_token_ids"] == 3
    # Turn 1: 1000 ms, 200 of them in the model; turn 2: 1000 ms, 100 in the model.
    assert out["harness_overhead_ms_p50"] == 850.0 and out["harness_overhead_ms_max"] == 900.0
    assert out["crons_fired"] == 1 and out["session_continuity"] is True
    assert out["calls_by_role"] == {"agent": 2, "memory": 1}
    assert out["failed_calls"] == []


def test_failed_calls_say_what_went_wrong() -> None:
    cut = {**call("agent", 1100, 1200, SECOND), "complete": False, "error": "client disconnected"}
    refused = {**call("agent", 1300, 1400, SECOND, ids=False), "status": 400, "error": "bad request"}
    out = harness_figures("h", RUN, [], [], [call("agent", 100, 300, FIRST), cut, refused])
    assert [(c["cause"], c["error"]) for c in out["failed_calls"]] == [
        ("aborted", "client disconnected"),
        ("rejected", "bad request"),
    ]


def test_a_call_without_token_ids_misses() -> None:
    calls = [call("agent", 100, 300, FIRST), call("agent", 1100, 1200, SECOND, ids=False)]
    out = harness_figures("h", RUN, [], [], calls)
    assert out["calls_with_token_ids"] == 1 and "calls_with_token_ids" in out["missed_targets"]
    assert [c["role"] for c in out["calls_without_token_ids"]] == ["agent"]
    assert not out["meets_targets"]


def test_continuity_is_judged_on_each_turns_first_call() -> None:
    # A continuation inside turn 1 (its own messages) is not the session's history.
    aside = call("agent", 400, 500, [("user", "hi"), ("assistant", "hel"), ("user", "continue")])
    calls = [call("agent", 100, 300, FIRST), aside, call("agent", 1100, 1200, SECOND)]
    out = harness_figures("h", RUN, [(0, 1000 * MS), (1000 * MS, 2000 * MS)], [], calls)
    assert out["session_continuity"] is True
    restarted = [call("agent", 100, 300, SECOND), call("agent", 1100, 1200, FIRST)]
    out = harness_figures("h", RUN, [(0, 1000 * MS), (1000 * MS, 2000 * MS)], [], restarted)
    assert out["session_continuity"] is False and "session_continuity" in out["missed_targets"]
    assert out["continuity_breaks"] == ["call 1: 1 messages after 3 (the session started over or shrank)"]


def test_a_session_that_started_over_is_not_continuous() -> None:
    assert not session_continuity([call("agent", 1, 2, SECOND), call("agent", 3, 4, FIRST)])
    assert not session_continuity([call("agent", 1, 2, FIRST), call("agent", 3, 4, [("user", "hello?")])])
    assert not session_continuity([call("agent", 1, 2, FIRST)])  # one call tells nothing


def test_slow_delivery_and_a_failed_run_miss() -> None:
    slow = {"state": "SUCCEEDED", "scheduler": {"delivery_delay_ms_p50": 60.0, "delivery_delay_ms_max": 300.0}}
    calls = [call("agent", 1, 2, FIRST), call("agent", 3, 4, SECOND)]
    out = harness_figures("h", slow, [], [], calls)
    assert set(out["missed_targets"]) == {"delivery_delay_ms_p50", "delivery_delay_ms_max"}
    failed = harness_figures("h", {**RUN, "state": "FAILED"}, [], [], calls)
    assert failed["missed_targets"] == [] and not failed["meets_targets"]


def test_continuity_is_judged_within_each_session() -> None:
    day1a = [("user", "day one q1")]
    day1b = [("user", "day one q1"), ("assistant", "a1"), ("user", "day one q2")]
    day2 = [("user", "seeded day two"), ("assistant", "seeded reply"), ("user", "day two q1")]
    calls = [call("agent", 0, 100, day1a), call("agent", 1000, 1100, day1b), call("agent", 2000, 2100, day2)]
    turns = [(0, 500 * MS), (1000 * MS, 1500 * MS), (2000 * MS, 2500 * MS)]
    # A new session per day (OpenClaw on MetaClaw's upstream protocol) is not a break...
    out = harness_figures("h", RUN, turns, [], calls, ["day01", "day01", "day02"])
    assert out["session_continuity"] is True and out["continuity_breaks"] == []
    # ...but the same calls judged as one session are.
    assert harness_figures("h", RUN, turns, [], calls)["session_continuity"] is False
    # A session that starts over inside a day is a break.
    restarted = [call("agent", 0, 100, day1a), call("agent", 1000, 1100, [("user", "day one q2")])]
    assert not harness_figures("h", RUN, turns[:2], [], restarted, ["day01", "day01"])["session_continuity"]
    # One turn per session tells nothing.
    assert not harness_figures("h", RUN, turns[:2], [], calls[1:], ["day01", "day02"])["session_continuity"]


def test_a_per_call_note_and_an_annotated_newest_message_are_not_breaks() -> None:
    # OpenClaw: the newest user message carries a runtime line, and an internal-context
    # note follows it; the next call keeps the message plain and drops the note.
    first = [("user", "q1\n\nRuntime: agent=a"), ("user", "<<<CONTEXT>>>")]
    second = [("user", "q1"), ("assistant", "a1"), ("user", "q2\n\nRuntime: agent=a"), ("user", "<<<CONTEXT>>>")]
    assert session_continuity([call("agent", 0, 1, first), call("agent", 2, 3, second)])
    # Dropping a real message is still a break.
    lost = [("user", "other"), ("assistant", "a1"), ("user", "q2"), ("user", "<<<CONTEXT>>>")]
    assert not session_continuity([call("agent", 0, 1, first), call("agent", 2, 3, lost)])


def _anthropic(messages: list[tuple[str, str]]) -> dict[str, Any]:
    rec = call("agent", 0, 1, [])
    rec["request"] = {
        "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": r, "content": [{"type": "text", "text": t}]} for r, t in messages],
    }
    return rec


def _responses(messages: list[tuple[str, str]]) -> dict[str, Any]:
    rec = call("agent", 0, 1, [])
    kind = {"user": "input_text", "assistant": "output_text"}
    rec["request"] = {
        "instructions": "sys",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "perms"}]},
            *({"type": "message", "role": r, "content": [{"type": kind[r], "text": t}]} for r, t in messages),
            {"type": "function_call", "name": "shell", "call_id": "c", "arguments": "{}"},
        ],
    }
    return rec


def test_continuity_reads_anthropic_and_responses_requests() -> None:
    for make in (_anthropic, _responses):
        assert session_continuity([make(FIRST), make(SECOND)]), make.__name__
        restarted = [make(SECOND), make([("user", "a new conversation")])]
        assert not session_continuity(restarted), make.__name__


def test_tokens_per_turn_by_role_and_the_first_prompt() -> None:
    calls = [call("agent", 100, 300, FIRST), call("agent", 1100, 1200, SECOND), call("aux", 1300, 1400, [])]
    calls[0]["prompt_token_ids"] = list(range(9000))
    out = harness_figures("h", RUN, [(0, 1000 * MS), (1000 * MS, 2000 * MS)], [], calls)
    assert out["first_prompt_tokens"] == 9000
    by_role = out["tokens_per_turn_by_role"]
    assert by_role["agent"] == {
        "calls_per_turn": 1.0,
        "prompt_tokens_per_turn": 4501.5,
        "completion_tokens_per_turn": 1.0,
        "prompt_tokens_p50": 4501.5,
    }
    assert by_role["aux"]["calls_per_turn"] == 0.5
