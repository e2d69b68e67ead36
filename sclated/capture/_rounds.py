"""Which round a captured call belongs to.

A round is the unit a benchmark grades: a MetaClaw round, a LongMemEval
question, a SWE-bench instance, a Gaia2 task. The scheduler delivers a round's
prompt as one agent *turn*, and the run's journal says when each turn began and
ended in simulated time (see ``sclated.runs._trajectories.turn_spans``). A call
record carries its own simulated times: the capture proxy runs inside the
sandbox, under the sandbox's libfaketime clock, so ``timings.start_ns`` and
``timings.end_ns`` are simulated nanoseconds on the same clock.

The rule (:func:`call_rounds`): a call belongs to the turn whose span contains
the whole call, ``start - slack <= call.start_ns`` and ``call.end_ns <= end +
slack``. Turns are serialised, so their spans do not overlap and a call lies in
at most one. A call in no turn's span has no round: a memory consolidation
between turns, a harness's own cron tick, a call the sandbox clock stamped before
the turn began (libfaketime re-reads the offset on every call, tens of
milliseconds after a jump, so this is rare). Such a call earns no reward of its
own; it is never given a neighbouring round's verdict by guesswork.

A turn's prompt names a round id, which is not always the id of a graded
round: the synthetic benchmark grades a day (``d0``) whose prompts are its
tasks (``d0.task1``), Gaia2 grades its one scenario (``gaia2``) and names no
round on its prompts, LongMemEval's haystack sessions name rounds nobody grades.
Given the run's rounds (its results' ``round_scores``), :func:`resolve_round`
maps a turn's round id to one of them: the same id; else the longest round id
that prefixes it at a separator (``.``, ``/``, ``:``, ``#``); else, for a turn
naming no round in a run of exactly one round, that round; else none.

A call whose harness names its round explicitly is not needed for this: the
reference harness sends the round id in ``x-sclate-turn``, but the record's
``turn`` field only keeps integers, so the round comes from the clock here too.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from sclated.capture._record import CallRecord

__all__ = ["DEFAULT_SLACK_NS", "ROUND_SEPARATORS", "TurnSpan", "call_rounds", "resolve_round"]

ROUND_SEPARATORS = (".", "/", ":", "#")

DEFAULT_SLACK_NS = 100_000_000
"""Clock slack at both ends of a turn (100 ms): the sandbox's clock and the
daemon's are the same host clock plus an offset, read a few milliseconds apart."""


@dataclass(frozen=True)
class TurnSpan:
    """One agent turn in simulated time: from the fire that delivered its prompt
    (or the end of the turn before, if that came later) to its ``turn_end``."""

    round_id: str
    """The round the turn's prompt belongs to; empty for a turn with none (a
    notification, a routine's prompt)."""
    start_ns: int
    end_ns: int
    event_id: str = ""


def resolve_round(turn_round: str, rounds: Collection[str]) -> str | None:
    """The run's round a turn whose prompt names ``turn_round`` belongs to (see above)."""
    if turn_round in rounds:
        return turn_round
    if not turn_round:
        return next(iter(rounds)) if len(rounds) == 1 else None
    prefixes = [
        r
        for r in rounds
        if r and len(turn_round) > len(r) and turn_round.startswith(r) and turn_round[len(r)] in ROUND_SEPARATORS
    ]
    return max(prefixes, key=len) if prefixes else None


def call_rounds(
    records: Iterable[CallRecord],
    spans: Sequence[TurnSpan],
    *,
    rounds: Collection[str] | None = None,
    slack_ns: int = DEFAULT_SLACK_NS,
) -> dict[str, str]:
    """``call_id -> round_id`` for each call inside a turn that has a round.

    ``rounds``: the run's round ids; when given, a turn's round id is mapped to
    one of them (:func:`resolve_round`), else taken as it is. Calls outside
    every turn, and calls in a turn without a round, are absent.
    """
    ordered = sorted((s for s in spans if s.end_ns >= s.start_ns), key=lambda s: (s.start_ns, s.end_ns))
    starts = [s.start_ns - slack_ns for s in ordered]
    out: dict[str, str] = {}
    for rec in records:
        t0, t1 = rec.timings.start_ns, rec.timings.end_ns
        # The last turn starting (less slack) at or before the call's start.
        i = bisect.bisect_right(starts, t0) - 1
        if i < 0:
            continue
        span = ordered[i]
        if t1 > span.end_ns + slack_ns:
            continue
        rid = resolve_round(span.round_id, rounds) if rounds is not None else (span.round_id or None)
        if rid:
            out[rec.call_id] = rid
    return out
