"""`sclated bench harness --harness NAME`: one harness, unmodified, on MetaClaw days.

A fresh daemon process runs the MetaClaw scenario (built-in ``tiny`` or
``--data-dir``) with the named harness against the embedded model; the
figures come from the run (GetRun, WatchRun) and from the calls the capture
proxy recorded (the daemon's store, read after it stopped):

* ``calls_with_token_ids``: calls with prompt AND completion token ids;
* ``harness_overhead_ms_p50``: a turn's duration minus its model calls'
  (what the harness itself costs per message: process start, prompt
  building, tools), on the run's clock, which flows at wall rate while a
  turn is busy;
* ``session_continuity``: each turn's first main call extends the previous
  turn's (the harness really continued its session; the bench keeps one
  session for the whole run where the harness can, ``session_scope=run``);
* ``crons_fired``: the harness's own scheduled jobs that fired on simulated time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import secrets
import signal
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sclated.capture import failure_cause

__all__ = ["HARNESS_TARGETS", "bench_harness", "continuity_breaks", "harness_figures", "session_continuity"]

HARNESS_TARGETS: dict[str, float] = {"delivery_delay_ms_p50": 50.0, "delivery_delay_ms_max": 250.0}
"""Upper bounds; besides, every call has token ids and the session continued."""

_BENCH_OPTIONS: dict[str, dict[str, Any]] = {
    # One conversation across days, and a job of its own daily at 13:00 (between days).
    "hermes": {
        "session_scope": "run",
        "cron_jobs": [{"schedule": "0 13 * * *", "prompt": "Say the word tick.", "name": "bench-daily"}],
    },
    # MetaClaw's upstream protocol (a seeded session per day), and a daily job of its own.
    "openclaw": {"cron_jobs": [{"schedule": "0 13 * * *", "message": "Say the word tick.", "name": "bench-daily"}]},
    "reference": {"max_steps": 3},
    # One thread (session) across the run's days.
    "codex": {"session_scope": "run"},
    "claude-code": {"session_scope": "run"},
}


def _text(content: Any) -> str:
    """A message's content as one text: a string, or its text blocks (chat parts,
    Anthropic text blocks, Responses input/output text) joined; other blocks (tool
    use and results, images) by their repr, so a change in them is still seen."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return repr(content)
    parts: list[str] = []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") in ("text", "input_text", "output_text"):
            parts.append(str(block.get("text", "")))
        else:
            parts.append(repr(block))
    return "\n".join(parts)


def _conversation(record: Mapping[str, Any]) -> list[tuple[str, str]] | None:
    """The user and assistant messages of a call's request, in order, whatever its API
    (chat and Anthropic ``messages``, Responses ``input`` items); None without any."""
    request = record.get("request")
    if not isinstance(request, Mapping):
        return None
    messages = request.get("messages")
    if not isinstance(messages, list):
        messages = request.get("input")
        if isinstance(messages, str):
            return [("user", messages)]
    if not isinstance(messages, list):
        return None
    out: list[tuple[str, str]] = []
    for m in messages:
        if isinstance(m, Mapping) and m.get("role") in ("user", "assistant") and m.get("type", "message") == "message":
            out.append((str(m["role"]), _text(m.get("content"))))
    return out


def _same(was: tuple[str, str], now: tuple[str, str]) -> bool:
    """The same message of the history: a harness may annotate the newest message of a
    call (OpenClaw adds a runtime line to it) and keep it plain after, or the reverse."""
    return was[0] == now[0] and (was[1] == now[1] or was[1][:200] in now[1] or now[1][:200] in was[1])


def continuity_breaks(agent_calls: Sequence[Mapping[str, Any]], sessions: Sequence[str] | None = None) -> list[str]:
    """Where a main call's user/assistant messages do not start with the previous
    call's of the same session, each said in a line (empty: every later prompt extends
    the earlier). ``sessions`` names each call's session (all one session when None).
    A call that ends with two user messages may lose the last in the next call: a
    per-call note the harness does not keep (OpenClaw's internal context)."""
    convs = [_conversation(c) for c in agent_calls]
    groups = list(sessions) if sessions is not None else [""] * len(convs)
    breaks: list[str] = []
    for i in range(1, len(convs)):
        prev = max((j for j in range(i) if groups[j] == groups[i]), default=None)
        if prev is None:
            continue  # the first call of its session
        before, after = convs[prev], convs[i]
        if before is None or after is None:
            breaks.append(f"call {i}: no chat messages to compare")
            continue
        required = before[:-1] if len(before) >= 2 and before[-1][0] == before[-2][0] == "user" else before
        if len(after) <= len(required):
            breaks.append(f"call {i}: {len(after)} messages after {len(before)} (the session started over or shrank)")
            continue
        for k, (was, now) in enumerate(zip(required, after, strict=False)):
            if not _same(was, now):
                breaks.append(f"call {i}: message {k} differs: {was[0]} {was[1][:60]!r} -> {now[0]} {now[1][:60]!r}")
                break
    return breaks


