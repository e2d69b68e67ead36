"""A run's captured calls as trainer samples: records from the store, rewards
from the run's graded rounds.

Everything here reads what is already stored, so it works on a run that is
still RUNNING (what is captured so far) as well as on a finished one, and
rewards are joined when asked for: a verdict stored later (a late grade, a
re-grade written into the run's results) changes the next export's rewards
without re-running anything.

Per-round rewards (``reward_mode="round"``, the default) need to know which
round each call belongs to: the run's journal says when each turn began (the
fire that delivered its prompt) and ended (its ``turn_end`` action) in
simulated time, and which round its prompt was (:func:`turn_spans`); a call
belongs to the turn whose span holds it (``sclated.capture.call_rounds``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from sclated.capture import (
    REWARD_MODES,
    CallRecord,
    ExportReport,
    Grouping,
    LossMaskPolicy,
    Sample,
    TurnSpan,
    Verdict,
    attach_rewards,
    build_trajectories,
    call_rounds,
    export_group,
    export_samples,
    group_rows,
)
from sclated.capture._export import check_export_args
from sclated.errors import FailedPrecondition, InvalidArgument
from sclated.store import Store

__all__ = [
    "DEFAULT_TRAINABLE_ROLES",
    "export_run",
    "export_run_group",
    "run_group",
    "run_samples",
    "run_verdicts",
    "trainable_roles",
    "turn_spans",
]

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


def reward_mode_of(mode: str) -> str:
    """A validated reward mode; empty means the default (``round``)."""
    if not mode:
        return "round"
    if mode not in REWARD_MODES:
        raise InvalidArgument(f"unknown reward mode {mode!r}; one of {', '.join(REWARD_MODES)}", field="reward_mode")
    return mode


def turn_spans(journal: Iterable[Mapping[str, Any]]) -> list[TurnSpan]:
    """The agent turns of a run's journal (its durable JSON entries, as
    ``Store.journal`` returns them), oldest first.

    A turn starts when the fire that delivered its prompt fired (or when the
    turn before it ended, if later: turns run one at a time) and ends at its
    ``turn_end`` action, which names the fire's event and the prompt's round. A
    ``turn_end`` whose fire is not in the journal is skipped.
    """
    fired: dict[str, int] = {}
    ends: list[tuple[int, str, str]] = []
    for e in journal:
        if e.get("t") == "fire":
            fired[str(e.get("event_id", ""))] = int(e.get("fired_ns", 0))
        elif e.get("t") == "input" and e.get("kind") == "action":
            payload = e.get("payload")
            if not isinstance(payload, Mapping) or payload.get("kind") != "turn_end":
                continue
            data = payload.get("data")
            if not isinstance(data, Mapping):
                continue
            ends.append((int(e.get("at_ns", 0)), str(data.get("event_id") or ""), str(data.get("round_id") or "")))
    spans: list[TurnSpan] = []
    prev_end: int | None = None
    for end_ns, event_id, round_id in sorted(ends):
        if event_id not in fired:
            continue
        start = fired[event_id] if prev_end is None else max(fired[event_id], prev_end)
        spans.append(TurnSpan(round_id=round_id, start_ns=start, end_ns=end_ns, event_id=event_id))
        prev_end = end_ns
    return spans


def _samples(
    raw: list[dict[str, Any]],
    results: Mapping[str, Any],
    roles: tuple[str, ...],
    mode: str = "round",
    journal: Sequence[Mapping[str, Any]] = (),
) -> list[Sample]:
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
    known = [str(r.get("round_id", "")) for r in results.get("round_scores") or () if isinstance(r, Mapping)]
    rounds = call_rounds(records, turn_spans(journal), rounds=set(known)) if mode == "round" else None
    return attach_rewards(built.samples, verdicts, mode=mode, call_rounds=rounds)


async def run_samples(
    store: Store,
    run_key: str,
    results: Mapping[str, Any],
    roles: Sequence[str] = (),
    *,
    reward_mode: str = "run",
) -> list[Sample]:
    """The run's trajectory samples, rewards joined (None where nothing is graded).

    ``run_key`` is the store's ``"<tenant>/<run_id>"``; ``results`` the run's
    stored results (their ``round_scores`` are the verdicts); ``roles`` are the
    roles whose sampled tokens count in the loss (empty: the agent's).
    ``reward_mode``: ``round`` (each sample credited with the verdicts of the
    rounds its calls belong to; the API's default) or ``run`` (the run's mean
    score). This function's own default stays ``run``, what callers that do not
    pass a mode have always got; the export functions below default to ``round``.
    """
    chosen = trainable_roles(roles)
    mode = reward_mode_of(reward_mode)
    raw = await store.calls(run_key)
    if not raw:
        return []
    journal = await store.journal(run_key) if mode == "round" else []
    # Parsing, graph building and reward joining are CPU work proportional to
    # the run's tokens: keep them off the event loop.
    return await asyncio.to_thread(_samples, raw, dict(results), chosen, mode, journal)


def _only(samples: list[Sample], only: Sequence[str]) -> list[Sample]:
    if not only:
        return samples
    kept = set(trainable_roles(only, "roles"))
    return [s for s in samples if s.role in kept]


async def export_run(
    store: Store,
    run_key: str,
    results: Mapping[str, Any],
    fmt: str,
    out_path: str | os.PathLike[str],
    roles: Sequence[str] = (),
    only: Sequence[str] = (),
    *,
    reward_mode: str = "round",
    unrewarded: str = "skip",
) -> ExportReport:
    """Write the run's rewarded samples to ``out_path`` in ``fmt``; report the rest.

    ``only`` keeps the samples of these roles (empty: every role's). Samples
    without a reward are left out and named in the report (``unrewarded="skip"``)
    or refuse the export (``"refuse"``, FailedPrecondition NO_REWARDS); an export
    that would leave out every sample is refused either way. Arguments are
    checked before the store is read (INVALID_ARGUMENT, naming the field).
    """
    check_export_args(fmt, unrewarded)
    mode = reward_mode_of(reward_mode)
    trainable_roles(roles)
    if only:
        trainable_roles(only, "roles")
    samples = _only(await run_samples(store, run_key, results, roles, reward_mode=mode), only)
    return await asyncio.to_thread(export_samples, samples, fmt, out_path, unrewarded=unrewarded)


async def run_group(
    store: Store,
    group: str,
    branch_calls: Collection[str] | None,
    members: Sequence[tuple[str, str, Mapping[str, Any]]],
    roles: Sequence[str] = (),
    only: Sequence[str] = (),
    *,
    reward_mode: str = "round",
) -> Grouping:
    """A group's continuations in GRPO layout (``sclated.capture._groups``).

    ``group``: the group's name (it prefixes every group key); ``branch_calls``:
    the call ids captured before the branch point, the snapshot's
    ``info["calls"]`` (``Store.get_snapshot``), or None: the calls every member
    holds, which are exactly the snapshot's when there are two members or more
    (each member's own calls have fresh ids); ``members``: ``(member name as
    shown in rows, e.g. "runs/g1-0"; its store key "<tenant>/<run_id>"; its
    stored results)`` in the group's order. Each member's rewards are read from
    its own results at call time.
    """
    mode = reward_mode_of(reward_mode)
    trainable_roles(roles)
    if branch_calls is None and len(members) < 2:
        raise InvalidArgument(
            "a group of one run needs the branch point's calls (the snapshot's) to tell its own calls apart",
            field="branch_calls",
        )
    per_member: list[tuple[str, list[Sample]]] = []
    common: set[str] | None = None
    for name, key, results in members:
        if branch_calls is None:
            ids = {str(c.get("call_id", "")) for c in await store.calls(key)}
            common = ids if common is None else common & ids
        per_member.append((name, _only(await run_samples(store, key, results, roles, reward_mode=mode), only)))
    calls = frozenset(branch_calls) if branch_calls is not None else frozenset(common or ())
    return await asyncio.to_thread(group_rows, group, per_member, calls)


async def export_run_group(
    store: Store,
    group: str,
    branch_calls: Collection[str] | None,
    members: Sequence[tuple[str, str, Mapping[str, Any]]],
    fmt: str,
    out_path: str | os.PathLike[str],
    roles: Sequence[str] = (),
    only: Sequence[str] = (),
    *,
    reward_mode: str = "round",
    unrewarded: str = "skip",
) -> ExportReport:
    """Write a group's continuations in ``fmt`` with their group layout
    (``sclated.capture.export_group``); arguments as :func:`run_group` and
    :func:`export_run`."""
    check_export_args(fmt, unrewarded)
    grouping = await run_group(store, group, branch_calls, members, roles, only, reward_mode=reward_mode)
    return await asyncio.to_thread(export_group, grouping, fmt, out_path, unrewarded=unrewarded)
