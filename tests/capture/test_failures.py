"""Failed calls are counted by cause and role, retries included."""

from __future__ import annotations

from typing import Any

import pytest

from sclated.capture import FAILURE_CAUSES, failure_cause
from sclated.runs._health import capture_totals, summarize_calls


def _rec(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"role": "agent", "status": 200, "complete": True, "error": None, "response": {}}
    base.update(kw)
    return base


@pytest.mark.parametrize(
    ("record", "cause"),
    [
        (_rec(), None),
        (
            _rec(
                status=502,
                complete=False,
                response={"error": {"type": "sclate_model_unavailable", "message": "refused"}},
            ),
            "unreachable",
        ),
        (_rec(status=502, complete=False, response={"error": {"type": "bad_gateway"}}), "upstream_5xx"),
        (_rec(status=500, complete=False), "upstream_5xx"),
        (_rec(status=504, complete=False), "timeout"),
        (_rec(status=400, complete=False), "rejected"),
        (
            _rec(status=400, complete=False, response={"error": {"code": "context_length_exceeded", "message": "x"}}),
            "context_length",
        ),
        (
            _rec(
                status=400,
                complete=False,
                response={"error": {"type": "invalid_request_error", "message": "prompt is too long: 9k"}},
            ),
            "context_length",
        ),
        (_rec(status=400, complete=False, response={"error": {"code": "invalid_value", "message": "bad"}}), "rejected"),
        (_rec(status=200, complete=False), "bad_response"),
        (_rec(status=None, complete=False, error="Connection refused"), "unreachable"),
        (_rec(status=None, complete=False, error="read timed out"), "timeout"),
        (_rec(status=None, complete=False, error="client disconnected"), "aborted"),
        (_rec(status=200, complete=False, error="peer closed connection mid-stream"), "aborted"),
    ],
)
def test_cause(record: dict[str, Any], cause: str | None) -> None:
    got = failure_cause(record)
    assert got == cause
    assert got is None or got in FAILURE_CAUSES


def test_summary_counts_failures_per_role_and_in_total() -> None:
    unreachable = {"type": "sclate_model_unavailable"}
    records = [
        _rec(usage={"prompt_tokens": 10, "completion_tokens": 2}),
        _rec(status=502, complete=False, response={"error": unreachable}),
        _rec(status=502, complete=False, response={"error": unreachable}, retry_of="x"),
        _rec(role="memory", status=500, complete=False, unleased=True),
    ]
    by_role = summarize_calls(records)
    agent = next(r for r in by_role if r["role"] == "agent")
    assert agent["calls"] == 2  # the retry is not a new call...
    assert agent["failed"] == 2 and agent["failed_by_cause"] == {"unreachable": 2}  # ...but it failed too
    totals = capture_totals(by_role, {"calls_lost": 1, "calls_recovered_at_close": 3, "drain": "ok"})
    assert totals["calls_failed"] == 3
    assert totals["failed_by_cause"] == {"unreachable": 2, "upstream_5xx": 1}
    assert totals["calls_unleased"] == 1 and totals["calls_lost"] == 1
    assert totals["prompt_tokens"] == 10 and totals["completion_tokens"] == 2
