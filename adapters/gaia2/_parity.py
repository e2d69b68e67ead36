"""Oracle parity: the same scenario on ARE's own event loop and on sclate's scheduler.

Compared: the ordered environment events both executed (ids, types, tools,
simulated times) and the validation outcome. ARE's condition polls (``...-CHECK_n``
records, one per tick) are not environment events and are left out.

One difference is by design and bounded: ARE checks a condition once per tick
(and, at a tie, before the event that makes it true, because its queue orders
ids alphabetically), so what follows a condition runs up to one tick later
there than on sclate, which checks it at the change itself. Events not after a
condition must agree exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Parity", "after_conditions", "compare_orders"]


@dataclass(frozen=True, slots=True)
class Parity:
    equal: bool
    """Same ids in the same order, same types and tools, times within the bound."""
    events: int
    max_time_diff_s: float
    late_by_ticks_in_are: int
    """Events ARE ran later than sclate by at most its tick (after a condition)."""
    problems: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "events": self.events,
            "max_time_diff_s": self.max_time_diff_s,
            "late_by_ticks_in_are": self.late_by_ticks_in_are,
            "problems": list(self.problems),
        }


def _environment_events(order: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [e for e in order if e.get("event_type") != "CONDITION"]


def compare_orders(
    sclate: Sequence[Mapping[str, Any]],
    are: Sequence[Mapping[str, Any]],
    *,
    tick_s: float,
    after_condition: frozenset[str] = frozenset(),
    time_tolerance_s: float = 1e-6,
) -> Parity:
    """``after_condition``: events downstream of a condition (the one allowed skew).
    ``time_tolerance_s``: how far apart the same event's times may be (exact by
    default, as a DISCRETE run gives; a HYBRID run's clock flows for the
    microseconds each fire takes, and a chain's delays add them up)."""
    ours, theirs = _environment_events(sclate), _environment_events(are)
    problems: list[str] = []
    if [e["event_id"] for e in ours] != [e["event_id"] for e in theirs]:
        problems.append(
            f"event order differs: sclate {[e['event_id'] for e in ours]} vs ARE {[e['event_id'] for e in theirs]}"
        )
    max_diff = 0.0
    late = 0
    for a, b in zip(ours, theirs, strict=False):
        if a["event_id"] != b["event_id"]:
            continue
        for key in ("event_type", "tool", "failed"):
            if a.get(key) != b.get(key):
                problems.append(f"{a['event_id']}: {key} {a.get(key)!r} on sclate, {b.get(key)!r} on ARE")
        diff = float(b["time"]) - float(a["time"])
        max_diff = max(max_diff, abs(diff))
        if abs(diff) <= time_tolerance_s:
            continue
        if a["event_id"] in after_condition and 0 < diff <= tick_s + 1e-6:
            late += 1
            continue
        problems.append(f"{a['event_id']}: at {a['time']} on sclate, {b['time']} on ARE")
    return Parity(not problems, len(ours), max_diff, late, tuple(problems))


def after_conditions(description: Mapping[str, Any]) -> frozenset[str]:
    """Every event that depends, directly or not, on a condition of the scenario."""
    events = description["events"]
    conditions = {e["event_id"] for e in events if e["class_name"] in ("ConditionCheckEvent", "ValidationEvent")}
    downstream: set[str] = set()
    changed = True
    while changed:
        changed = False
        for e in events:
            if e["event_id"] not in downstream and any(d in conditions or d in downstream for d in e["deps"]):
                downstream.add(e["event_id"])
                changed = True
    return frozenset(downstream)
