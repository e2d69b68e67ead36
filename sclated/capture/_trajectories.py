"""Token-level trajectories from call records.

A run's calls form a message graph per ``(role, thread)``. Each node is one
model call's choice and adds tokens: the prompt tokens that are new since its
parent (observations: tool output, user turns, chat-template glue; mask 0)
and the completion tokens the model sampled (mask 1 when the role trains).
Every root-to-leaf branch is one training sample.

Rewards (:func:`attach_rewards`) come from grading verdicts, per round by
default: a round's verdict is credited to the last token its calls contributed
to a sample (see :class:`RewardCredit`), the sample's scalar reward is the mean
of the rounds credited to it, and a sample none of whose rounds was graded gets
no reward at all (None, never an invented 0). ``mode="run"`` gives every sample
its run's mean score instead, credited to its last token.

Tokens only ever come from the server's own ids. A call extends a branch only
when its ``prompt_token_ids`` start with that branch's full sequence; when a
harness rewrites history (compaction, dropped reasoning, a sub-agent) the
prefix breaks and a new branch starts, with the reason recorded, instead of
re-tokenizing text to force a join.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from types import MappingProxyType
from typing import Any

from sclated.capture._record import CallRecord
from sclated.errors import InvalidArgument

__all__ = [
    "BRANCH_REASONS",
    "REWARD_MODES",
    "LossMaskPolicy",
    "RewardCredit",
    "Sample",
    "TokenNode",
    "Trajectories",
    "Verdict",
    "attach_rewards",
    "build_trajectories",
]

#: Why a branch starts. ``fork`` is a call that continues an earlier, not the
#: latest, point of a thread; ``sibling_choice`` is choice k>0 of an n>1 call.
BRANCH_REASONS = frozenset(
    {
        "new_thread",
        "role",
        "subagent",
        "compaction",
        "prefix_mismatch",
        "fork",
        "sibling_choice",
    }
)


@dataclass(frozen=True)
class LossMaskPolicy:
    """Which roles' sampled tokens count in the loss (default: the agent's only)."""

    roles: Mapping[str, bool] = field(default_factory=lambda: MappingProxyType({"agent": True}))
    default: bool = False

    def trains(self, role: str) -> bool:
        return self.roles.get(role, self.default)


@dataclass
class TokenNode:
    id: int
    record: CallRecord
    choice: int
    parent: int | None
    obs_ids: tuple[int, ...]
    sampled_ids: tuple[int, ...]
    sampled_logprobs: tuple[float | None, ...]
    full: tuple[int, ...]
    reason: str | None
    """Why this node starts a new branch; None when it extends its parent's."""
    children: list[int] = field(default_factory=list)


REWARD_MODES = ("round", "run")


@dataclass(frozen=True)
class RewardCredit:
    """One verdict credited to one token of a sample.

    In ``round`` mode there is one credit per graded round the sample's calls
    belong to, at ``index``: the last token the round's last call on this
    branch contributed to ``response_ids`` (its last sampled token). In ``run``
    mode there is one credit, the run's mean score, at the last response token.
    """

    index: int
    score: float
    round_id: str | None


@dataclass(frozen=True)
class Sample:
    """One root-to-leaf branch, aligned token for token.

    ``response_ids``, ``loss_mask`` and ``logprobs`` have equal length;
    ``logprobs`` is 0.0 on observation tokens and None on a sampled token the
    server gave no logprob for.
    """

    sample_id: str
    run: str
    role: str
    thread: str
    prompt_token_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float | None, ...]
    branch_reason: str
    records: tuple[CallRecord, ...]
    choices: tuple[int, ...]
    reward: float | None = None
    """The scalar reward: the mean of ``credits``' scores; None when nothing is credited."""
    segment_ends: tuple[int, ...] = ()
    """Per record on the branch: the end (exclusive) of the tokens it added to
    ``response_ids`` (its observation tokens, then its sampled tokens)."""
    rounds: tuple[str | None, ...] = ()
    """Per record on the branch: the round its call belongs to (None: none known);
    empty until :func:`attach_rewards` ran in ``round`` mode."""
    credits: tuple[RewardCredit, ...] = ()

    @property
    def token_rewards(self) -> tuple[float, ...]:
        """Per response token: the credited scores where they fall, 0.0 elsewhere."""
        out = [0.0] * len(self.response_ids)
        for c in self.credits:
            if 0 <= c.index < len(out):
                out[c.index] += c.score
        return tuple(out)

    @property
    def call_ids(self) -> tuple[str, ...]:
        return tuple(r.call_id for r in self.records)

    @property
    def turns(self) -> tuple[int, ...]:
        return tuple(r.turn for r in self.records if r.turn is not None)

    @property
    def finish_reason(self) -> str | None:
        last, choice = self.records[-1], self.choices[-1]
        for c in last.completions:
            if c.index == choice:
                return c.finish_reason
        return last.finish_reason

    @property
    def has_logprobs(self) -> bool:
        return all(lp is not None for lp in self.logprobs)


