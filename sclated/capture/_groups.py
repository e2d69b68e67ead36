"""Group exports: K continuations of one snapshot, laid out for GRPO.

A *group* is K runs branched from one snapshot: the same prompt state, K
continuations (its *members*). Every member's store holds the snapshot's
calls (copied when it was branched) and then its own, so a member's sample may
start before the branch point and go on after it. GRPO needs, per prompt, the
K responses and their rewards; here:

- **Branch point.** ``branch_calls`` are the ids of the calls captured before
  the snapshot (the snapshot's ``info["calls"]``). A sample's leading calls in
  that set are *before the branch*; the rest are its continuation.
- **Shared prompt.** A sample that continues a pre-branch branch is re-split
  there: its prompt becomes its old prompt plus every token the pre-branch calls
  added (the snapshot's prompt state for that thread: the tokens before the
  branch point), its response the tokens after. A sample whose first call is
  after the branch keeps its own prompt (a session started after the snapshot:
  its first prompt). A sample wholly before the branch point is history every
  member shares, not a continuation: it is left out (``before_branch``).
- **Group key.** Rows whose (role, shared prompt tokens) are equal form one
  GRPO group, keyed ``<group>#<16 hex digits>`` (a hash of the group's name,
  the role and the prompt tokens): verl's ``uid``, and SkyRL's
  ``trajectory_id.instance_id`` (with ``repetition_id`` the row's index in the
  group). Members that reached the same prompt state share a key; a member
  whose harness produced other prompt tokens (another thread history, a
  non-deterministic prompt) forms its own group. The thread name is not part of
  the key: harnesses may name sessions at random.
- **Rewards.** A continuation is credited only with what was earned after the
  branch point: the credits (see ``sclated.capture.RewardCredit``) on its
  continuation tokens, shifted with them; rounds finished before the branch are
  the same for every member and dropped. Its scalar reward is their mean (None:
  left out as ``ungraded``/``no_round``, never 0). In ``run`` mode the single
  credit sits at the last token and carries the member's run score.
- **Order.** Rows come member by member (the order given), each member's
  samples in their order; a row's ``index`` is its position among the rows of
  its key, and ``rewards`` lists the group's scalar rewards in index order.

Each row carries a ``group`` object: ``{"name", "id", "index", "size",
"rewards", "member", "branch_tokens"}`` (``branch_tokens``: how many tokens
moved from the response into the shared prompt).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from sclated.capture._export import (
    ExportReport,
    LeftOut,
    check_export_args,
    left_out_reason,
    refuse_unrewarded,
    rows_for,
    write_rows,
)
from sclated.capture._trajectories import RewardCredit, Sample

__all__ = ["GroupRow", "Grouping", "continuation", "export_group", "group_rows"]


@dataclass(frozen=True)
class GroupRow:
    sample: Sample
    """The continuation: prompt = the shared prompt, response = the tokens after the branch point."""
    name: str
    """The group's name, as the caller gave it."""
    id: str
    """The GRPO group key (verl's uid, SkyRL's instance id)."""
    index: int
    size: int
    rewards: tuple[float, ...]
    member: str
    branch_tokens: int

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "id": self.id,
            "index": self.index,
            "size": self.size,
            "rewards": list(self.rewards),
            "member": self.member,
            "branch_tokens": self.branch_tokens,
        }


@dataclass(frozen=True)
class Grouping:
    rows: tuple[GroupRow, ...]
    left_out: tuple[LeftOut, ...]

    @property
    def groups(self) -> dict[str, list[GroupRow]]:
        out: dict[str, list[GroupRow]] = {}
        for r in self.rows:
            out.setdefault(r.id, []).append(r)
        return out


