"""Between sclate.v1 messages and the runs room's values."""

from __future__ import annotations

import math
from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2
from sclate_api.v1 import sclate_pb2 as pb

from sclated.errors import InvalidArgument
from sclated.runs import RunSpec, RunView, SnapshotView
from sclated.store import EventRow

__all__ = ["event_to_proto", "run_spec_from_proto", "run_to_proto", "snapshot_to_proto"]

_MAX_OPTIONS_BYTES = 64 * 1024
_CLOCK_MODES = {
    pb.CLOCK_MODE_UNSPECIFIED: "hybrid",
    pb.HYBRID: "hybrid",
    pb.REALTIME: "realtime",
    pb.DISCRETE: "discrete",
}
_CLOCK_ENUM = {"hybrid": pb.HYBRID, "realtime": pb.REALTIME, "discrete": pb.DISCRETE}


def _ts(ns: int | None) -> timestamp_pb2.Timestamp | None:
    if ns is None:
        return None
    t = timestamp_pb2.Timestamp()
    t.FromNanoseconds(ns)
    return t


def _non_finite(value: struct_pb2.Value, path: str) -> str | None:
    """The path of the first NaN or infinite number in ``value``, if any."""
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        return None if math.isfinite(value.number_value) else path
    if kind == "struct_value":
        for key, item in value.struct_value.fields.items():
            found = _non_finite(item, f"{path}.{key}")
            if found is not None:
                return found
    if kind == "list_value":
        for i, item in enumerate(value.list_value.values):
            found = _non_finite(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def _struct_to_dict(s: struct_pb2.Struct, field: str) -> dict[str, Any]:
    if s.ByteSize() > _MAX_OPTIONS_BYTES:
        raise InvalidArgument(f"{field} is larger than {_MAX_OPTIONS_BYTES} bytes", field=field)
    for key, item in s.fields.items():
        # Options are JSON, which has no NaN or infinity (json_format refuses to convert them).
        bad = _non_finite(item, f"{field}.{key}")
        if bad is not None:
            raise InvalidArgument(f"{bad} is NaN or infinite; options hold JSON numbers only", field=bad)
    out: dict[str, Any] = json_format.MessageToDict(s)
    return out


_MIN_TIMESTAMP_S, _MAX_TIMESTAMP_S = -62135596800, 253402300799
"""The range google.protobuf.Timestamp allows (0001-01-01 to 9999-12-31)."""


def _timestamp_ns(ts: timestamp_pb2.Timestamp, field: str) -> int:
    if not _MIN_TIMESTAMP_S <= ts.seconds <= _MAX_TIMESTAMP_S or not 0 <= ts.nanos <= 999_999_999:
        raise InvalidArgument(
            f"{field} is not a valid Timestamp (seconds {ts.seconds} must be in [{_MIN_TIMESTAMP_S}, "
            f"{_MAX_TIMESTAMP_S}], nanos {ts.nanos} in [0, 999999999])",
            field=field,
        )
    ns: int = ts.ToNanoseconds()
    return ns


def run_spec_from_proto(run: pb.Run) -> RunSpec:
    if not run.HasField("benchmark"):
        raise InvalidArgument("run.benchmark is required", field="run.benchmark")
    if not run.HasField("agent"):
        raise InvalidArgument("run.agent is required", field="run.agent")
    start_ns = None
    if run.clock.HasField("start_time"):
        start_ns = _timestamp_ns(run.clock.start_time, "run.clock.start_time")
    mode = _CLOCK_MODES.get(run.clock.mode)
    if mode is None:
        raise InvalidArgument(f"run.clock.mode {run.clock.mode} is not a ClockMode", field="run.clock.mode")
    b, a = run.benchmark, run.agent
    return RunSpec.from_dict(
        {
            "benchmark": {
                "name": b.name,
                "scenario": b.scenario,
                "data_dir": b.data_dir,
                "subset": list(b.subset),
                "options": _struct_to_dict(b.options, "run.benchmark.options"),
            },
            "agent": {
                "harness": a.harness,
                "memory": a.memory,
                "model": {
                    "base_url": a.model.base_url,
                    "api": a.model.api or "openai",
                    "model": a.model.model,
                    "api_key_env": a.model.api_key_env,
                    "skip_token_ids": a.model.skip_token_ids,
                    "sampling_seed": a.model.sampling_seed if a.model.HasField("sampling_seed") else None,
                },
                "resources": {
                    "memory_bytes": a.resources.memory_bytes,
                    "cpus": a.resources.cpus,
                    "pids": a.resources.pids,
                },
                "options": _struct_to_dict(a.options, "run.agent.options"),
            },
            "clock": {"mode": mode, "start_ns": start_ns, "rate": run.clock.rate or 1.0},
            "labels": dict(run.labels),
        }
    )


def _score(value: Any) -> float | None:
    """A score of the results dict; None (the proto field left unset) means none."""
    return None if value is None else float(value)


def _results_to_proto(results: dict[str, Any]) -> pb.RunResults:
    out = pb.RunResults(
        # Results stored before scores could be None carry 0.0 for "no graded round".
        score=_score(results.get("score")) if results.get("rounds_graded") else None,
        rounds=int(results.get("rounds", 0)),
        rounds_graded=int(results.get("rounds_graded", 0)),
        report_path=str(results.get("report_path", "")),
        plot_path=str(results.get("plot_path", "")),
    )
    for r in results.get("round_scores", []):
        out.round_scores.add(
            round_id=r["round_id"],
            day=str(r.get("day", "")),
            kind=r.get("kind", ""),
            graded=bool(r.get("graded")),
            score=_score(r.get("score")) if r.get("graded") else None,
            reason=r.get("reason", ""),
        )
    s = results.get("scheduler")
    if s:
        out.scheduler.CopyFrom(
            pb.SchedulerStats(
                events_scheduled=s.get("events_scheduled", 0),
                events_fired=s.get("events_fired", 0),
                in_order=bool(s.get("in_order", False)),
                delivery_delay_ms_p50=s.get("delivery_delay_ms_p50", 0.0),
                delivery_delay_ms_max=s.get("delivery_delay_ms_max", 0.0),
                sim_span_s=s.get("sim_span_s", 0.0),
                wall_s=s.get("wall_s", 0.0),
                compression_ratio=s.get("compression_ratio", 0.0),
                compression_limit=s.get("compression_limit", 0.0) or 0.0,
                jumps=s.get("jumps", 0),
                unfired=s.get("unfired", []),
                deliveries=s.get("deliveries", 0),
                deliveries_checked=s.get("deliveries_checked", 0),
                out_of_order=s.get("out_of_order", 0),
                early_deliveries=s.get("early_deliveries", 0),
                negative_delays=s.get("negative_delays", 0),
                delivery_delay_ms_min=s.get("delivery_delay_ms_min", 0.0),
                receipt_vs_due_ms_min=s.get("receipt_vs_due_ms_min", 0.0),
                run_wall_s=s.get("run_wall_s", 0.0),
                agent_s=s.get("agent_s", 0.0),
                waiting_s=s.get("waiting_s", 0.0),
                overhead_s={str(k): float(v) for k, v in (s.get("overhead_s") or {}).items()},
                overhead_fraction=s.get("overhead_fraction", 0.0),
                compression_limit_agent=s.get("compression_limit_agent", 0.0),
                compression_vs_agent_limit=s.get("compression_vs_agent_limit", 0.0),
                end_reason=str(s.get("end_reason", "")),
                clock_mode=str(s.get("clock_mode", "")),
            )
        )
    for rows, field in ((results.get("calls", []), out.calls), (results.get("components", []), out.components)):
        for c in rows:
            field.add(
                role=c["role"],
                calls=c.get("calls", 0),
                prompt_tokens=c.get("prompt_tokens", 0),
                completion_tokens=c.get("completion_tokens", 0),
                failed=c.get("failed", 0),
                failed_by_cause={str(k): int(v) for k, v in (c.get("failed_by_cause") or {}).items()},
                unleased=c.get("unleased", 0),
            )
    if results.get("memory_token_share") is not None:
        out.memory_token_share = float(results["memory_token_share"])
    cap = results.get("capture")
    if cap:
        out.capture.CopyFrom(
            pb.CaptureStats(
                calls=cap.get("calls", 0),
                calls_failed=cap.get("calls_failed", 0),
                failed_by_cause={str(k): int(v) for k, v in (cap.get("failed_by_cause") or {}).items()},
                calls_unleased=cap.get("calls_unleased", 0),
                calls_lost=cap.get("calls_lost", 0),
                calls_recovered_at_close=cap.get("calls_recovered_at_close", 0),
                drain=str(cap.get("drain", "")),
                prompt_tokens=cap.get("prompt_tokens", 0),
                completion_tokens=cap.get("completion_tokens", 0),
            )
        )
    for j in results.get("judges", []):
        out.judges.add(
            endpoint=str(j.get("endpoint", "")),
            model=str(j.get("model", "")),
            embedded=bool(j.get("embedded")),
            note=str(j.get("note", "")),
        )
    harness = results.get("harness")
    if harness:
        probe = harness.get("probe") or {}
        out.harness.CopyFrom(
            pb.HarnessProcess(
                name=str(harness.get("harness", "")),
                version=str(harness.get("version", "")),
                process_clock=str(harness.get("process_clock", "")),
                executable=str(probe.get("executable", "")),
                linked=str(probe.get("linked", "")),
                probed_clock=str(probe.get("clock", "")),
            )
        )
    out.warnings.extend(str(w) for w in results.get("warnings", []))
    return out


def run_to_proto(view: RunView) -> pb.Run:
    spec = view.spec
    b, a, c = spec.benchmark, spec.agent, spec.clock
    run = pb.Run(
        name=view.name,
        benchmark=pb.BenchmarkSpec(name=b.name, scenario=b.scenario, data_dir=b.data_dir, subset=list(b.subset)),
        agent=pb.AgentSpec(
            harness=a.harness,
            memory=a.memory,
            model=pb.ModelEndpoint(base_url=a.model.base_url, api=a.model.api, model=a.model.model),
            resources=pb.Resources(memory_bytes=a.resources.memory_bytes, cpus=a.resources.cpus, pids=a.resources.pids),
        ),
        clock=pb.ClockSpec(mode=_CLOCK_ENUM[c.mode.value], rate=c.rate),
        labels=dict(spec.labels),
        state=pb.State.Value(view.state),
        state_reason=view.reason,
        last_event_seq=view.last_event_seq,
        parent=view.parent,
        group=spec.group,
        group_index=spec.group_index,
        history_expired=view.history_expired,
        node=view.node,
    )
    if a.model.sampling_seed is not None:
        run.agent.model.sampling_seed = a.model.sampling_seed
    if b.options:
        run.benchmark.options.update(dict(b.options))
    if a.options:
        run.agent.options.update(dict(a.options))
    if c.start_ns is not None:
        run.clock.start_time.FromNanoseconds(c.start_ns)
    for fname, ns in (
        ("create_time", view.create_ns),
        ("start_time", view.start_ns),
        ("end_time", view.end_ns),
        ("sim_time", view.sim_ns),
        ("history_expire_time", view.history_expire_ns),
    ):
        ts = _ts(ns)
        if ts is not None:
            getattr(run, fname).CopyFrom(ts)
    if view.results:
        run.results.CopyFrom(_results_to_proto(view.results))
    return run


def event_to_proto(ev: EventRow, run_name: str) -> pb.RunEvent:
    out = pb.RunEvent(seq=ev.seq, run=run_name)
    out.sim_time.FromNanoseconds(max(0, ev.sim_ns))
    out.wall_time.FromNanoseconds(ev.wall_ns)
    p = ev.payload
    if ev.kind == "fire":
        out.fire.CopyFrom(
            pb.FireEvent(
                event_id=p["event_id"],
                source=p["source"],
                priority=p["priority"],
                snapshot_version=p["snapshot_version"],
                effects=p["effects"],
            )
        )
        out.fire.due_time.FromNanoseconds(p["due_ns"])
    elif ev.kind == "jump":
        out.jump.from_time.FromNanoseconds(p["from_ns"])
        out.jump.to_time.FromNanoseconds(p["to_ns"])
    elif ev.kind == "lease":
        out.lease.CopyFrom(
            pb.LeaseEvent(change=p["change"], lease=p["lease"], holder=p["holder"], held_count=p["held_count"])
        )
    elif ev.kind == "turn":
        out.turn.CopyFrom(
            pb.AgentTurnEvent(
                round_id=p.get("round_id", ""),
                session=p.get("session", ""),
                phase=p.get("phase", ""),
                reply=p.get("reply", ""),
                delivery_delay_ms=p.get("delivery_delay_ms", 0.0),
                harness_error=p.get("harness_error", ""),
            )
        )
        memory = p.get("memory")
        if isinstance(memory, dict):
            out.turn.memory.CopyFrom(
                pb.MemoryTurn(
                    system=str(memory.get("system", "")),
                    recalled=[str(t) for t in memory.get("recalled", [])],
                    recall_ms=float(memory.get("recall_ms", 0.0)),
                    stored=int(memory.get("stored", 0)),
                    store_ms=float(memory.get("store_ms", 0.0)),
                    error=str(memory.get("error", "")),
                )
            )
    elif ev.kind == "verdict":
        out.verdict.CopyFrom(
            pb.VerdictEvent(
                round_id=p["round_id"],
                graded=p["graded"],
                score=p.get("score", 0.0),
                reason=p.get("reason", ""),
            )
        )
    elif ev.kind == "state":
        out.state.CopyFrom(pb.StateChangeEvent(state=pb.State.Value(p["state"]), reason=p.get("reason", "")))
    return out


def snapshot_to_proto(view: SnapshotView) -> pb.Snapshot:
    return pb.Snapshot(
        name=view.name,
        sim_time=_ts(view.sim_ns),
        create_time=_ts(view.create_ns),
        journal_length=view.journal_length,
        image=view.image,
        session_saved=view.agent_state,
    )
