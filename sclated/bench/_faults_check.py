"""What `sclated bench faults` concludes from what it saw: pure functions, no I/O.

A *case* is one run under one fault. Its outcome is ``recovered`` (the run ended
SUCCEEDED, after a resume where one was needed), ``failed_clearly`` (FAILED,
INTERRUPTED or CANCELLED with a reason naming what happened) or ``unclear``
(anything else: a reason that does not name the fault, a run that never ended).

*Records lost*: what a client was told is durable before the fault (the run's
events a WatchRun stream delivered, verdicts among them, and the captured calls the
daemon acknowledged to the proxy) that is missing or different afterwards.

*Leases leaked*: leases a run still held when it ended, read from its own lease
events (each process of the daemon starts the run's lease table afresh: a
``RUNNING`` state event starts counting again).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CLEAR_WORDS",
    "END_REASONS",
    "TARGETS",
    "Acknowledged",
    "CaseOutcome",
    "Outcome",
    "StreamEvent",
    "classify",
    "ended_for",
    "figures",
    "held_leases",
    "leases_expired",
    "leases_held_at_end",
    "reason_names_fault",
    "records_lost",
    "turn_left_unleased",
]

Outcome = Literal["recovered", "failed_clearly", "unclear"]

CLEAR_WORDS: dict[str, tuple[tuple[str, ...], ...]] = {
    # Each group is any-of; every group must match (case-insensitive).
    "daemon_kill": (("daemon", "restart", "resum", "durable point"),),
    "model_kill": (("model",), ("unreachable", "died", "killed", "signal", "restart", "endpoint")),
    "model_kill_stream": (("model",), ("unreachable", "died", "killed", "signal", "restart", "endpoint")),
    "mitmdump_kill": (("capture proxy", "mitmdump"), ("exited", "died", "killed", "signal")),
    "container_kill": (("container",), ("exited", "killed", "died", "exit code", "signal", "gone")),
    "container_pause": (("container", "sandbox"), ("paused", "frozen", "lease", "expired")),
    "harness_kill": (("harness",), ("exited", "killed", "died", "signal", "closed")),
    "control_close": (("control socket", "wait"), ("closed", "went away", "gone")),
    "disk_full": (("disk", "no space", "space left"),),
    "sigterm_snapshot": (("shut down", "shutdown", "sigterm", "stopping"),),
    "sigterm_restore": (("shut down", "shutdown", "sigterm", "stopping"),),
}
"""The words a reason must contain to name each fault."""

_ENDED_CLEARLY = frozenset({"FAILED", "INTERRUPTED", "CANCELLED", "REFUSED"})
"""Ends that are clear when their reason names the fault (REFUSED: a request the daemon
turned down, e.g. a CreateRun while its disk was full)."""


def reason_names_fault(fault: str, reason: str) -> bool:
    """Whether ``reason`` names ``fault`` (see CLEAR_WORDS); an unknown fault never matches."""
    groups = CLEAR_WORDS.get(fault)
    if not groups:
        return False
    text = reason.lower()
    return all(any(word in text for word in group) for group in groups)


def classify(fault: str, state: str, reason: str) -> Outcome:
    """``recovered`` when the run SUCCEEDED; ``failed_clearly`` when it ended otherwise
    with a reason naming the fault; ``unclear`` for the rest (a run still PENDING or
    RUNNING when the case gave up on it, or a reason that says nothing of the fault)."""
    if state == "SUCCEEDED":
        return "recovered"
    if state in _ENDED_CLEARLY and reason_names_fault(fault, reason):
        return "failed_clearly"
    return "unclear"


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One run event as the bench keeps it: its seq, kind, the bytes the client got, and
    the fields the checks read (a lease change, a state)."""

    seq: int
    kind: str
    data: bytes
    lease: str = ""
    change: str = ""
    state: str = ""
    reason: str = ""
    event_id: str = ""
    """A fire's event id."""
    phase: str = ""
    """A turn's phase (``ended``)."""


@dataclass(slots=True)
class Acknowledged:
    """What a client held as durable at one moment: events by seq, call records by id."""

    events: dict[int, bytes] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)

    def add_events(self, events: Iterable[StreamEvent]) -> None:
        for ev in events:
            self.events[ev.seq] = ev.data

    def add_calls(self, calls: Mapping[str, str]) -> None:
        self.calls.update(calls)


def records_lost(ack: Acknowledged, events_after: Mapping[int, bytes], calls_after: Mapping[str, str]) -> list[str]:
    """Each acknowledged record missing or changed afterwards, described."""
    lost: list[str] = []
    for seq, data in sorted(ack.events.items()):
        now = events_after.get(seq)
        if now is None:
            lost.append(f"event {seq} is gone")
        elif now != data:
            lost.append(f"event {seq} changed")
    for call_id, record in sorted(ack.calls.items()):
        now_call = calls_after.get(call_id)
        if now_call is None:
            lost.append(f"call {call_id} is gone")
        elif now_call != record:
            lost.append(f"call {call_id} changed")
    return lost


def _lease_walk(events: Sequence[StreamEvent]) -> tuple[Counter[str], list[str]]:
    held: Counter[str] = Counter()
    leaked: list[str] = []
    for ev in events:
        if ev.kind == "state":
            if ev.state == "RUNNING":
                held.clear()
            elif ev.state not in ("PENDING", ""):
                leaked.extend(sorted((+held).elements()))
                held.clear()
        elif ev.kind == "lease":
            if ev.change == "acquired":
                held[ev.lease] += 1
            elif ev.change in ("released", "expired") and held[ev.lease] > 0:
                held[ev.lease] -= 1
    return +held, leaked


