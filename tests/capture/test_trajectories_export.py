"""Records, sink, trajectory graph, rewards and exports."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sclated.capture import (
    CallRecord,
    CaptureSink,
    LossMaskPolicy,
    MemoryRecordStore,
    Verdict,
    attach_rewards,
    build_trajectories,
    export,
)
from sclated.errors import ExportContractError, InvalidArgument
from tests.capture.fake_daemon import FakeLeases

_t = 0


def rec(
    prompt: list[int] | None,
    completion: list[int] | None,
    *,
    logprobs: list[float] | None = None,
    role: str = "agent",
    thread: str = "t1",
    turn: int | None = None,
    retry_of: str | None = None,
    error: str | None = None,
    hint: str | None = None,
    parent_thread: str | None = None,
    messages: list[dict[str, Any]] | None = None,
    reply: dict[str, Any] | None = None,
    call_id: str | None = None,
) -> CallRecord:
    global _t
    _t += 1000
    lps = logprobs if logprobs is not None else ([-0.5] * len(completion) if completion is not None else None)
    return CallRecord.from_json(
        {
            "schema": 1,
            "call_id": call_id or f"c{_t}",
            "run": "r1",
            "role": role,
            "api": "openai_chat",
            "method": "POST",
            "path": "/v1/chat/completions",
            "model": "m",
            "stream": False,
            "sampling": {},
            "injected": [],
            "request": {"model": "m", "messages": messages or []},
            "status": 200 if error is None else None,
            "response": {"choices": [{"index": 0, "message": reply or {"role": "assistant", "content": "x"}}]},
            "chunks": [],
            "prompt_token_ids": prompt,
            "completions": [{"index": 0, "token_ids": completion, "logprobs": lps, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(prompt or [])},
            "finish_reason": "stop",
            "timings": {"start_ns": _t, "first_byte_ns": _t + 1, "end_ns": _t + 2},
            "error": error,
            "complete": error is None,
            "thread": thread,
            "turn": turn,
            "parent_thread": parent_thread,
            "branch_hint": hint,
            "retry_of": retry_of,
        }
    )


# -- records and sink ---------------------------------------------------------------


def test_record_round_trips_and_names_bad_fields() -> None:
    r = rec([1, 2], [3])
    assert CallRecord.from_json(json.dumps(r.to_json())) == r
    cases: list[tuple[str, Any]] = [
        ("api", "grpc"),
        ("call_id", ""),
        ("prompt_token_ids", [1, "2"]),
        ("timings", None),
        ("stream", "yes"),
    ]
    for name, value in cases:
        bad = dict(r.to_json(), **{name: value})
        with pytest.raises(InvalidArgument) as e:
            CallRecord.from_json(bad)
        assert e.value.field is not None and e.value.field.startswith(name)
    bad = r.to_json()
    bad["completions"][0]["logprobs"] = [-1.0, -2.0]
    with pytest.raises(InvalidArgument) as e:
        CallRecord.from_json(bad)
    assert e.value.field == "completions[0].logprobs"


async def test_sink_leases_and_idempotent_records() -> None:
    store, leases = MemoryRecordStore(), FakeLeases()
    sink = CaptureSink(store, leases, call_ttl_ns=123)
    assert await sink.on_call_start("r1", {"call_id": "a", "role": "agent"}) == {"leased": True}
    assert await sink.on_call_start("r1", {"call_id": "a", "role": "agent"}) == {"leased": False}
    assert leases.acquired == [("model-call:a", "r1/agent", 123)]
    assert sink.active_calls("r1") == ["a"]
    assert await sink.on_call_end("r1", {"call_id": "a"}) == {"released": True}
    assert await sink.on_call_end("r1", {"call_id": "a"}) == {"released": False}
    assert leases.held == set()
    with pytest.raises(InvalidArgument):
        await sink.on_call_start("r1", {"call_id": "", "role": "agent"})

    r = rec([1], [2])
    assert await sink.on_record("r1", {"record": r.to_json()}) == {"stored": True}
    assert await sink.on_record("r1", {"record": r.to_json()}) == {"stored": False}
    assert await store.list("r1") == [r]
    with pytest.raises(InvalidArgument) as e:
        await sink.on_record("other-run", {"record": r.to_json()})
    assert e.value.field == "record.run"


# -- graph -------------------------------------------------------------------------


def test_extension_masks_observations_and_sampled_tokens() -> None:
    a = rec([1, 2, 3], [10, 11], logprobs=[-0.1, -0.2], turn=1)
    # Prompt = previous full sequence + tool output tokens [20, 21].
    b = rec([1, 2, 3, 10, 11, 20, 21], [12], logprobs=[-0.3], turn=2)
    t = build_trajectories([b, a])  # order comes from timings, not input order
    (s,) = t.samples
    assert s.prompt_token_ids == (1, 2, 3)
    assert s.response_ids == (10, 11, 20, 21, 12)
    assert s.loss_mask == (1, 1, 0, 0, 1)
    assert s.logprobs == (-0.1, -0.2, 0.0, 0.0, -0.3)
    assert s.call_ids == (a.call_id, b.call_id)
    assert s.branch_reason == "new_thread"
    assert s.turns == (1, 2)
    assert t.branches == [(a.call_id, "new_thread")]


def test_prefix_mismatch_compaction_fork_and_roles() -> None:
    a = rec([1, 2], [3])
    b = rec([1, 2, 3, 4], [5])
    # History rewritten: the new prompt does not start with [1,2,3,4,5].
    c = rec([1, 9, 9], [6])
    d = rec([1, 7], [8], hint="compaction")
    # Continues from a's end, not b's: a fork sharing a's tokens.
    e = rec([1, 2, 3, 40], [41])
    m = rec([1, 2], [3], role="memory")
    sub = rec([50], [51], thread="t-sub", parent_thread="t1")
    t = build_trajectories([a, b, c, d, e, m, sub])
    reasons = dict(t.branches)
    assert reasons[a.call_id] == "new_thread"
    assert reasons[c.call_id] == "prefix_mismatch"
    assert reasons[d.call_id] == "compaction"
    assert reasons[e.call_id] == "fork"
    assert reasons[m.call_id] == "role"
    assert reasons[sub.call_id] == "subagent"
    by_leaf = {s.call_ids[-1]: s for s in t.samples}
    assert set(by_leaf) == {b.call_id, c.call_id, d.call_id, e.call_id, m.call_id, sub.call_id}
    assert by_leaf[e.call_id].call_ids == (a.call_id, e.call_id)
    assert by_leaf[e.call_id].response_ids == (3, 40, 41)
    assert by_leaf[c.call_id].prompt_token_ids == (1, 9, 9)
    # Memory's sampled tokens are not trained by default; configurable.
    assert by_leaf[m.call_id].loss_mask == (0,)
    t2 = build_trajectories([m], LossMaskPolicy(roles={"agent": True, "memory": True}))
    assert t2.samples[0].loss_mask == (1,)


def test_missing_token_ids_retries_and_failures_are_not_samples() -> None:
    a = rec([1], [2])
    no_ids = rec(None, None, call_id="no-ids")
    failed = rec([1, 2, 3], [4], error="cut", call_id="failed")
    retry = rec([1, 2, 3], [4, 5], retry_of="failed", call_id="retry")
    t = build_trajectories([a, no_ids, failed, retry])
    assert t.missing_token_ids == ["no-ids"]
    assert t.skipped_failed == ["failed"]
    assert t.skipped_retries == ["retry"]
    assert [s.call_ids for s in t.samples] == [(a.call_id,)]


def test_rewards_per_round_or_the_run_aggregate() -> None:
    a = rec([1], [2])
    b = rec([7], [8], thread="t2")
    c = rec([9], [10], thread="t3")
    samples = build_trajectories([a, b, c]).samples
    verdicts = [
        Verdict("r1", "round-1", 1.0),
        Verdict("r1", "round-2", 0.0),
        Verdict("other", "round-1", 5.0),
    ]
    in_run = {s.call_ids[0]: s.reward for s in attach_rewards(samples, verdicts, mode="run")}
    assert in_run == {a.call_id: 0.5, b.call_id: 0.5, c.call_id: 0.5}
    rounds = {a.call_id: "round-1", b.call_id: "round-2"}
    per_round = {s.call_ids[0]: s.reward for s in attach_rewards(samples, verdicts, call_rounds=rounds)}
    # c is in no round: no reward, never an invented 0.
    assert per_round == {a.call_id: 1.0, b.call_id: 0.0, c.call_id: None}
    assert all(s.reward is None for s in attach_rewards(samples, [], mode="run"))
    with pytest.raises(InvalidArgument) as e:
        attach_rewards(samples, verdicts, mode="episode")
    assert e.value.field == "reward_mode"


# -- export ------------------------------------------------------------------------


def _samples() -> list[Any]:
    a = rec(
        [1, 2],
        [3, 4],
        turn=1,
        messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "do it"}],
        reply={
            "role": "assistant",
            "content": "calling",
            "tool_calls": [
                {
                    "id": "tc1",
                    "type": "function",
                    "function": {"name": "ls", "arguments": '{"p": "/"}'},
                }
            ],
        },
    )
    b = rec(
        [1, 2, 3, 4, 5],
        [6],
        turn=1,
        messages=[
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "do it"},
            {"role": "assistant", "content": "calling"},
            {"role": "tool", "tool_call_id": "tc1", "content": "a.txt"},
        ],
        reply={"role": "assistant", "content": "done"},
    )
    return attach_rewards(build_trajectories([a, b]).samples, [Verdict("r1", "round-1", 1.0)], mode="run")


@pytest.mark.parametrize("fmt", ["skyrl", "verl", "atif"])
def test_export_writes_each_format(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"{fmt}.jsonl"
    assert export(_samples(), fmt, out) == 1
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    if fmt == "skyrl":
        assert row["prompt_token_ids"] == [1, 2]
        assert row["response_ids"] == [3, 4, 5, 6]
        assert row["loss_masks"] == [1, 1, 0, 1]
        assert row["rollout_logprobs"] == [-0.5, -0.5, 0.0, -0.5]
        assert row["rewards"] == 1.0 and row["stop_reason"] == "stop"
        # The run's score, credited to the last token.
        assert row["token_rewards"] == [0.0, 0.0, 0.0, 1.0]
        assert row["trajectory_id"] and row["metadata"]["run"] == "r1"
    elif fmt == "verl":
        assert row["prompts"] == [1, 2] and row["responses"] == [3, 4, 5, 6]
        assert row["response_mask"] == [1, 1, 0, 1]
        assert row["rollout_log_probs"] == [-0.5, -0.5, 0.0, -0.5]
        assert row["reward"] == 1.0 and row["num_turns"] == 2
        assert row["token_rewards"] == [0.0, 0.0, 0.0, 1.0] and row["turn_scores"] == [1.0]
    else:
        assert row["schema_version"] == "ATIF-v1.4"
        assert row["agent"]["name"] == "sclate" and row["agent"]["model_name"] == "m"
        sources = [s["source"] for s in row["steps"]]
        assert sources == ["system", "user", "agent", "agent"]
        assert [s["step_id"] for s in row["steps"]] == [1, 2, 3, 4]
        first_agent = row["steps"][2]
        assert first_agent["tool_calls"] == [{"tool_call_id": "tc1", "function_name": "ls", "arguments": {"p": "/"}}]
        assert first_agent["observation"]["results"] == [{"source_call_id": "tc1", "content": "a.txt"}]
        assert first_agent["metrics"]["completion_token_ids"] == [3, 4]
        assert first_agent["metrics"]["logprobs"] == [-0.5, -0.5]
        assert first_agent["metrics"]["prompt_token_ids"] == [1, 2]
        assert row["steps"][3]["message"] == "done"
        assert row["final_metrics"]["total_completion_tokens"] == 3
        assert row["extra"]["reward"] == 1.0


def test_missing_logprobs_export_as_null_not_partial(tmp_path: Path) -> None:
    a = CallRecord.from_json(
        dict(rec([1], [2]).to_json(), completions=[{"index": 0, "token_ids": [2], "logprobs": None}])
    )
    (s,) = attach_rewards(build_trajectories([a]).samples, [Verdict("r1", "x", 0.0)], mode="run")
    export([s], "skyrl", tmp_path / "o.jsonl")
    assert json.loads((tmp_path / "o.jsonl").read_text())["rollout_logprobs"] is None


@pytest.mark.parametrize("fmt", ["skyrl", "verl", "atif"])
def test_contract_violations_write_nothing(tmp_path: Path, fmt: str) -> None:
    good = _samples()[0]
    bad_cases = [
        replace(good, loss_mask=good.loss_mask[:-1]),
        replace(good, logprobs=(*good.logprobs, -1.0)),
        replace(good, reward=None),
        replace(good, reward=math.nan),
        replace(good, loss_mask=(2,) * len(good.response_ids)),
        replace(good, sample_id="bad-one", response_ids=()),
    ]
    for bad in bad_cases:
        bad = replace(bad, sample_id="bad-one")
        out = tmp_path / "out.jsonl"
        with pytest.raises(ExportContractError) as e:
            export([good, bad], fmt, out)
        assert e.value.field == "bad-one" and "bad-one" in e.value.message
        assert list(tmp_path.iterdir()) == []  # no file, no temp file left


def test_atif_rejects_misaligned_step_tokens(tmp_path: Path) -> None:
    good = _samples()[0]
    r0 = good.records[0]
    broken = replace(
        r0,
        completions=(replace(r0.completions[0], logprobs=(-1.0,)),),
    )
    bad = replace(good, records=(broken, *good.records[1:]))
    with pytest.raises(ExportContractError):
        export([bad], "atif", tmp_path / "a.jsonl")
    assert list(tmp_path.iterdir()) == []


def test_export_replaces_atomically_and_rejects_unknown_format(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    out.write_text("old\n")
    with pytest.raises(ExportContractError):
        export([replace(_samples()[0], reward=None)], "verl", out)
    assert out.read_text() == "old\n"
    export(_samples(), "verl", out)
    assert json.loads(out.read_text())["reward"] == 1.0
    with pytest.raises(InvalidArgument):
        export(_samples(), "parquet", out)