@dataclass
class Trajectories:
    nodes: list[TokenNode]
    samples: list[Sample]
    missing_token_ids: list[str]
    skipped_retries: list[str]
    skipped_failed: list[str]
    branches: list[tuple[str, str]]
    """(call_id, reason) for each node that starts a branch."""


@dataclass(frozen=True)
class Verdict:
    """A grading outcome for one round of a run."""

    run: str
    round_id: str
    score: float
    passed: bool | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


def _is_prefix(prefix: Sequence[int], seq: Sequence[int]) -> bool:
    return len(prefix) <= len(seq) and tuple(seq[: len(prefix)]) == tuple(prefix)


def build_trajectories(records: Iterable[CallRecord], policy: LossMaskPolicy | None = None) -> Trajectories:
    """Assemble graphs and samples from one run's records (any order)."""
    policy = policy or LossMaskPolicy()
    ordered = sorted(records, key=lambda r: (r.timings.start_ns, r.call_id))
    nodes: list[TokenNode] = []
    groups: dict[tuple[str, str], list[int]] = {}
    roles_of_thread: dict[str, set[str]] = {}
    out = Trajectories(nodes, [], [], [], [], [])

    for rec in ordered:
        if rec.retry_of is not None:
            out.skipped_retries.append(rec.call_id)
            continue
        if rec.failed:
            out.skipped_failed.append(rec.call_id)
            continue
        usable = [c for c in rec.completions if c.token_ids is not None]
        if rec.prompt_token_ids is None or not usable:
            out.missing_token_ids.append(rec.call_id)
            continue
        prompt = rec.prompt_token_ids
        key = (rec.role, rec.thread)
        group = groups.setdefault(key, [])
        parent: TokenNode | None = None
        for nid in group:
            n = nodes[nid]
            if _is_prefix(n.full, prompt) and (parent is None or len(n.full) > len(parent.full)):
                parent = n
        reason: str | None
        if parent is None:
            if rec.branch_hint in BRANCH_REASONS:
                reason = rec.branch_hint
            elif group:
                reason = "prefix_mismatch"
            elif rec.parent_thread is not None:
                reason = "subagent"
            elif roles_of_thread.get(rec.thread, set()) - {rec.role} or rec.role != "agent":
                reason = "role"
            else:
                reason = "new_thread"
        elif parent.children:
            reason = "fork"
        else:
            reason = None
        roles_of_thread.setdefault(rec.thread, set()).add(rec.role)
        base = parent.full if parent is not None else ()
        obs = tuple(prompt[len(base) :])
        for k, comp in enumerate(usable):
            assert comp.token_ids is not None
            lps: tuple[float | None, ...] = (
                tuple(comp.logprobs) if comp.logprobs is not None else tuple(None for _ in comp.token_ids)
            )
            node = TokenNode(
                id=len(nodes),
                record=rec,
                choice=comp.index,
                parent=parent.id if parent is not None else None,
                obs_ids=obs,
                sampled_ids=comp.token_ids,
                sampled_logprobs=lps,
                full=base + obs + comp.token_ids,
                reason=reason if k == 0 else (reason or "sibling_choice"),
            )
            nodes.append(node)
            group.append(node.id)
            if parent is not None:
                parent.children.append(node.id)
            if node.reason is not None:
                out.branches.append((rec.call_id, node.reason))

    for node in nodes:
        if not node.children:
            out.samples.append(_sample(nodes, node, policy))
    return out


