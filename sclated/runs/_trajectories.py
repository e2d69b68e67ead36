"""A run's captured calls as trainer samples: records from the store, rewards
from the run's graded rounds.

Everything here reads what is already stored, so it works on a run that is
still RUNNING (what is captured so far) as well as on a finished one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from sclated.capture import (
    CallRecord,
    LossMaskPolicy,
    Sample,
    Verdict,
    attach_rewards,
    build_trajectories,
)
from sclated.errors import FailedPrecondition, InvalidArgument
from sclated.store import Store

__all__ = ["DEFAULT_TRAINABLE_ROLES", "run_samples", "run_verdicts", "trainable_roles"]

DEFAULT_TRAINABLE_ROLES = ("agent",)
_MAX_ROLES = 64


def trainable_roles(roles: Sequence[str], field: str = "trainable_roles") -> tuple[str, ...]:
    """Validated roles; empty means the default (the agent's)."""
    if len(roles) > _MAX_ROLES:
        raise InvalidArgument(f"{field} names more than {_MAX_ROLES} roles", field=field)
    for i, role in enumerate(roles):
        if not role or len(role) > 64 or not role.isprintable() or role.strip() != role:
            raise InvalidArgument(
                f"{field}[{i}] {role!r} is not a role name (1-64 printable characters)",
                field=field,
            )
    return tuple(dict.fromkeys(roles)) or DEFAULT_TRAINABLE_ROLES


def run_verdicts(run: str, results: Mapping[str, Any]) -> list[Verdict]:
    """The graded rounds of a run's results as verdicts for ``run``.

    Ungraded rounds carry a placeholder score of 0 in the results; counting
    them would drag every reward down for rounds nobody could judge.
    """
    out: list[Verdict] = []
    for r in results.get("round_scores") or ():
        if isinstance(r, Mapping) and r.get("graded"):
            out.append(Verdict(run=run, round_id=str(r.get("round_id", "")), score=float(r.get("score") or 0.0)))
    return out


def _samples(raw: list[dict[str, Any]], results: Mapping[str, Any], roles: tuple[str, ...]) -> list[Sample]:
    records: list[CallRecord] = []
    for data in raw:
        try:
            records.append(CallRecord.from_json(data))
        except InvalidArgument as exc:
            # Records are validated when the sink stores them, so this is a
            # damaged store, not the caller's input: INVALID_ARGUMENT naming a
            # record field would send them looking at their request.
            call_id = data.get("call_id") if isinstance(data, dict) else None
            raise FailedPrecondition(
                f"stored call record {call_id!r} is unreadable: {exc.message}",
                reason="INVALID_STORED_RECORD",
            ) from None
    built = build_trajectories(records, LossMaskPolicy(roles={r: True for r in roles}))
    # The calls table is keyed by the run, so every record in it belongs to
    # this run whatever label the in-sandbox proxy put in ``record.run``;
    # attach_rewards joins on that label, hence one verdict set per label.
    verdicts = [v for label in sorted({s.run for s in built.samples}) for v in run_verdicts(label, results)]
    return attach_rewards(built.samples, verdicts)


async def run_samples(
    store: Store,
    run_key: str,
    results: Mapping[str, Any],
    roles: Sequence[str] = (),
) -> list[Sample]:
    """The run's trajectory samples, rewards joined (None while nothing is graded).

    ``run_key`` is the store's ``"<tenant>/<run_id>"``; ``roles`` are the
    roles whose sampled tokens count in the loss (empty: the agent's).
    """
    chosen = trainable_roles(roles)
    raw = await store.calls(run_key)
    if not raw:
        return []
    # Parsing, graph building and reward joining are CPU work proportional to
    # the run's tokens: keep them off the event loop.
    return await asyncio.to_thread(_samples, raw, dict(results), chosen)
