"""Per-round rewards and group exports of stored runs (sclated.runs._trajectories):
turns from the journal, verdicts from the stored results read at export time,
a group's members from the store; and the journal a real run writes."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.capture import TurnSpan
from sclated.errors import FailedPrecondition, InvalidArgument
from sclated.runs import RunManager, RunSpec
from sclated.runs._registry import Registry
from sclated.runs._trajectories import export_run, export_run_group, run_group, run_samples, turn_spans
from sclated.store import JournalRow, RunRow, Store, WriteBatch
from tests.api.conftest import _start, synthetic_request
from tests.runs.capture_records import BASE_NS, call

S = 1_000_000_000


def fire(seq: int, event_id: str, fired_ns: int) -> dict[str, Any]:
    return {
        "t": "fire",
        "seq": seq,
        "event_id": event_id,
        "source": "bench",
        "due_ns": fired_ns,
        "fired_ns": fired_ns,
        "priority": 2,
        "rank": 0,
        "arrival": seq,
        "version": seq,
        "effects": ["deliver_prompt"],
    }


def turn_end(seq: int, at_ns: int, event_id: str, round_id: str) -> dict[str, Any]:
    return {
        "t": "input",
        "seq": seq,
        "kind": "action",
        "at_ns": at_ns,
        "version": seq,
        "payload": {
            "actor": "agent",
            "kind": "turn_end",
            "data": {"round_id": round_id, "event_id": event_id, "reply": "ok", "delivery": {"event_id": event_id}},
        },
        "source": "",
        "specs": [],
    }


def at(t: float) -> int:
    return BASE_NS + int(t * S)


# Two rounds, one turn each (seconds after BASE_NS), a notification turn between them.
JOURNAL = [
    fire(0, "q1", at(0.5)),
    turn_end(1, at(2.5), "q1", "d1.q1"),
    fire(2, "note", at(2.6)),
    turn_end(3, at(2.8), "note", ""),
    fire(4, "q2", at(3.5)),
    {"t": "input", "seq": 5, "kind": "grade", "at_ns": at(3.6), "version": 5, "payload": {}, "source": "", "specs": []},
    turn_end(6, at(4.5), "q2", "d1.q2"),
]


def results(**scores: float | None) -> dict[str, Any]:
    rows: list[dict[str, Any]] = [
        {"round_id": rid.replace("_", "."), "graded": score is not None, "score": score}
        for rid, score in scores.items()
    ]
    graded = [float(score) for score in scores.values() if score is not None]
    return {"score": sum(graded) / len(graded) if graded else None, "round_scores": rows}


def records(run: str, prefix: str = "") -> list[dict[str, Any]]:
    p0 = [1, 2, 3]
    return [
        call(run, f"{prefix}a1", t=1, prompt=p0, completion=[10, 11]),
        call(run, f"{prefix}a2", t=2, prompt=[*p0, 10, 11, 20], completion=[12]),
        call(run, f"{prefix}m1", t=3, role="memory", thread="t-mem", prompt=[900], completion=[901]),
        call(run, f"{prefix}a3", t=4, prompt=[*p0, 10, 11, 20, 12, 30], completion=[13]),
    ]


async def seed(
    store: Store, key: str, recs: list[dict[str, Any]], journal: list[dict[str, Any]], res: dict[str, Any]
) -> None:
    spec = RunSpec.from_dict({"benchmark": {"name": "synthetic"}, "agent": {"harness": "scripted"}})
    await store.insert_run(
        RunRow(name=key, tenant=key.split("/")[0], spec=spec.to_dict(), state="SUCCEEDED", create_ns=1, results=res)
    )
    for r in recs:
        assert await store.put_call(key, r["call_id"], r["role"], r)
    await store.write(WriteBatch(journal=[JournalRow(key, int(e["seq"]), e) for e in journal]))


def test_turn_spans_from_the_journal() -> None:
    spans = turn_spans(JOURNAL)
    assert spans == [
        TurnSpan("d1.q1", at(0.5), at(2.5), "q1"),
        TurnSpan("", at(2.6), at(2.8), "note"),
        TurnSpan("d1.q2", at(3.5), at(4.5), "q2"),
    ]
    # A prompt fired while the turn before still ran starts when that turn ended; a
    # turn_end whose fire is not in the journal is skipped.
    overlapping = [
        fire(0, "a", at(1)),
        fire(1, "b", at(2)),
        turn_end(2, at(3), "a", "ra"),
        turn_end(3, at(4), "b", "rb"),
        turn_end(4, at(5), "gone", "rc"),
    ]
    assert [(s.round_id, s.start_ns, s.end_ns) for s in turn_spans(overlapping)] == [
        ("ra", at(1), at(3)),
        ("rb", at(3), at(4)),
    ]
    assert turn_spans([]) == []


async def test_round_rewards_are_read_at_export_time(store: Store, tmp_path: Path) -> None:
    key = "local/r1"
    await seed(store, key, records("r1"), JOURNAL, results(d1_q1=1.0, d1_q2=None))
    out = tmp_path / "o.jsonl"

    async def export() -> tuple[Any, list[dict[str, Any]]]:
        row = await store.get_run(key)
        assert row is not None
        report = await export_run(store, key, row.results, "verl", out)
        return report, [json.loads(line) for line in out.read_text().splitlines()]

    report, (row,) = await export()
    # d1.q2 is not graded yet: the agent sample is credited d1.q1 only; the memory
    # call between turns has no round and is left out.
    assert row["reward"] == 1.0 and row["turn_scores"] == [1.0]
    assert row["metadata"]["rounds"] == ["d1.q1", "d1.q1", "d1.q2"]
    assert [(lo.reason, lo.run) for lo in report.left_out] == [("no_round", "r1")]

    # A late verdict written into the stored results: the next export has other rewards.
    await store.update_run(key, results=results(d1_q1=1.0, d1_q2=0.0))
    _, (row2,) = await export()
    assert row2["reward"] == 0.5 and row2["turn_scores"] == [1.0, 0.0]
    assert row2["token_rewards"][3] == 1.0 and row2["token_rewards"][-1] == 0.0
    await store.update_run(key, results=results(d1_q1=0.25, d1_q2=1.0))
    _, (row3,) = await export()
    assert row3["reward"] == pytest.approx(0.625) and row3["turn_scores"] == [0.25, 1.0]

    # run mode: every sample gets the run's score, the memory sample too.
    row_now = await store.get_run(key)
    assert row_now is not None
    run_mode = await export_run(store, key, row_now.results, "skyrl", out, reward_mode="run")
    assert run_mode.rows == 2 and not run_mode.left_out
    assert {json.loads(line)["rewards"] for line in out.read_text().splitlines()} == {0.625}

    # refuse, bad arguments: checked, nothing written.
    with pytest.raises(FailedPrecondition) as e:
        await export_run(store, key, row_now.results, "skyrl", tmp_path / "x", unrewarded="refuse")
    assert e.value.reason == "NO_REWARDS"
    for kw, field in (({"reward_mode": "episode"}, "reward_mode"), ({"unrewarded": "no"}, "unrewarded")):
        with pytest.raises(InvalidArgument) as ia:
            await export_run(store, key, row_now.results, "skyrl", tmp_path / "x", **kw)
        assert ia.value.field == field
    with pytest.raises(InvalidArgument) as ia:
        await export_run(store, key, row_now.results, "skyrl", tmp_path / "x", only=[" x"])
    assert ia.value.field == "roles"
    assert not (tmp_path / "x").exists()
    # Only the memory role: its one sample has no reward, so nothing to export.
    with pytest.raises(FailedPrecondition):
        await export_run(store, key, row_now.results, "skyrl", tmp_path / "x", only=["memory"])


async def test_the_manager_reads_verdicts_at_export_time(store: Store, tmp_path: Path) -> None:
    # The manager's export joins the stored results anew each time (here: the run's mean).
    key = "local/r1"
    await seed(store, key, records("r1"), JOURNAL, results(d1_q1=1.0, d1_q2=None))
    m = RunManager(store, Registry())
    out = tmp_path / "m.jsonl"
    assert (await m.export("local", "runs/r1", "verl", [], out, reward_mode="run")).rows == 2
    assert {json.loads(line)["reward"] for line in out.read_text().splitlines()} == {1.0}
    await store.update_run(key, results=results(d1_q1=1.0, d1_q2=0.0))
    await m.export("local", "runs/r1", "verl", [], out, reward_mode="run")
    assert {json.loads(line)["reward"] for line in out.read_text().splitlines()} == {0.5}


async def test_group_of_stored_runs(store: Store, tmp_path: Path) -> None:
    # The parent ran turn 1 (d1.q1) and was snapshotted; two members were branched from
    # it (its calls and journal copied) and each ran turn 2 its own way.
    parent = records("src")[:3]  # a1, a2, m1
    pre_journal = JOURNAL[:4]
    for i, cont in enumerate(([13, 14], [15])):
        key = f"local/g1-{i}"
        own = call(f"g1-{i}", f"g1-{i}-a3", t=4, prompt=[1, 2, 3, 10, 11, 20, 12, 30], completion=cont)
        post = [fire(4, "q2", at(3.5)), turn_end(5, at(4.5), "q2", "d1.q2")]
        await seed(store, key, [*parent, own], [*pre_journal, *post], results(d1_q1=1.0, d1_q2=float(1 - i)))
    members = []
    for i in range(2):
        row = await store.get_run(f"local/g1-{i}")
        assert row is not None
        members.append((f"runs/g1-{i}", row.name, row.results))

    explicit = await run_group(store, "g1", {"a1", "a2", "m1"}, members)
    derived = await run_group(store, "g1", None, members)
    assert explicit == derived
    (g,) = derived.groups.values()
    assert [(r.member, r.index, r.size, r.rewards) for r in g] == [
        ("runs/g1-0", 0, 2, (1.0, 0.0)),
        ("runs/g1-1", 1, 2, (1.0, 0.0)),
    ]
    assert g[0].sample.prompt_token_ids == (1, 2, 3, 10, 11, 20, 12)
    assert g[0].sample.response_ids == (30, 13, 14) and g[1].sample.response_ids == (30, 15)

    out = tmp_path / "g.jsonl"
    report = await export_run_group(store, "g1", None, members, "skyrl", out)
    assert report.rows == 2 and report.left_out_counts() == {"before_branch": 2}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["trajectory_id"]["repetition_id"] for r in rows] == [0, 1]
    assert len({r["trajectory_id"]["instance_id"] for r in rows}) == 1
    assert [r["rewards"] for r in rows] == [1.0, 0.0]

    with pytest.raises(InvalidArgument) as e:
        await run_group(store, "g1", None, members[:1])
    assert e.value.field == "branch_calls"


# -- the journal a real run writes --------------------------------------------------------


async def test_spans_of_a_real_runs_journal(tmp_path: Path) -> None:
    d = await _start(tmp_path, tokens=False)
    try:
        async with grpc.aio.insecure_channel(d.tcp_address or "") as ch:
            stub = pb_grpc.SclateStub(ch)
            run = await stub.CreateRun(synthetic_request(days=2, events=2))
            async for _ in stub.WatchRun(pb.WatchRunRequest(name=run.name)):
                pass
            run = await stub.GetRun(pb.GetRunRequest(name=run.name))
        assert run.state == pb.SUCCEEDED
        key = f"local/{run.name.removeprefix('runs/')}"
        spans = turn_spans(await d.store.journal(key))
        # One span per delivered prompt (the day's tasks, its reminder), in order, none overlapping.
        assert [s.round_id for s in spans if s.round_id] == ["d0.task0", "d0.task1", "d1.task0", "d1.task1"]
        assert [s.event_id for s in spans if not s.round_id] == ["d0.review", "d1.review"]
        assert all(a.end_ns <= b.start_ns for a, b in itertools.pairwise(spans))
        assert all(s.start_ns <= s.end_ns for s in spans)
        # A call in each turn: a task's call gets its day's verdict (the graded round),
        # the reminder's none.
        rid = run.name.removeprefix("runs/")
        for i, s in enumerate(spans):
            r = call(rid, f"c{i}", t=0, prompt=[1, i], completion=[2], thread=f"t{i}")
            r["timings"] = {"start_ns": s.start_ns, "first_byte_ns": None, "end_ns": s.end_ns}
            await d.store.put_call(key, r["call_id"], r["role"], r)
        row = await d.store.get_run(key)
        assert row is not None
        samples = await run_samples(d.store, key, row.results, reward_mode="round")
        scores = {r.round_id: r.score for r in run.results.round_scores if r.graded}
        assert set(scores) == {"d0", "d1"}
        got = {s.thread: (s.rounds, s.reward) for s in samples}
        for i, span in enumerate(spans):
            day = span.round_id.split(".")[0] if span.round_id else None
            assert got[f"t{i}"] == ((day,), scores[day] if day else None)
    finally:
        await d.stop()
