"""The journal's durable JSON form.

Fires are stored without their effects: replay recreates effects from fresh
sources and compares the fire's identity, time and snapshot version. Inputs
are stored whole. Direct registrations are durable only for wake-ups, the one
kind the run loop makes itself.
"""

from __future__ import annotations

from typing import Any

from sclated.errors import InvalidArgument
from sclated.scheduler import At, EventSpec, FireRecord, InputRecord, JournalEntry, Priority, Wake

__all__ = ["entry_from_json", "entry_to_json"]


def entry_to_json(entry: JournalEntry) -> dict[str, Any]:
    if isinstance(entry, FireRecord):
        return {
            "t": "fire",
            "seq": entry.seq,
            "event_id": entry.event_id,
            "source": entry.source,
            "due_ns": entry.due_ns,
            "fired_ns": entry.fired_ns,
            "priority": entry.priority,
            "rank": entry.source_rank,
            "arrival": entry.arrival,
            "version": entry.snapshot_version,
            "effects": [e.kind for e in entry.effects],
        }
    specs = []
    for spec in entry.specs:
        wakes = [e for e in spec.effects if isinstance(e, Wake)]
        if not isinstance(spec.trigger, At) or len(wakes) != 1 or len(spec.effects) != 1:
            raise InvalidArgument(
                f"event {spec.id!r}: only wake-up registrations can be journaled durably",
                field=spec.id,
            )
        specs.append({"id": spec.id, "at_ns": spec.trigger.time_ns, "waiter": wakes[0].waiter})
    return {
        "t": "input",
        "seq": entry.seq,
        "kind": entry.kind,
        "at_ns": entry.at_ns,
        "version": entry.version,
        "payload": entry.payload,
        "source": entry.source,
        "specs": specs,
    }


def entry_from_json(d: dict[str, Any]) -> JournalEntry:
    if d["t"] == "fire":
        return FireRecord(
            seq=d["seq"],
            event_id=d["event_id"],
            source=d["source"],
            due_ns=d["due_ns"],
            fired_ns=d["fired_ns"],
            priority=d["priority"],
            source_rank=d["rank"],
            arrival=d["arrival"],
            snapshot_version=d["version"],
            effects=(),
        )
    specs = tuple(EventSpec(s["id"], At(s["at_ns"]), (Wake(s["waiter"]),), priority=Priority.HIGH) for s in d["specs"])
    return InputRecord(d["seq"], d["kind"], d["at_ns"], d["version"], d["payload"], d["source"], specs)