def _sample(nodes: list[TokenNode], leaf: TokenNode, policy: LossMaskPolicy) -> Sample:
    path: list[TokenNode] = []
    cur: TokenNode | None = leaf
    while cur is not None:
        path.append(cur)
        cur = nodes[cur.parent] if cur.parent is not None else None
    path.reverse()
    root = path[0]
    trains = policy.trains(root.record.role)
    response: list[int] = []
    mask: list[int] = []
    logprobs: list[float | None] = []
    ends: list[int] = []
    for i, n in enumerate(path):
        if i > 0:
            response.extend(n.obs_ids)
            mask.extend([0] * len(n.obs_ids))
            logprobs.extend([0.0] * len(n.obs_ids))
        response.extend(n.sampled_ids)
        mask.extend([1 if trains else 0] * len(n.sampled_ids))
        logprobs.extend(n.sampled_logprobs)
        ends.append(len(response))
    reason = next((n.reason for n in reversed(path) if n.reason is not None), "new_thread")
    rec = root.record
    return Sample(
        sample_id=f"{rec.run}/{rec.role}/{rec.thread}/{leaf.record.call_id}#{leaf.choice}",
        run=rec.run,
        role=rec.role,
        thread=rec.thread,
        prompt_token_ids=root.obs_ids,
        response_ids=tuple(response),
        loss_mask=tuple(mask),
        logprobs=tuple(logprobs),
        branch_reason=reason,
        records=tuple(n.record for n in path),
        choices=tuple(n.choice for n in path),
        segment_ends=tuple(ends),
    )


def attach_rewards(
    samples: Iterable[Sample],
    verdicts: Iterable[Verdict],
    *,
    mode: str = "round",
    call_rounds: Mapping[str, str] | None = None,
) -> list[Sample]:
    """Give each sample its reward from the verdicts of its run.

    ``round`` (the default): ``call_rounds`` maps a call id to the round the
    call belongs to (:func:`sclated.capture.call_rounds`). Each graded round
    among a sample's calls is credited to the last token its last call on the
    branch contributed (several verdicts for one round: their mean). The
    sample's ``reward`` is the mean of its credits' scores, None when none of its
    rounds was graded (or none of its calls lies in a round).

    ``run``: every sample of a run gets the run's mean score, credited to its
    last token; None while the run has no verdict.

    Verdicts join on the sample's ``run`` label. Nothing else is changed, so a
    later call with other verdicts (a late grade) gives other rewards.
    """
    if mode not in REWARD_MODES:
        raise InvalidArgument(f"unknown reward mode {mode!r}; one of {', '.join(REWARD_MODES)}", field="reward_mode")
    by_run: dict[str, list[float]] = {}
    by_round: dict[tuple[str, str], list[float]] = {}
    for v in verdicts:
        by_run.setdefault(v.run, []).append(float(v.score))
        by_round.setdefault((v.run, v.round_id), []).append(float(v.score))
    rounds_of = call_rounds or {}
    out: list[Sample] = []
    for s in samples:
        # A sample made by hand without segment ends: every call ends at the last token.
        ends = s.segment_ends or (len(s.response_ids),) * len(s.records)
        credits: list[RewardCredit] = []
        rounds: tuple[str | None, ...] = ()
        if mode == "run":
            if by_run.get(s.run) and s.response_ids:
                credits.append(RewardCredit(len(s.response_ids) - 1, fmean(by_run[s.run]), None))
        else:
            rounds = tuple(rounds_of.get(r.call_id) for r in s.records)
            last: dict[str, int] = {}
            for i, rid in enumerate(rounds):
                if rid is not None:
                    last[rid] = i
            for rid, i in sorted(last.items(), key=lambda kv: kv[1]):
                scores = by_round.get((s.run, rid))
                if scores:
                    credits.append(RewardCredit(max(ends[i] - 1, 0), fmean(scores), rid))
        reward = fmean(c.score for c in credits) if credits else None
        out.append(
            dataclasses.replace(s, reward=reward, credits=tuple(credits), rounds=rounds, segment_ends=tuple(ends))
        )
    return out
