"""StreamTrajectories, ExportTrajectories and `sclate runs export|trajectories`
against an in-process daemon whose store is seeded with captured calls."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from sclate import cli
from sclate_api.v1 import sclate_pb2 as pb

from sclated.api import LOCAL_TENANT
from sclated.api._servicer import EXPORT_CHUNK_BYTES
from tests.api.conftest import Api
from tests.api.test_api import expect_error
from tests.runs.capture_records import Scenario, call, sampled, scenario


@pytest.fixture(autouse=True)
def export_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the daemon builds its export files, so a test can see leftovers."""
    d = tmp_path / "daemon-tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


async def seed(api: Api, run: pb.Run, records: list[dict[str, Any]], tenant: str) -> None:
    key = f"{tenant}/{run.name.removeprefix('runs/')}"
    for r in records:
        assert await api.daemon.store.put_call(key, r["call_id"], r["role"], r)


async def finished_run(api: Api, tenant: str = LOCAL_TENANT, run_id: str = "") -> tuple[pb.Run, Scenario]:
    run = await api.create(days=2, run_id=run_id)
    await api.watch_all(run.name)
    run = await api.stub.GetRun(pb.GetRunRequest(name=run.name), metadata=api.md())
    assert run.state == pb.SUCCEEDED and run.results.rounds_graded > 0
    sc = scenario(run.name.removeprefix("runs/"))
    await seed(api, run, sc.records, tenant)
    return run, sc


async def trajectories(
    api: Api, name: str, roles: tuple[str, ...] = (), only: tuple[str, ...] = (), reward_mode: str = "run"
) -> list[pb.Trajectory]:
    req = pb.StreamTrajectoriesRequest(run=name, trainable_roles=roles, roles=only, reward_mode=reward_mode)
    return [t async for t in api.stub.StreamTrajectories(req, metadata=api.md())]


async def export_chunks(
    api: Api,
    name: str,
    fmt: str,
    roles: tuple[str, ...] = (),
    only: tuple[str, ...] = (),
    reward_mode: str = "run",
    unrewarded: str = "",
) -> list[pb.ExportChunk]:
    """The seeded calls' times fall in no turn of the run: the run's mean is their reward."""
    req = pb.ExportTrajectoriesRequest(
        run=name, format=fmt, trainable_roles=roles, roles=only, reward_mode=reward_mode, unrewarded=unrewarded
    )
    return [c async for c in api.stub.ExportTrajectories(req, metadata=api.md())]


def rows_of(chunks: list[pb.ExportChunk]) -> list[dict[str, Any]]:
    assert chunks, "an export with rows sends at least one chunk"
    assert all(c.rows == 0 for c in chunks[:-1])
    assert all(0 < len(c.data) <= EXPORT_CHUNK_BYTES for c in chunks)
    body = b"".join(c.data for c in chunks).decode()
    assert body.endswith("\n")
    rows = [json.loads(line) for line in body.splitlines()]
    assert chunks[-1].rows == len(rows)
    return rows


async def test_stream_trajectories_of_a_finished_run(api: Api) -> None:
    run, sc = await finished_run(api)
    ts = await trajectories(api, run.name)
    assert len(ts) == 3
    by_thread = {t.thread: t for t in ts}
    for t in ts:
        assert t.run == run.name
        n = len(t.response_ids)
        assert n > 0 and len(t.loss_mask) == n
        assert len(t.rollout_logprobs) in (0, n)
        # Rewards come from the run's own graded verdicts.
        assert t.HasField("reward") and t.reward == pytest.approx(run.results.score)
        assert sc.failed not in t.call_ids
    agent = by_thread["t-main"]
    assert tuple(agent.call_ids) == sc.agent_calls and agent.role == "agent"
    assert list(agent.prompt_token_ids) == sc.agent_prompt
    assert sum(agent.loss_mask) == sampled(sc.records, sc.agent_calls)
    assert len(agent.rollout_logprobs) == len(agent.response_ids)
    assert agent.branch_reason == "new_thread" and agent.stop_reason == "stop"
    # Observation tokens carry no logprob of their own.
    assert all(lp == 0.0 for lp, m in zip(agent.rollout_logprobs, agent.loss_mask, strict=True) if not m)
    memory = by_thread["t-memory"]
    assert memory.role == "memory" and set(memory.loss_mask) == {0}
    sub = by_thread["t-sub"]
    # The sub-agent's server returned no logprobs: none rather than a partial list.
    assert sub.branch_reason == "subagent" and list(sub.rollout_logprobs) == []

    trained = {t.thread: t for t in await trajectories(api, run.name, ("agent", "memory"))}
    assert set(trained["t-memory"].loss_mask) == {1}
    assert list(trained["t-main"].loss_mask) == list(agent.loss_mask)
    # The memory calls on their own, trained.
    (alone,) = await trajectories(api, run.name, ("memory",), ("memory",))
    assert alone.thread == "t-memory" and set(alone.loss_mask) == {1}
    assert {t.role for t in await trajectories(api, run.name, only=("agent",))} == {"agent"}


