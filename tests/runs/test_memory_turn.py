"""A harness's report of its memory system's turn, as turn events carry it to clients."""

from __future__ import annotations

from sclated.api._convert import event_to_proto
from sclated.runs._worker import _memory_turn
from sclated.store import EventRow


def test_a_memory_report_reaches_the_turn_event() -> None:
    report = {
        "system": "mem0",
        "recalled": ["The user's cat is Biscuit.", "x" * 900],
        "recall_ms": 41.5,
        "stored": 2,
        "store_ms": 1200.0,
        "store_error": "HTTP 500",
    }
    memory = _memory_turn(report)
    assert memory is not None
    assert memory["recalled"][1] == "x" * 500 and memory["error"] == "HTTP 500"
    payload = {"round_id": "q", "session": "s", "phase": "ended", "reply": "hi", "memory": memory}
    ev = event_to_proto(EventRow("local/r", 7, "turn", 0, 0, payload), "runs/r")
    assert ev.turn.HasField("memory")
    m = ev.turn.memory
    assert (m.system, m.stored, m.recall_ms, m.store_ms) == ("mem0", 2, 41.5, 1200.0)
    assert m.recalled[0] == "The user's cat is Biscuit."


def test_no_report_no_memory_field() -> None:
    assert _memory_turn(None) is None and _memory_turn("text") is None
    ev = event_to_proto(EventRow("local/r", 7, "turn", 0, 0, {"phase": "ended"}), "runs/r")
    assert not ev.turn.HasField("memory")
    # Nonsense numbers from a harness are read as zero, never crash the run.
    assert _memory_turn({"recall_ms": "fast", "stored": True})["stored"] == 0  # type: ignore[index]