def session_continuity(agent_calls: Sequence[Mapping[str, Any]], sessions: Sequence[str] | None = None) -> bool:
    """True when each main call's user/assistant messages start with the previous
    call's of its session (a later prompt extends an earlier one). Needs two calls of
    one session to tell."""
    groups = list(sessions) if sessions is not None else [""] * len(agent_calls)
    comparable = len(groups) - len(set(groups))
    return comparable >= 1 and not continuity_breaks(agent_calls, sessions)


def _first_calls(
    agent: Sequence[Mapping[str, Any]], turns: Sequence[tuple[int, int]], sessions: Sequence[str] | None
) -> tuple[list[Mapping[str, Any]], list[str] | None]:
    """Each turn's first main call (and its turn's session): the harness's own retries
    and continuations inside a turn (a truncated answer asked to go on) are not the
    session's history."""
    out: list[Mapping[str, Any]] = []
    groups: list[str] = []
    for k, (start, end) in enumerate(turns):
        first = next((c for c in agent if start <= c["timings"]["start_ns"] <= end), None)
        if first is not None:
            out.append(first)
            groups.append(sessions[k] if sessions is not None else "")
    return out, (groups if sessions is not None else None)


def _tokens_per_turn(calls: Sequence[Mapping[str, Any]], turns: int) -> dict[str, dict[str, float]]:
    """Per role: calls, prompt and completion tokens per turn (means), and the median prompt."""
    out: dict[str, dict[str, float]] = {}
    for role in sorted({str(c.get("role")) for c in calls}):
        mine = [c for c in calls if str(c.get("role")) == role]
        prompts = [len(c["prompt_token_ids"]) for c in mine]
        completions = [sum(len(x.get("token_ids") or []) for x in c.get("completions") or []) for c in mine]
        per = max(turns, 1)
        out[role] = {
            "calls_per_turn": round(len(mine) / per, 2),
            "prompt_tokens_per_turn": round(sum(prompts) / per, 1),
            "completion_tokens_per_turn": round(sum(completions) / per, 1),
            "prompt_tokens_p50": _p50(prompts),
        }
    return out