def continuation(sample: Sample, branch_calls: Collection[str]) -> tuple[Sample, int] | None:
    """The sample re-split at the branch point, and how many response tokens
    moved into its prompt; None when every call of it is before the branch."""
    k = 0
    while k < len(sample.records) and sample.records[k].call_id in branch_calls:
        k += 1
    if k == len(sample.records):
        return None
    if k == 0:
        return sample, 0
    ends = sample.segment_ends or (len(sample.response_ids),) * len(sample.records)
    cut = ends[k - 1]
    credits = tuple(RewardCredit(c.index - cut, c.score, c.round_id) for c in sample.credits if c.index >= cut)
    return (
        dataclasses.replace(
            sample,
            prompt_token_ids=sample.prompt_token_ids + sample.response_ids[:cut],
            response_ids=sample.response_ids[cut:],
            loss_mask=sample.loss_mask[cut:],
            logprobs=sample.logprobs[cut:],
            records=sample.records[k:],
            choices=sample.choices[k:],
            segment_ends=tuple(e - cut for e in ends[k:]),
            rounds=sample.rounds[k:] if sample.rounds else (),
            credits=credits,
            reward=fmean(c.score for c in credits) if credits else None,
        ),
        cut,
    )


def _key(name: str, role: str, prompt: Sequence[int]) -> str:
    h = hashlib.sha256()
    h.update(name.encode())
    h.update(b"\0")
    h.update(role.encode())
    h.update(b"\0")
    h.update(",".join(map(str, prompt)).encode())
    return f"{name}#{h.hexdigest()[:16]}"


def group_rows(
    name: str,
    members: Sequence[tuple[str, Iterable[Sample]]],
    branch_calls: Collection[str],
) -> Grouping:
    """The group's continuations, keyed and indexed (see the module docstring).

    ``members``: ``(member name, its samples with rewards joined)`` in the
    group's order. Continuations without a reward are left out (named, with
    their reason), as are samples wholly before the branch point.
    """
    calls = frozenset(branch_calls)
    pending: list[tuple[str, str, Sample, int]] = []
    left_out: list[LeftOut] = []
    for member, samples in members:
        for s in samples:
            split = continuation(s, calls)
            if split is None:
                left_out.append(LeftOut(s.sample_id, "before_branch", member))
                continue
            cont, cut = split
            if cont.reward is None:
                left_out.append(LeftOut(cont.sample_id, left_out_reason(cont), member))
                continue
            pending.append((_key(name, cont.role, cont.prompt_token_ids), member, cont, cut))
    by_key: dict[str, list[int]] = {}
    for i, (key, *_rest) in enumerate(pending):
        by_key.setdefault(key, []).append(i)
    rows: list[GroupRow] = []
    for i, (key, member, cont, cut) in enumerate(pending):
        peers = by_key[key]
        rewards = tuple(float(pending[j][2].reward or 0.0) for j in peers)
        rows.append(GroupRow(cont, name, key, peers.index(i), len(peers), rewards, member, cut))
    return Grouping(tuple(rows), tuple(left_out))


def _group_row(fmt: str, row: GroupRow, base: dict[str, Any]) -> dict[str, Any]:
    info = row.info()
    if fmt == "skyrl":
        base["trajectory_id"] = {"instance_id": row.id, "repetition_id": row.index}
        base["metadata"]["group"] = info
    elif fmt == "verl":
        base["uid"] = row.id
        base["metadata"]["group"] = info
    else:
        base["extra"]["group"] = info
    base["group"] = info
    return base


def export_group(
    grouping: Grouping,
    format: str,
    out_path: str | os.PathLike[str],
    *,
    unrewarded: str = "skip",
) -> ExportReport:
    """Write a group's rows in ``format``: the format's row plus the group's
    layout (``group``; skyrl: ``trajectory_id`` = ``{"instance_id": id,
    "repetition_id": index}``; verl: ``uid`` = id).

    ``before_branch`` samples are always left out (they are not
    continuations); with ``unrewarded="refuse"`` an unrewarded continuation
    refuses the export (FailedPrecondition NO_REWARDS). A grouping with no row
    but left-out continuations is refused too. Nothing is written when refused.
    """
    check_export_args(format, unrewarded)
    unrewarded_out = [lo for lo in grouping.left_out if lo.reason != "before_branch"]
    if unrewarded_out and (unrewarded == "refuse" or not grouping.rows):
        raise refuse_unrewarded(unrewarded_out, len(grouping.rows) + len(unrewarded_out))
    base_rows = rows_for([r.sample for r in grouping.rows], format)
    rows = [_group_row(format, r, base) for r, base in zip(grouping.rows, base_rows, strict=True)]
    write_rows(out_path, rows)
    return ExportReport(len(rows), grouping.left_out)
