"""Per-round rewards (calls -> rounds -> credits), exports that leave unrewarded
samples out, and group exports (K continuations of one snapshot)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sclated.capture import (
    CallRecord,
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
    resolve_round,
)
from sclated.errors import FailedPrecondition, InvalidArgument
from tests.runs.capture_records import BASE_NS, call

S = 1_000_000_000


def at(t: float) -> int:
    return BASE_NS + int(t * S)


def recs(*records: dict[str, Any]) -> list[CallRecord]:
    return [CallRecord.from_json(r) for r in records]


# One agent session, token-faithful across three turns (one per round), and a
# memory call between turns.
P0 = [1, 2, 3]


def session(run: str = "r1") -> list[CallRecord]:
    return recs(
        call(run, "a1", t=1, prompt=P0, completion=[10, 11]),
        call(run, "a2", t=2, prompt=[*P0, 10, 11, 20], completion=[12]),
        call(run, "m1", t=3, role="memory", thread="t-mem", prompt=[900], completion=[901]),
        call(run, "a3", t=4, prompt=[*P0, 10, 11, 20, 12, 30, 31], completion=[13, 14]),
        call(run, "a4", t=5, prompt=[*P0, 10, 11, 20, 12, 30, 31, 13, 14, 40], completion=[15]),
    )


SPANS = [
    TurnSpan("d1.q1", at(0.5), at(2.5)),
    TurnSpan("d1.q2", at(3.5), at(4.5)),
    TurnSpan("d2.q1", at(4.9), at(5.5)),
]


def test_calls_belong_to_the_turn_that_holds_them() -> None:
    rounds = call_rounds(session(), SPANS)
    assert rounds == {"a1": "d1.q1", "a2": "d1.q1", "a3": "d1.q2", "a4": "d2.q1"}  # m1: between turns
    # A turn without a round (a notification) gives its calls none.
    assert call_rounds(session(), [TurnSpan("", at(0.5), at(2.5))]) == {}
    # Slack: a call stamped 50 ms before its turn began still belongs to it; 200 ms does not.
    late = [TurnSpan("x", at(1.05), at(2.5))]
    assert call_rounds(session()[:1], late) == {"a1": "x"}
    assert call_rounds(session()[:1], [TurnSpan("x", at(1.2), at(2.5))]) == {}
    # A call running past its turn's end is in no turn.
    assert call_rounds(session()[:1], [TurnSpan("x", at(0.5), at(0.8))]) == {}


def test_a_turns_round_resolves_to_a_graded_round() -> None:
    rounds = {"d0", "d0.task1", "gaia2x", "2024-01-02/q7"}
    assert resolve_round("d0.task1", rounds) == "d0.task1"  # the same id first
    assert resolve_round("d0.task2", rounds) == "d0"  # else the longest prefix at a separator
    assert resolve_round("d0.task1.retry", rounds) == "d0.task1"
    assert resolve_round("2024-01-02/q7:feedback", rounds) == "2024-01-02/q7"
    assert resolve_round("d01", rounds) is None and resolve_round("haystack-3", rounds) is None
    # A turn naming no round: the run's round when it has exactly one (Gaia2's scenario).
    assert resolve_round("", {"gaia2"}) == "gaia2" and resolve_round("", rounds) is None
    spans = [TurnSpan("d1.q1.followup", at(0.5), at(2.5)), TurnSpan("", at(3.5), at(4.5))]
    assert call_rounds(session(), spans, rounds={"d1.q1", "d2"}) == {"a1": "d1.q1", "a2": "d1.q1"}
    assert call_rounds(session(), spans, rounds={"only"}) == {"a3": "only"}


def rewarded(verdicts: list[Verdict], mode: str = "round", records: list[CallRecord] | None = None) -> list[Sample]:
    records = records if records is not None else session()
    built = build_trajectories(records)
    return attach_rewards(built.samples, verdicts, mode=mode, call_rounds=call_rounds(records, SPANS))


def test_each_round_is_credited_at_its_last_sampled_token() -> None:
    verdicts = [Verdict("r1", "d1.q1", 1.0), Verdict("r1", "d1.q2", 0.25)]  # d2.q1 not graded
    agent, memory = sorted(rewarded(verdicts), key=lambda s: s.role)
    assert agent.call_ids == ("a1", "a2", "a3", "a4")
    #                  a1      | a2 obs, sampled | a3 obs, sampled  | a4 obs, sampled
    assert agent.response_ids == (10, 11, 20, 12, 30, 31, 13, 14, 40, 15)
    assert agent.segment_ends == (2, 4, 8, 10)
    assert agent.rounds == ("d1.q1", "d1.q1", "d1.q2", "d2.q1")
    assert [(c.round_id, c.score, c.index) for c in agent.credits] == [("d1.q1", 1.0, 3), ("d1.q2", 0.25, 7)]
    assert agent.token_rewards == (0, 0, 0, 1.0, 0, 0, 0, 0.25, 0, 0)
    assert agent.reward == pytest.approx(0.625)  # the mean of the graded rounds
    # The memory call lies in no turn: no reward, not 0.
    assert memory.reward is None and memory.credits == () and memory.rounds == (None,)

    # A late verdict for the third round: joined again, other rewards.
    later = rewarded([*verdicts, Verdict("r1", "d2.q1", 0.0)])
    agent2 = next(s for s in later if s.role == "agent")
    assert [c.index for c in agent2.credits] == [3, 7, 9]
    assert agent2.reward == pytest.approx(1.25 / 3)

    # Nothing graded: no reward. The run mode: the run's mean at the last token.
    assert all(s.reward is None for s in rewarded([]))
    in_run = next(s for s in rewarded(verdicts, "run") if s.role == "agent")
    assert in_run.reward == pytest.approx(0.625) and in_run.token_rewards[-1] == pytest.approx(0.625)
    assert sum(in_run.token_rewards) == pytest.approx(0.625) and in_run.rounds == ()


def test_export_leaves_unrewarded_samples_out_and_says_which(tmp_path: Path) -> None:
    samples = rewarded([Verdict("r1", "d1.q1", 1.0)])
    out = tmp_path / "o.jsonl"
    report = export_samples(samples, "skyrl", out)
    assert report.rows == 1
    assert [(lo.sample_id, lo.reason, lo.run) for lo in report.left_out] == [("r1/memory/t-mem/m1#0", "no_round", "r1")]
    assert report.left_out_counts() == {"no_round": 1}
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["rewards"] == 1.0 and len(row["token_rewards"]) == len(row["response_ids"])
    assert row["token_rewards"][3] == 1.0 and sum(row["token_rewards"]) == 1.0
    assert row["metadata"]["round_rewards"] == [{"round_id": "d1.q1", "score": 1.0, "index": 3}]
    assert row["metadata"]["rounds"] == ["d1.q1", "d1.q1", "d1.q2", "d2.q1"]

    # refuse: one unrewarded sample refuses the whole export; nothing is written.
    out2 = tmp_path / "refused.jsonl"
    with pytest.raises(FailedPrecondition) as e:
        export_samples(samples, "verl", out2, unrewarded="refuse")
    assert e.value.reason == "NO_REWARDS" and "1 no_round" in e.value.message
    # Nothing rewarded at all: refused whatever the policy (an empty training file helps no one).
    with pytest.raises(FailedPrecondition) as e:
        export_samples(rewarded([]), "atif", out2)
    assert "2 of 2" in e.value.message and "1 ungraded" in e.value.message
    assert not out2.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["o.jsonl"]
    # No sample at all: an empty file.
    assert export_samples([], "verl", out2).rows == 0 and out2.read_text() == ""
    for bad, field in ((("parquet", "skip"), "format"), (("verl", "drop"), "unrewarded")):
        with pytest.raises(InvalidArgument) as ia:
            export_samples(samples, bad[0], out2, unrewarded=bad[1])
        assert ia.value.field == field


# -- groups ---------------------------------------------------------------------------

# The snapshot was taken after turn 1 (d1.q1): calls a1 and a2 are before the
# branch point. Three members continue from it; member b3's harness rebuilt its
# prompt differently, and every member starts a new session (thread t-day2)
# after the branch with the same first prompt.
BRANCH = frozenset({"a1", "a2", "m1"})
PRE = [*P0, 10, 11, 20, 12]


def member(
    run: str, cont: list[int], *, obs: list[int] | None = None, day2: list[int] | None = None
) -> list[CallRecord]:
    pre = session("parent")[:3]  # a1, a2, m1: copied from the parent, labelled with its run id
    mine = [
        call(run, f"{run}-c1", t=4, prompt=[*PRE, *(obs or [30, 31])], completion=cont),
        call(run, f"{run}-d2", t=5, thread="t-day2", prompt=[7, 7, 7], completion=day2 or [70]),
    ]
    return [*pre, *recs(*mine)]


def member_samples(records: list[CallRecord], verdicts: dict[str, float]) -> list[Sample]:
    built = build_trajectories(records, LossMaskPolicy())
    label_verdicts = [
        Verdict(label, rid, score) for label in {s.run for s in built.samples} for rid, score in verdicts.items()
    ]
    return attach_rewards(built.samples, label_verdicts, call_rounds=call_rounds(records, SPANS))


def test_group_rows_share_the_snapshot_prompt_and_carry_the_group() -> None:
    members = [
        ("runs/b1", member_samples(member("b1", [13, 14]), {"d1.q1": 1.0, "d1.q2": 1.0, "d2.q1": 0.5})),
        ("runs/b2", member_samples(member("b2", [16]), {"d1.q1": 1.0, "d1.q2": 0.0, "d2.q1": 1.0})),
        ("runs/b3", member_samples(member("b3", [17], obs=[30, 32]), {"d1.q1": 1.0, "d1.q2": 0.5})),
    ]
    g = group_rows("groups/g1", members, BRANCH)
    # Wholly before the branch point: the parent's memory call in every member. b3's
    # day-2 session was not graded: left out, named.
    assert sorted((lo.run, lo.reason) for lo in g.left_out) == [
        ("runs/b1", "before_branch"),
        ("runs/b2", "before_branch"),
        ("runs/b3", "before_branch"),
        ("runs/b3", "ungraded"),
    ]
    by_member = {(r.member, r.sample.thread): r for r in g.rows}
    b1, b2, b3 = (by_member[(f"runs/b{i}", "t-main")] for i in (1, 2, 3))
    # The shared prompt is the snapshot's prompt state; the response is what came after.
    assert b1.sample.prompt_token_ids == tuple(PRE) and b1.branch_tokens == 4
    assert b1.sample.response_ids == (30, 31, 13, 14) and b1.sample.loss_mask == (0, 0, 1, 1)
    assert len(b1.sample.logprobs) == 4 and b1.sample.records[0].call_id == "b1-c1"
    # Credited only with what was earned after the branch: d1.q1 (before it) is dropped.
    assert [(c.round_id, c.index) for c in b1.sample.credits] == [("d1.q2", 3)]
    assert b1.sample.reward == 1.0 and b2.sample.reward == 0.0
    # All three reached the same prompt state at the branch: one GRPO group of three.
    assert b1.id == b2.id and b1.id.startswith("groups/g1#")
    assert (b1.index, b2.index, b1.size) == (0, 1, 3) and b1.rewards == b2.rewards == (1.0, 0.0, 0.5)
    # b3's harness observed other tokens after the branch point; its prompt state at the
    # branch is the same, so it is in the same group: the key is the prompt before the branch.
    assert b3.sample.prompt_token_ids == tuple(PRE) and b3.sample.response_ids[:2] == (30, 32)
    assert b3.id == b1.id and b3.size == 3 and b3.rewards == (1.0, 0.0, 0.5)
    # A session started after the branch: grouped by its own first prompt.
    d1, d2 = by_member[("runs/b1", "t-day2")], by_member[("runs/b2", "t-day2")]
    assert d1.sample.prompt_token_ids == (7, 7, 7) and d1.branch_tokens == 0
    assert d1.id == d2.id != b1.id and d1.rewards == (0.5, 1.0)
    assert len(g.groups) == 2


def test_group_keys_split_on_the_prompt_state() -> None:
    # b2's session before the branch point is another one (its copy holds other tokens):
    # other prompt state, other group.
    other = [
        r
        if r.call_id != "a2"
        else CallRecord.from_json(
            dict(
                r.to_json(), completions=[{"index": 0, "token_ids": [99], "logprobs": [-1.0], "finish_reason": "stop"}]
            )
        )
        for r in member("b2", [16], obs=[30, 31])
    ]
    for i, r in enumerate(other):
        if r.call_id == "b2-c1":
            other[i] = CallRecord.from_json(dict(r.to_json(), prompt_token_ids=[*P0, 10, 11, 20, 99, 30, 31]))
    g = group_rows(
        "g",
        [
            ("b1", member_samples(member("b1", [13]), {"d1.q2": 1.0})),
            ("b2", member_samples(other, {"d1.q2": 0.0})),
        ],
        BRANCH,
    )
    mains = [r for r in g.rows if r.sample.thread == "t-main"]
    assert len(mains) == 2 and mains[0].id != mains[1].id and {r.size for r in mains} == {1}


@pytest.mark.parametrize("fmt", ["skyrl", "verl", "atif"])
def test_export_group_layout(tmp_path: Path, fmt: str) -> None:
    members = [
        ("runs/b1", member_samples(member("b1", [13, 14]), {"d1.q2": 1.0, "d2.q1": 0.0})),
        ("runs/b2", member_samples(member("b2", [16]), {"d1.q2": 0.0, "d2.q1": 1.0})),
    ]
    out = tmp_path / "g.jsonl"
    report = export_group(group_rows("groups/g1", members, BRANCH), fmt, out)
    assert report.rows == 4 and report.left_out_counts() == {"before_branch": 2}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["group"]["id"], []).append(r)
    assert len(groups) == 2
    for members_rows in groups.values():
        assert [r["group"]["index"] for r in members_rows] == [0, 1]
        assert [r["group"]["member"] for r in members_rows] == ["runs/b1", "runs/b2"]
        assert all(r["group"]["size"] == 2 and r["group"]["name"] == "groups/g1" for r in members_rows)
        rewards = members_rows[0]["group"]["rewards"]
        assert rewards == members_rows[1]["group"]["rewards"] and sorted(rewards) == [0.0, 1.0]
        if fmt == "skyrl":
            ids = [r["trajectory_id"] for r in members_rows]
            assert ids == [{"instance_id": members_rows[0]["group"]["id"], "repetition_id": i} for i in (0, 1)]
            assert [r["rewards"] for r in members_rows] == rewards
            assert members_rows[0]["prompt_token_ids"] == members_rows[1]["prompt_token_ids"]
        elif fmt == "verl":
            assert {r["uid"] for r in members_rows} == {members_rows[0]["group"]["id"]}
            assert [r["reward"] for r in members_rows] == rewards
            assert members_rows[0]["prompts"] == members_rows[1]["prompts"]
        else:
            assert all(r["extra"]["group"] == r["group"] for r in members_rows)

    # refuse: an unrewarded continuation (b2's day-2 session, ungraded) refuses the export.
    members[1] = ("runs/b2", member_samples(member("b2", [16]), {"d1.q2": 0.0}))
    with pytest.raises(FailedPrecondition) as e:
        export_group(group_rows("groups/g1", members, BRANCH), fmt, tmp_path / "r.jsonl", unrewarded="refuse")
    assert e.value.reason == "NO_REWARDS" and not (tmp_path / "r.jsonl").exists()
    skipped = export_group(group_rows("groups/g1", members, BRANCH), fmt, tmp_path / "s.jsonl")
    assert skipped.rows == 3 and skipped.left_out_counts() == {"before_branch": 2, "ungraded": 1}