def _p50(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def harness_figures(
    harness: str,
    run: Mapping[str, Any],
    turns: Sequence[tuple[int, int]],
    fires: Sequence[str],
    calls: Sequence[Mapping[str, Any]],
    sessions: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The bench's JSON. ``turns``: each turn's (start, end) on the run's clock (ns);
    ``fires``: fired event ids; ``calls``: the capture proxy's records; ``sessions``:
    each turn's session (continuity is judged within a session; None: one session)."""
    s = run.get("scheduler") or {}
    posts = [c for c in calls if c.get("method", "POST") == "POST"]
    with_ids = [
        c
        for c in posts
        if c.get("prompt_token_ids") and any(comp.get("token_ids") for comp in c.get("completions") or [])
    ]
    agent = sorted((c for c in posts if c.get("role") == "agent"), key=lambda c: c["timings"]["start_ns"])
    overhead_ms: list[float] = []
    for start, end in turns:
        model_ns = sum(
            c["timings"]["end_ns"] - c["timings"]["start_ns"] for c in agent if start <= c["timings"]["start_ns"] <= end
        )
        overhead_ms.append((end - start - model_ns) / 1e6)
    firsts, groups = _first_calls(agent, turns, sessions) if turns else (list(agent), None)
    without_ids = [c for c in posts if c not in with_ids]
    out: dict[str, Any] = {
        "harness": harness,
        "state": run.get("state"),
        "state_reason": run.get("state_reason", ""),
        "turns": len(turns),
        "calls": len(posts),
        "calls_with_token_ids": len(with_ids),
        # Why a call has no token ids (a refused or broken call), the first ten.
        "calls_without_token_ids": [
            {k: c.get(k) for k in ("role", "status", "error", "finish_reason", "complete", "stream", "path")}
            for c in without_ids[:10]
        ],
        "calls_by_role": dict(sorted(collections.Counter(str(c.get("role")) for c in posts).items())),
        "harness_overhead_ms_p50": _p50(overhead_ms),
        "harness_overhead_ms_max": max(overhead_ms, default=0.0),
        "session_continuity": session_continuity(firsts, groups),
        "continuity_breaks": continuity_breaks(firsts, groups)[:10],
        "crons_fired": sum(1 for f in fires if ":cron:" in f),
        "delivery_delay_ms_p50": float(s.get("delivery_delay_ms_p50", 0.0)),
        "delivery_delay_ms_max": float(s.get("delivery_delay_ms_max", 0.0)),
        "deliveries_checked": int(s.get("deliveries_checked", 0)),
        "out_of_order": int(s.get("out_of_order", 0)),
        "early_deliveries": int(s.get("early_deliveries", 0)),
        "prompt_tokens_p50": _p50([len(c["prompt_token_ids"]) for c in with_ids if c.get("role") == "agent"]),
        # The first main call's prompt: the harness's system prompt, tools and first message.
        "first_prompt_tokens": next((len(c["prompt_token_ids"]) for c in agent if c.get("prompt_token_ids")), 0),
        "tokens_per_turn_by_role": _tokens_per_turn(with_ids, len(turns)),
        "failed_by_cause": dict(run.get("failed_by_cause") or {}),
        # What the failed calls said (the first ten): a cause alone does not say whose fault.
        "failed_calls": [
            {"cause": cause, **{k: c.get(k) for k in ("role", "status", "error", "complete", "path")}}
            for c in posts
            if (cause := failure_cause(c)) is not None
        ][:10],
        "targets": HARNESS_TARGETS,
    }
    misses = [k for k, bound in HARNESS_TARGETS.items() if out[k] > bound]
    if out["calls_with_token_ids"] != out["calls"] or out["calls"] == 0:
        misses.append("calls_with_token_ids")
    if not out["session_continuity"]:
        misses.append("session_continuity")
    out["missed_targets"] = misses
    out["meets_targets"] = out["state"] == "SUCCEEDED" and not misses
    return out


async def bench_harness(args: argparse.Namespace) -> dict[str, Any]:
    import grpc
    from google.protobuf.json_format import MessageToDict
    from sclate_api.v1 import sclate_pb2 as pb
    from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

    from adapters.harnesses import HARNESSES
    from sclated.bench._cli import end_group
    from sclated.bench._daemon import data_root_args, reap_daemon_sandboxes, start_daemon_process
    from sclated.store import Store

    harness = args.harness
    declared = {h.declaration.name: h.declaration.options for h in HARNESSES}
    options = dict(_BENCH_OPTIONS.get(harness, {}))
    if "max_tokens" in declared.get(harness, frozenset()):
        # Every harness that takes an output bound gets the same one (Codex's is put
        # on its calls by the capture proxy, Claude Code's is its own setting).
        options["max_tokens"] = args.max_tokens
    with tempfile.TemporaryDirectory(prefix="sclate-bench-harness-") as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        # The daemon's id labels its sandboxes: named after this process, so what a
        # bench left behind is known as its own.
        (state / "daemon-id").write_text(f"bench-{os.getpid()}-{secrets.token_hex(3)}\n")
        proc, ready = await start_daemon_process(
            state, "--model-n-ctx", str(args.model_n_ctx), *data_root_args(args.data_dir)
        )
        try:
            async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
                stub = pb_grpc.SclateStub(ch)
                run = pb.Run(
                    benchmark=pb.BenchmarkSpec(
                        name="metaclaw",
                        scenario="" if args.data_dir else "tiny",
                        data_dir=str(args.data_dir.resolve()) if args.data_dir else "",
                        subset=list(args.subset or ()),
                    ),
                    agent=pb.AgentSpec(harness=harness),
                    clock=pb.ClockSpec(mode=pb.HYBRID),
                )
                run.agent.options.update(options)
                created = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id="bench-harness"))
                fires: list[str] = []
                fire_ns: dict[str, int] = {}
                turns: list[tuple[int, int]] = []
                deliveries: list[tuple[int, str]] = []
                sessions: list[str] = []
                last_end = 0
                async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name)):
                    kind = ev.WhichOneof("kind")
                    at = ev.sim_time.ToNanoseconds()
                    if kind == "fire":
                        fires.append(ev.fire.event_id)
                        fire_ns[ev.fire.event_id] = at
                        if {"deliver_prompt", "notify"} & set(ev.fire.effects):
                            # metaclaw:<day>:...: each MetaClaw day is a session of its own.
                            deliveries.append((at, ev.fire.event_id.split(":")[1]))
                    elif kind == "turn" and ev.turn.phase == "ended" and deliveries:
                        # Turns run one at a time: one that waited behind another starts when it ended.
                        delivered, day = deliveries.pop(0)
                        start = max(delivered, last_end)
                        turns.append((start, at))
                        sessions.append(day)
                        last_end = at
                    if not args.json and kind in ("fire", "turn"):
                        print(f"{kind}: {ev.fire.event_id if kind == 'fire' else ev.turn.round_id}", file=sys.stderr)
                final = await stub.GetRun(pb.GetRunRequest(name=created.name))
                result = MessageToDict(final.results, preserving_proto_field_name=True)
                run_dict = {
                    "state": pb.State.Name(final.state),
                    "state_reason": final.state_reason,
                    "scheduler": result.get("scheduler", {}),
                    "failed_by_cause": dict(final.results.capture.failed_by_cause),
                }
        finally:
            await end_group(proc, sig=signal.SIGTERM, grace_s=60)
            # A daemon stopped mid-run keeps its sandboxes for a resume that will
            # never come here: the bench's daemon is gone, so are they.
            await asyncio.shield(reap_daemon_sandboxes(state))
        store = Store(state / "sclated.db")
        await store.open()
        try:
            calls = await store.calls("local/bench-harness")
        finally:
            await store.close()
    # Hermes keeps one conversation for the run (session_scope=run): judged as one.
    one = options.get("session_scope") == "run"
    out = harness_figures(harness, run_dict, turns, fires, calls, None if one else sessions)
    out["model_n_ctx"] = args.model_n_ctx
    return out
