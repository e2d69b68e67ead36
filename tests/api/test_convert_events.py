"""Run events as the API shows them: a harness's failed turn says why."""

from __future__ import annotations

from sclated.api._convert import event_to_proto
from sclated.store import EventRow


def test_a_turn_carries_the_harness_error_and_a_good_turn_none() -> None:
    failed = EventRow("local/r", 7, "turn", 5, 6, {"round_id": "r1", "phase": "ended", "reply": "",
                                                    "harness_error": "API call failed after 1 retries"})  # fmt: skip
    ok = EventRow("local/r", 8, "turn", 5, 6, {"round_id": "r2", "phase": "ended", "reply": "done"})
    assert event_to_proto(failed, "runs/r").turn.harness_error == "API call failed after 1 retries"
    good = event_to_proto(ok, "runs/r").turn
    assert good.harness_error == "" and good.reply == "done"