@pytest.mark.parametrize("fmt", ["skyrl", "verl", "atif"])
async def test_export_each_format(api: Api, export_tmp: Path, fmt: str) -> None:
    run, sc = await finished_run(api)
    rows = rows_of(await export_chunks(api, run.name, fmt))
    assert len(rows) == 3
    score = pytest.approx(run.results.score)
    if fmt == "skyrl":
        for r in rows:
            assert len(r["response_ids"]) == len(r["loss_masks"]) > 0
            assert r["rollout_logprobs"] is None or len(r["rollout_logprobs"]) == len(r["response_ids"])
            assert r["rewards"] == score
        by_role = {r["metadata"]["role"]: r for r in rows if r["metadata"]["thread"] != "t-sub"}
        assert set(by_role["memory"]["loss_masks"]) == {0}
        assert by_role["agent"]["metadata"]["call_ids"] == list(sc.agent_calls)
    elif fmt == "verl":
        for r in rows:
            assert len(r["responses"]) == len(r["response_mask"]) > 0
            assert r["reward"] == score
        agent = next(r for r in rows if r["metadata"]["thread"] == "t-main")
        assert agent["num_turns"] == len(sc.agent_calls)
        assert len(agent["rollout_log_probs"]) == len(agent["responses"])
    else:
        for r in rows:
            assert r["schema_version"] == "ATIF-v1.4" and r["extra"]["reward"] == score
            for step in r["steps"]:
                m = step.get("metrics") or {}
                if "logprobs" in m:
                    assert len(m["logprobs"]) == len(m["completion_token_ids"])
        agent = next(r for r in rows if r["extra"]["thread"] == "t-main")
        tools = [s for s in agent["steps"] if s.get("tool_calls")]
        assert tools and tools[0]["observation"]["results"][0]["content"] == "a.txt b.txt"
    memory_trained = rows_of(await export_chunks(api, run.name, fmt, ("agent", "memory")))
    if fmt == "skyrl":
        mem = next(r for r in memory_trained if r["metadata"]["role"] == "memory")
        assert set(mem["loss_masks"]) == {1}
    assert list(export_tmp.iterdir()) == []


async def test_large_export_is_chunked_and_cleaned_up(api: Api, export_tmp: Path) -> None:
    run = await api.create()
    await api.watch_all(run.name)
    n = 250_000
    big = call(
        run.name.removeprefix("runs/"),
        "big",
        t=1,
        prompt=list(range(10_000, 10_100)),
        completion=[10_000 + i % 40_000 for i in range(n)],
    )
    await seed(api, run, [big], LOCAL_TENANT)
    chunks = await export_chunks(api, run.name, "skyrl")
    assert len(chunks) >= 3
    (row,) = rows_of(chunks)
    assert len(row["response_ids"]) == len(row["loss_masks"]) == len(row["rollout_logprobs"]) == n
    assert list(export_tmp.iterdir()) == []

    # A client that goes away after the first chunk leaves nothing behind either.
    stream = api.stub.ExportTrajectories(pb.ExportTrajectoriesRequest(run=run.name, format="verl", reward_mode="run"))
    first = await stream.read()
    assert isinstance(first, pb.ExportChunk) and first.rows == 0
    stream.cancel()
    assert list(export_tmp.iterdir()) == []
    # The daemon still answers.
    assert len(await trajectories(api, run.name)) == 1


