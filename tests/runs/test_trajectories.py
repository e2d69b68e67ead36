"""A run's stored call records as trainer samples (sclated.runs._trajectories)
and the RunManager methods on top of them, against a real SQLite store."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from sclated.errors import FailedPrecondition, InvalidArgument, NotFound
from sclated.runs import RunManager, RunSpec
from sclated.runs._registry import Registry
from sclated.runs._trajectories import run_samples
from sclated.store import RunRow, Store
from tests.runs.capture_records import call, sampled, scenario

RESULTS: dict[str, Any] = {
    "score": 0.5,
    "rounds": 3,
    "rounds_graded": 2,
    "round_scores": [
        {"round_id": "d0.task1", "day": "0", "kind": "task", "graded": True, "score": 1.0},
        {"round_id": "d0.task2", "day": "0", "kind": "task", "graded": True, "score": 0.0},
        # Ungraded rounds carry a placeholder 0 that must not lower the reward.
        {"round_id": "d1.task1", "day": "1", "kind": "task", "graded": False, "score": 0.0},
    ],
}


async def seed(store: Store, key: str, records: list[dict[str, Any]]) -> None:
    for r in records:
        assert await store.put_call(key, r["call_id"], r["role"], r)


async def test_samples_from_stored_records(store: Store) -> None:
    sc = scenario("run-1")
    shuffled = list(sc.records)
    random.Random(7).shuffle(shuffled)  # the graph comes from timings, not storage order
    await seed(store, "local/run-1", shuffled)
    samples = await run_samples(store, "local/run-1", RESULTS, [])
    by_role = {s.role + ("/sub" if s.thread == "t-sub" else ""): s for s in samples}
    assert set(by_role) == {"agent", "agent/sub", "memory"}

    agent = by_role["agent"]
    assert agent.call_ids == sc.agent_calls
    assert agent.prompt_token_ids == tuple(sc.agent_prompt)
    assert agent.branch_reason == "new_thread"
    # The failed call is never part of a sample, and no call is used twice.
    all_calls = [c for s in samples for c in s.call_ids]
    assert sc.failed not in all_calls and len(all_calls) == len(set(all_calls))
    for s in samples:
        assert len(s.response_ids) == len(s.loss_mask) == len(s.logprobs) > 0
        # Rewards: the mean of the graded rounds only (1.0 and 0.0).
        assert s.reward == 0.5
    # Trainable tokens are exactly the agent's sampled ones; the rest of the
    # response is observation (tool output, the next user turn).
    assert sum(agent.loss_mask) == sampled(sc.records, agent.call_ids)
    assert len(agent.response_ids) > sum(agent.loss_mask)
    assert all(lp == 0.0 for lp, m in zip(agent.logprobs, agent.loss_mask, strict=True) if not m)

    memory = by_role["memory"]
    assert memory.call_ids == (sc.memory_call,) and memory.branch_reason == "role"
    assert set(memory.loss_mask) == {0}
    sub = by_role["agent/sub"]
    assert sub.branch_reason == "subagent" and not sub.has_logprobs
    assert set(sub.loss_mask) == {1}

    both = await run_samples(store, "local/run-1", RESULTS, ["agent", "memory"])
    mem2 = next(s for s in both if s.role == "memory")
    assert set(mem2.loss_mask) == {1}
    assert next(s for s in both if s.role == "agent").loss_mask == agent.loss_mask
    only_memory = await run_samples(store, "local/run-1", RESULTS, ["memory"])
    assert {s.role: set(s.loss_mask) for s in only_memory if s.thread != "t-sub"} == {
        "agent": {0},
        "memory": {1},
    }


@pytest.mark.parametrize("label", ["run-1", "local/run-1"])
async def test_rewards_join_whatever_run_label_the_proxy_used(store: Store, label: str) -> None:
    # Records are filed under the run's key; the label inside them is the
    # proxy's business and must not decide whether a reward is joined.
    await seed(store, "local/run-1", scenario(label).records)
    samples = await run_samples(store, "local/run-1", RESULTS, [])
    assert samples and {s.reward for s in samples} == {0.5}
    assert {s.run for s in samples} == {label}


async def test_no_graded_round_leaves_rewards_unset(store: Store) -> None:
    await seed(store, "local/run-1", scenario("run-1").records)
    ungraded = {"round_scores": [dict(RESULTS["round_scores"][2])]}
    for results in ({}, ungraded):
        samples = await run_samples(store, "local/run-1", results, [])
        assert samples and all(s.reward is None for s in samples)


async def test_empty_and_other_runs(store: Store) -> None:
    assert await run_samples(store, "local/run-1", RESULTS, []) == []
    await seed(store, "alice/run-1", scenario("run-1").records)
    assert await run_samples(store, "local/run-1", RESULTS, []) == []
    assert await run_samples(store, "alice/run-1", RESULTS, [])


@pytest.mark.parametrize("roles", [[""], [" agent"], ["x" * 65], ["a\nb"], ["r"] * 65])
async def test_bad_roles_name_the_field(store: Store, roles: list[str]) -> None:
    with pytest.raises(InvalidArgument) as e:
        await run_samples(store, "local/run-1", RESULTS, roles)
    assert e.value.field == "trainable_roles"


async def test_a_damaged_stored_record_is_not_blamed_on_the_request(store: Store) -> None:
    good = call("run-1", "ok", t=1, prompt=[1], completion=[2])
    bad = dict(call("run-1", "bad", t=2, prompt=[1], completion=[2]), prompt_token_ids=["x"])
    await seed(store, "local/run-1", [good, bad])
    with pytest.raises(FailedPrecondition) as e:
        await run_samples(store, "local/run-1", RESULTS, [])
    assert e.value.reason == "INVALID_STORED_RECORD" and "'bad'" in e.value.message


# -- RunManager ------------------------------------------------------------------------


async def manager_with_run(store: Store, tenant: str, run_id: str, state: str) -> RunManager:
    spec = RunSpec.from_dict({"benchmark": {"name": "synthetic"}, "agent": {"harness": "scripted"}})
    await store.insert_run(
        RunRow(
            name=f"{tenant}/{run_id}",
            tenant=tenant,
            spec=spec.to_dict(),
            state=state,
            create_ns=1,
            results=RESULTS if state == "SUCCEEDED" else {},
        )
    )
    # Not started: trajectories and export only read the store.
    return RunManager(store, Registry())


async def test_manager_export_and_errors(store: Store, tmp_path: Path) -> None:
    m = await manager_with_run(store, "alice", "run-1", "SUCCEEDED")
    await seed(store, "alice/run-1", scenario("run-1").records)
    out = tmp_path / "out" / "verl.jsonl"
    assert (await m.export("alice", "runs/run-1", "verl", [], out, reward_mode="run")).rows == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["reward"] for r in rows} == {0.5}
    assert all(len(r["responses"]) == len(r["response_mask"]) for r in rows)

    # A bad format is refused before the run is even looked up.
    for name in ("runs/run-1", "runs/missing"):
        with pytest.raises(InvalidArgument) as e:
            await m.export("alice", name, "parquet", [], tmp_path / "x")
        assert e.value.field == "format"
    with pytest.raises(NotFound) as nf:
        await m.export("alice", "runs/missing", "skyrl", [], tmp_path / "x")
    assert nf.value.field == "run"
    with pytest.raises(NotFound):
        await m.trajectories("bob", "runs/run-1")
    with pytest.raises(InvalidArgument) as bad_name:
        await m.trajectories("alice", "run-1")
    assert bad_name.value.field == "run"
    assert not (tmp_path / "x").exists()


async def test_manager_running_run_streams_but_cannot_export_unrewarded(
    store: Store, tmp_path: Path
) -> None:
    m = await manager_with_run(store, "local", "live", "RUNNING")
    await seed(store, "local/live", scenario("live").records[:2])
    samples = await m.trajectories("local", "runs/live")
    assert [s.call_ids for s in samples] == [("call-a1", "call-a2")]
    assert samples[0].reward is None
    with pytest.raises(FailedPrecondition) as e:
        await m.export("local", "runs/live", "skyrl", [], tmp_path / "o.jsonl")
    assert e.value.reason == "NO_REWARDS"
    assert not list(tmp_path.glob("o.jsonl*")) and not list(tmp_path.glob(".o.jsonl*"))