def held_leases(events: Sequence[StreamEvent]) -> Counter[str]:
    """Leases held after ``events``, by name, counted from the last ``RUNNING`` state
    event: a new daemon process (or a resume) starts with an empty lease table, so a
    lease the previous process held when it died is not held any more."""
    return _lease_walk(events)[0]


def leases_expired(events: Sequence[StreamEvent]) -> list[str]:
    """Leases released only by their TTL: their holder stopped without releasing them."""
    return [ev.lease for ev in events if ev.kind == "lease" and ev.change == "expired"]


END_REASONS = {"synthetic": "all days done", "metaclaw": "MetaClaw-Bench scenario complete"}
"""How each benchmark's scenario ends a run that went to its end (its StopRun's reason)."""


def ended_for(events: Sequence[StreamEvent], expected: str) -> str | None:
    """A run that SUCCEEDED must have ended for its scenario's reason (``expected``): one
    that ended for another (idle, with its stop lost in a restart) did not say what
    happened. What happened, or None."""
    states = [ev for ev in events if ev.kind == "state"]
    if not states or states[-1].state != "SUCCEEDED" or states[-1].reason == expected:
        return None
    return f"it ended SUCCEEDED for {states[-1].reason!r}, not its scenario's {expected!r}"


def turn_left_unleased(events: Sequence[StreamEvent], after_seq: int) -> str | None:
    """A waiter inside the sandbox was killed mid-wait (its wait began after ``after_seq``):
    the turn it suspended must hold its lease again until it ends, so the turn's end
    releases a ``turn:`` lease. If it does not, the turn stayed suspended (the clock free
    to jump) while the agent went on working. What happened, or None."""
    ended = False
    for ev in events:
        if ev.seq <= after_seq:
            continue
        if ev.kind == "turn" and ev.phase == "ended":
            ended = True
        elif ended and ev.kind == "lease" and ev.lease.startswith("turn:"):
            if ev.change == "released":
                return None
            break
        elif ended and ev.kind == "state":
            break
    if not ended:
        return None
    return (
        "the turn whose waiter was killed mid-wait ended without its lease: it stayed suspended, "
        "the clock free to jump, while the agent worked"
    )


def leases_held_at_end(events: Sequence[StreamEvent]) -> list[str]:
    """Leases still held each time the run ended in a process that lived on (a final
    state, or INTERRUPTED by a shutdown), one name per acquisition. A process killed
    outright ends nothing: what it held went with it."""
    return _lease_walk(events)[1]


@dataclass(slots=True)
class CaseOutcome:
    """One run under one fault, as the bench's JSON lists it."""

    fault: str
    run: str
    injected: int
    """How many times the fault was injected into this run (0: it never hit)."""
    state: str
    reason: str
    records_lost: list[str] = field(default_factory=list)
    leases_leaked: list[str] = field(default_factory=list)
    replay_divergence: str | None = None
    note: str = ""
    """What the case saw besides (a resume it made, where the fault hit)."""
    anomalies: list[str] = field(default_factory=list)
    """What the run's end does not say although it happened (a clock left free to jump
    mid-turn): such a run is unclear, whatever its state."""

    @property
    def outcome(self) -> Outcome:
        return "unclear" if self.anomalies else classify(self.fault, self.state, self.reason)

    def as_dict(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "run": self.run,
            "injected": self.injected,
            "state": self.state,
            "reason": self.reason[:400],
            "outcome": self.outcome,
            "records_lost": len(self.records_lost),
            "records_lost_detail": self.records_lost[:10],
            "leases_leaked": self.leases_leaked[:10],
            "replay_divergence": self.replay_divergence,
            "anomalies": self.anomalies,
            "note": self.note,
        }


TARGETS = (
    "runs_unclear",
    "records_lost",
    "containers_leaked",
    "images_leaked",
    "sockets_leaked",
    "processes_leaked",
    "leases_leaked",
    "replay_divergences",
)
"""Figures that must be 0."""


def figures(
    cases: Sequence[CaseOutcome],
    *,
    seed: int,
    faults_injected: int,
    leftovers: Mapping[str, Sequence[str]],
    skipped: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The benchmark's JSON from its cases and what was left behind.

    ``leftovers``: ``containers``, ``images``, ``sockets``, ``processes`` (each a list
    of what was found after the cases ended). ``skipped``: faults not injected, why."""
    outcomes = Counter(c.outcome for c in cases)
    out: dict[str, Any] = {
        "seed": seed,
        "faults_injected": faults_injected,
        "runs": len(cases),
        "runs_recovered": outcomes["recovered"],
        "runs_failed_clearly": outcomes["failed_clearly"],
        "runs_unclear": outcomes["unclear"],
        "records_lost": sum(len(c.records_lost) for c in cases),
        "containers_leaked": len(leftovers.get("containers", ())),
        "images_leaked": len(leftovers.get("images", ())),
        "sockets_leaked": len(leftovers.get("sockets", ())),
        "processes_leaked": len(leftovers.get("processes", ())),
        "leases_leaked": sum(len(c.leases_leaked) for c in cases),
        "replay_divergences": sum(1 for c in cases if c.replay_divergence),
        "leftovers": {k: list(v)[:20] for k, v in leftovers.items() if v},
        "cases": [c.as_dict() for c in cases],
    }
    if skipped:
        out["faults_skipped"] = dict(skipped)
    out["missed_targets"] = [k for k in TARGETS if out[k]]
    out["meets_targets"] = not out["missed_targets"] and bool(cases)
    return out
