"""The journal's durable JSON form.

Fires are stored without their effects: replay recreates effects from fresh
sources and compares the fire's identity, time and snapshot version. Inputs
are stored whole. Direct registrations are durable when they are timed
(``At``) and their effects are of the kinds below: the run loop's wake-ups and
the work an agent schedules itself (a harness's cron tick, a notification).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sclated.errors import InvalidArgument
from sclated.scheduler import (
    At,
    DeliverPrompt,
    Effect,
    EventSpec,
    ExecInSandbox,
    FireRecord,
    InputRecord,
    JournalEntry,
    Notify,
    Priority,
    Wake,
)

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
    return {
        "t": "input",
        "seq": entry.seq,
        "kind": entry.kind,
        "at_ns": entry.at_ns,
        "version": entry.version,
        "payload": entry.payload,
        "source": entry.source,
        "specs": [_spec_to_json(spec) for spec in entry.specs],
    }


# Effects whose fields are all JSON scalars: stored by kind and fields.
_DURABLE: dict[str, type[Effect]] = {e.kind: e for e in (Wake, Notify, DeliverPrompt, ExecInSandbox)}


def _spec_to_json(spec: EventSpec) -> dict[str, Any]:
    kinds = [e.kind for e in spec.effects]
    if not isinstance(spec.trigger, At) or not spec.effects or any(k not in _DURABLE for k in kinds):
        raise InvalidArgument(
            f"event {spec.id!r}: a registration is journaled durably only when timed (At) and its effects are "
            f"{', '.join(sorted(_DURABLE))} (it has {', '.join(kinds) or 'none'})",
            field=spec.id,
        )
    return {
        "id": spec.id,
        "at_ns": spec.trigger.time_ns,
        "priority": None if spec.priority is None else int(spec.priority),
        "data": dict(spec.data),
        "effects": [{"kind": e.kind, **dataclasses.asdict(e)} for e in spec.effects],
    }


def _spec_from_json(s: dict[str, Any]) -> EventSpec:
    if "effects" not in s:  # a journal written before other registrations were durable: a wake-up
        return EventSpec(s["id"], At(s["at_ns"]), (Wake(s["waiter"]),), priority=Priority.HIGH)
    effects: list[Effect] = []
    for e in s["effects"]:
        fields = {k: v for k, v in e.items() if k != "kind"}
        effects.append(_DURABLE[e["kind"]](**fields))
    priority = None if s.get("priority") is None else Priority(s["priority"])
    return EventSpec(s["id"], At(s["at_ns"]), tuple(effects), priority=priority, data=s.get("data") or {})


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
    specs = tuple(_spec_from_json(s) for s in d["specs"])
    return InputRecord(d["seq"], d["kind"], d["at_ns"], d["version"], d["payload"], d["source"], specs)
