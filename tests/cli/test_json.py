"""`sclate ... -o json`: every field, numbers as numbers, no score told from a zero."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from google.protobuf import json_format
from sclate._json import message_to_json
from sclate_api.v1 import sclate_pb2 as pb


def _as_a_script_sees_it(msg: Any) -> Any:
    # allow_nan=False: what is printed must be JSON every parser reads.
    return json.loads(json.dumps(message_to_json(msg), allow_nan=False))


def _graded_run() -> pb.Run:
    run = pb.Run(
        name="runs/r1",
        benchmark=pb.BenchmarkSpec(name="metaclaw", subset=["day01", "day02"]),
        agent=pb.AgentSpec(harness="scripted", resources=pb.Resources(memory_bytes=2**40, pids=0)),
        clock=pb.ClockSpec(),
        labels={"team": "a", "who": "cli"},
        state=pb.SUCCEEDED,
        last_event_seq=0,
        results=pb.RunResults(
            score=0.5,
            rounds=3,
            rounds_graded=2,
            scheduler=pb.SchedulerStats(
                events_scheduled=59, events_fired=59, in_order=True, jumps=0, compression_ratio=0.0
            ),
            calls=[pb.RoleUsage(role="agent", calls=3, prompt_tokens=120, completion_tokens=0)],
        ),
    )
    run.results.round_scores.add(round_id="d1", day="1", kind="day", graded=True, score=0.0, reason="wrong")
    run.results.round_scores.add(round_id="d2", day="2", kind="day", graded=False, reason="no checker")
    run.results.round_scores.add(round_id="d3", day="3", kind="day", graded=True, score=1.0)
    run.benchmark.options.update({"days": 2, "rate": 1.5, "name": "x", "nested": {"a": [1, None, True]}})
    run.create_time.FromDatetime(dt.datetime(2026, 1, 5, 9, 0, 1, 500000, tzinfo=dt.UTC))
    return run


def test_a_round_scored_zero_keeps_its_score_and_an_ungraded_one_has_null() -> None:
    rounds = _as_a_script_sees_it(_graded_run())["results"]["round_scores"]
    assert [r["score"] for r in rounds] == [0.0, None, 1.0]
    assert isinstance(rounds[0]["score"], float) and rounds[0]["graded"] is True
    assert rounds[1]["graded"] is False
    assert "score" in rounds[1]


def test_counts_are_numbers_and_zero_values_are_present() -> None:
    got = _as_a_script_sees_it(_graded_run())
    sched = got["results"]["scheduler"]
    assert sched["events_fired"] == 59 and type(sched["events_fired"]) is int
    assert sched["jumps"] == 0 and type(sched["jumps"]) is int
    assert sched["compression_ratio"] == 0.0 and type(sched["compression_ratio"]) is float
    assert sched["delivery_delay_ms_p50"] == 0.0
    assert sched["in_order"] is True and sched["unfired"] == []
    # What the proto3 JSON mapping printed before: zeros left out, counts as strings.
    legacy = json_format.MessageToDict(_graded_run(), preserving_proto_field_name=True)["results"]["scheduler"]
    assert "jumps" not in legacy and legacy["events_fired"] == "59"
    assert got["last_event_seq"] == 0 and type(got["last_event_seq"]) is int
    resources = got["agent"]["resources"]
    assert list(resources) == [f.name for f in pb.Resources.DESCRIPTOR.fields]
    assert (resources["memory_bytes"], resources["cpus"], resources["pids"]) == (2**40, 0.0, 0)
    assert type(resources["cpus"]) is float and type(resources["pids"]) is int
    (call,) = got["results"]["calls"]
    assert list(call) == [f.name for f in pb.RoleUsage.DESCRIPTOR.fields]
    assert (call["role"], call["calls"], call["prompt_tokens"], call["completion_tokens"]) == ("agent", 3, 120, 0)
    assert all(type(call[k]) is int for k in ("calls", "prompt_tokens", "completion_tokens"))
    assert list(sched) == [f.name for f in pb.SchedulerStats.DESCRIPTOR.fields]
    assert got["results"]["rounds"] == 3 and got["results"]["score"] == 0.5
    assert got["state_reason"] == "" and got["parent"] == ""


def test_enums_timestamps_structs_maps_and_unset_messages() -> None:
    got = _as_a_script_sees_it(_graded_run())
    assert got["state"] == "SUCCEEDED"
    assert got["clock"]["mode"] == "CLOCK_MODE_UNSPECIFIED"
    assert got["create_time"] == "2026-01-05T09:00:01.500Z"
    assert got["start_time"] is None and got["sim_time"] is None
    assert got["clock"]["start_time"] is None
    assert got["benchmark"]["options"] == {"days": 2, "rate": 1.5, "name": "x", "nested": {"a": [1, None, True]}}
    assert type(got["benchmark"]["options"]["days"]) is int
    assert got["agent"]["options"] == {}
    assert got["labels"] == {"team": "a", "who": "cli"}
    assert got["benchmark"]["subset"] == ["day01", "day02"]
    assert list(got) == [f.name for f in pb.Run.DESCRIPTOR.fields]


def test_a_run_without_a_graded_round_has_a_null_score() -> None:
    run = pb.Run(name="runs/r2", results=pb.RunResults(rounds=2, rounds_graded=0))
    got = _as_a_script_sees_it(run)
    assert "score" in got["results"] and got["results"]["score"] is None
    assert got["results"]["scheduler"] is None
    assert _as_a_script_sees_it(pb.Run(name="runs/r3"))["results"] is None


def test_only_the_chosen_oneof_member_is_written() -> None:
    ev = pb.RunEvent(seq=7, run="runs/r1", verdict=pb.VerdictEvent(round_id="d1", graded=True, score=0.0))
    ev.sim_time.FromSeconds(0)
    got = _as_a_script_sees_it(ev)
    assert got == {
        "seq": 7,
        "run": "runs/r1",
        "sim_time": "1970-01-01T00:00:00Z",
        "wall_time": None,
        "verdict": {"round_id": "d1", "graded": True, "score": 0.0, "reason": ""},
    }


def test_repeated_int64_optional_bytes_and_non_finite_numbers() -> None:
    t = pb.Trajectory(trajectory_id="t", prompt_token_ids=[1, 2**40], loss_mask=[0, 1], rollout_logprobs=[-0.5])
    got = _as_a_script_sees_it(t)
    assert got["prompt_token_ids"] == [1, 2**40] and all(type(i) is int for i in got["prompt_token_ids"])
    assert got["reward"] is None
    t.reward = 0.0
    assert _as_a_script_sees_it(t)["reward"] == 0.0
    assert _as_a_script_sees_it(pb.ExportChunk(data=b"{}\n", rows=0)) == {"data": "e30K", "rows": 0, "left_out": []}
    stats = pb.SchedulerStats(compression_limit=float("inf"), delivery_delay_ms_max=float("nan"))
    got = _as_a_script_sees_it(stats)
    assert got["compression_limit"] == "Infinity" and got["delivery_delay_ms_max"] == "NaN"