async def test_partial_logprobs_are_sent_as_none(api: Api) -> None:
    run = await api.create()
    await api.watch_all(run.name)
    rid = run.name.removeprefix("runs/")
    # The server returned logprobs for the first call and not for the second.
    first = call(rid, "lp", t=1, prompt=[1, 2], completion=[3, 4])
    second = call(rid, "no-lp", t=2, prompt=[1, 2, 3, 4, 5], completion=[6], logprobs=False)
    await seed(api, run, [first, second], LOCAL_TENANT)
    (t,) = await trajectories(api, run.name)
    assert list(t.call_ids) == ["lp", "no-lp"] and len(t.response_ids) == 4
    assert list(t.rollout_logprobs) == []
    (row,) = rows_of(await export_chunks(api, run.name, "skyrl"))
    assert row["rollout_logprobs"] is None


async def test_bad_input_and_missing_runs(api: Api) -> None:
    run, _ = await finished_run(api)
    for name in (run.name, "runs/missing"):
        err = await expect_error(export_chunks(api, name, "parquet"), grpc.StatusCode.INVALID_ARGUMENT)
        assert err["sclate-field"] == "format" and "skyrl" in err["details"]
    err = await expect_error(export_chunks(api, "runs/missing", "verl"), grpc.StatusCode.NOT_FOUND)
    assert err["sclate-field"] == "run"
    err = await expect_error(trajectories(api, "runs/missing"), grpc.StatusCode.NOT_FOUND)
    assert err["sclate-field"] == "run"
    err = await expect_error(trajectories(api, "missing"), grpc.StatusCode.INVALID_ARGUMENT)
    assert err["sclate-field"] == "run"
    for call_ in (trajectories(api, run.name, ("",)), export_chunks(api, run.name, "verl", ("",))):
        err = await expect_error(call_, grpc.StatusCode.INVALID_ARGUMENT)
        assert err["sclate-field"] == "trainable_roles"
    for call_ in (trajectories(api, run.name, only=(" x",)), export_chunks(api, run.name, "verl", only=("",))):
        err = await expect_error(call_, grpc.StatusCode.INVALID_ARGUMENT)
        assert err["sclate-field"] == "roles"


async def test_a_run_without_captured_calls_is_empty_not_an_error(api: Api) -> None:
    run = await api.create()
    await api.watch_all(run.name)
    assert await trajectories(api, run.name) == []
    assert await export_chunks(api, run.name, "skyrl") == []


async def test_round_rewards_never_invent_one_for_calls_outside_every_round(api: Api) -> None:
    # The seeded calls' (simulated) times lie in no turn of the run: in round mode
    # (the default) none has a reward; nothing is exported rather than a made-up 0.
    run, _ = await finished_run(api)
    for t in await trajectories(api, run.name, reward_mode="round"):
        assert not t.HasField("reward")
    for unrewarded in ("", "skip", "refuse"):
        err = await expect_error(
            export_chunks(api, run.name, "skyrl", reward_mode="round", unrewarded=unrewarded),
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        assert err["sclate-reason"] == "NO_REWARDS" and "no_round" in err["details"]
    err = await expect_error(
        export_chunks(api, run.name, "skyrl", reward_mode="mean"), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert err["sclate-field"] == "reward_mode"


async def test_a_running_run_streams_what_is_captured_so_far(api: Api) -> None:
    run = await api.create(days=3, events=3, turn_ms=200)
    async for ev in api.stub.WatchRun(pb.WatchRunRequest(name=run.name)):
        if ev.WhichOneof("kind") == "state" and ev.state.state == pb.RUNNING:
            break
    sc = scenario(run.name.removeprefix("runs/"))
    await seed(api, run, sc.records[:2], LOCAL_TENANT)
    (t,) = await trajectories(api, run.name)
    assert list(t.call_ids) == ["call-a1", "call-a2"]
    assert not t.HasField("reward")  # nothing graded in the results yet
    err = await expect_error(export_chunks(api, run.name, "verl"), grpc.StatusCode.FAILED_PRECONDITION)
    assert err["sclate-reason"] == "NO_REWARDS"
    await api.stub.CancelRun(pb.CancelRunRequest(name=run.name))


async def test_tenants_only_see_their_own_trajectories(
    tenant_api: Callable[[str | None], Api],
) -> None:
    alice, bob = tenant_api("alice"), tenant_api("bob")
    run, _ = await finished_run(alice, "alice", run_id="shared")
    assert len(await trajectories(alice, run.name)) == 3
    for call_ in (trajectories(bob, run.name), export_chunks(bob, run.name, "skyrl")):
        await expect_error(call_, grpc.StatusCode.NOT_FOUND)
    # Bob's run of the same id sees none of alice's calls.
    theirs = await bob.create(run_id="shared")
    await bob.watch_all(theirs.name)
    assert await trajectories(bob, theirs.name) == []
    assert await export_chunks(bob, theirs.name, "atif") == []
    await expect_error(trajectories(tenant_api(None), run.name), grpc.StatusCode.UNAUTHENTICATED)


# -- CLI ---------------------------------------------------------------------------------


async def sclate(api: Api, *argv: str) -> int:
    # The CLI's client is synchronous; the daemon lives on this loop.
    return await asyncio.to_thread(cli.main, ["--endpoint", api.daemon.tcp_address or "", *argv])


async def test_cli_export_and_trajectories(api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, sc = await finished_run(api)
    out = tmp_path / "out" / "train.jsonl"
    rid = run.name.removeprefix("runs/")
    assert await sclate(api, "runs", "export", rid, "--format", "verl", "--out", str(out), "--reward-mode", "run") == 0
    assert capsys.readouterr().out.strip() == f"wrote 3 verl rows to {out}"
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and all(len(r["responses"]) == len(r["response_mask"]) for r in rows)
    mem = next(r for r in rows if r["metadata"]["role"] == "memory")
    assert set(mem["response_mask"]) == {0}
    args = ("runs", "export", run.name, "--format", "skyrl", "--out", str(out), "--reward-mode", "run")
    assert await sclate(api, *args, "--role", "agent", "--role", "memory") == 0
    capsys.readouterr()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert set(next(r for r in rows if r["metadata"]["role"] == "memory")["loss_masks"]) == {1}
    assert sorted(p.name for p in out.parent.iterdir()) == ["train.jsonl"]
    # --role memory: the memory calls on their own, in the loss.
    assert await sclate(api, *args, "--role", "memory") == 0
    assert capsys.readouterr().out.strip() == f"wrote 1 skyrl rows to {out}"
    (only,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert only["metadata"]["role"] == "memory" and set(only["loss_masks"]) == {1}

    # A failed export keeps the previous file and leaves no partial one.
    before = out.read_bytes()
    bad = ("runs", "export", "missing", "--format", "skyrl", "--out", str(out))
    assert await sclate(api, *bad) == 2
    assert "NOT_FOUND" in capsys.readouterr().err
    assert out.read_bytes() == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["train.jsonl"]

    assert await sclate(api, "runs", "trajectories", rid, "--reward-mode", "run") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    agent = next(line for line in lines if "/t-main/" in line)
    assert "new_thread" in agent and f"calls {len(sc.agent_calls)}" in agent
    assert f"trained {sampled(sc.records, sc.agent_calls)}" in agent
    assert await sclate(api, "runs", "trajectories", rid, "-o", "json", "--reward-mode", "run") == 0
    js = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(j["thread"] for j in js) == ["t-main", "t-memory", "t-sub"]


def test_cli_write_is_atomic(tmp_path: Path) -> None:
    out = tmp_path / "cli" / "o.jsonl"

    def broken() -> Iterator[bytes]:
        yield b'{"a": 1}\n'
        raise cli.CliError("UNAVAILABLE: connection lost")

    with pytest.raises(cli.CliError):
        cli.write_atomic(out, broken())
    assert list(out.parent.iterdir()) == []
    cli.write_atomic(out, iter([b"x\n", b"y\n"]))
    assert out.read_bytes() == b"x\ny\n" and list(out.parent.iterdir()) == [out]
