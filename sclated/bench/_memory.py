"""`sclated bench memory --json`: each harness + memory system pair on LongMemEval.

For each pair (``--pair reference+mem0``, repeatable; default: every pair a
harness declares) a fresh daemon process runs the built-in ``tiny`` LongMemEval
question whose haystack holds the cat story, against the embedded model (chat
and embeddings). After the cat session it saves a snapshot and branches from it;
both runs go to the end. Figures per pair:

* ``memory_calls``: calls of the memory role (the system's own, its embeddings,
  the harness's own memory work), and by component;
* ``memory_token_share``: the memory role's share of all tokens (the run's result);
* ``store_ms_p50`` / ``retrieve_ms_p50``: the memory system's store and recall per
  turn, as the harness measured them around its calls (turn events' ``memory``);
* ``snapshot_s``: the SaveSnapshot call (the sandbox paused, committed, its memory
  volume, database included, archived);
* ``restore_s``: the RestoreSnapshot call plus the branch's ``sandbox_prepare``
  (a fresh sandbox from the snapshot's image, its memory volume and the
  harness's state restored, the memory server started on the restored data):
  what a branch costs before its first turn. Missing when the branch never
  prepared (then the pair is not to be trusted either);
* ``items_stored``: what the system stored over the run's turns;
  ``question_recalled``: what the question's turn (the last) recalled, and
  ``answer_recalled``: whether any of it names the answer (the cat's name):
  the mechanics end to end (stored, found, handed to the harness), not the
  small model's quality;
* the run's delivery delays (``delivery_delay_ms_p50`` / ``_max``).

A pair whose run did not succeed, or whose memory system reported an error, says
so (``state``, ``memory_errors``): its figures are not to be trusted. A run can
succeed with its memory system idle (a harness's turn killed before its plugin
stored anything): ``problems`` names what did not happen (no model call of the
system's own; where the harness reports its stores and recalls
(``store_recall_reported``), nothing stored or nothing recalled for the
question), empty when the mechanics worked end to end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["bench_memory", "default_pairs", "memory_figures", "restore_seconds"]

QUESTION = "lme_tiny_ssu_1"
"""Garden, cat (two turns), recipe sessions, then the question: a snapshot after turn 3."""
ANSWER = "Biscuit"
"""The cat's name: what the question's recall should bring back."""
SNAPSHOT_AFTER_TURNS = 3
_OPTIONS: dict[str, dict[str, Any]] = {
    "reference": {"max_steps": 1, "max_tokens": 64},
    # As its end-to-end test runs it: a session per haystack session, and few agentic
    # steps (a turn that runs into its timeout is killed before the plugin retains).
    "hermes": {"max_tokens": 64, "max_turns": 2, "turn_timeout_s": 600},
    "claude-code": {"session_scope": "run", "max_tokens": 96, "max_turns": 2},
    "codex": {"session_scope": "run", "max_tokens": 96},
    "openclaw": {"max_tokens": 64},
}


def default_pairs() -> list[tuple[str, str]]:
    """Every (harness, memory system) pair the harnesses declare, native memory left out."""
    from adapters.harnesses import HARNESSES
    from adapters.memory import MEMORY_SYSTEMS

    return [(h.declaration.name, m) for h in HARNESSES for m in h.declaration.memory_systems if m in MEMORY_SYSTEMS]


def _p50(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def restore_seconds(restore_call_s: float, branch_results: Mapping[str, Any]) -> float | None:
    """What restoring cost the branch: the RestoreSnapshot call and the branch's own
    sandbox preparation (its results' ``scheduler.overhead_s.sandbox_prepare``).
    None when the branch has no such figure (it never prepared a sandbox)."""
    prepare = ((branch_results.get("scheduler") or {}).get("overhead_s") or {}).get("sandbox_prepare")
    if not prepare:
        return None
    return round(restore_call_s + float(prepare), 2)


def memory_figures(
    results: Mapping[str, Any],
    turns: Sequence[Mapping[str, Any]],
    calls: Sequence[Mapping[str, Any]],
    answer: str = ANSWER,
    system: str | None = None,
) -> dict[str, Any]:
    """The pair's figures from one run: its results (as JSON), its ended turns' memory
    reports (in order: the last is the question's) and its captured calls."""
    memory = [c for c in calls if c.get("role") == "memory" and not c.get("retry_of")]
    by_component: dict[str, int] = {}
    for c in memory:
        key = str(c.get("component") or c.get("role"))
        by_component[key] = by_component.get(key, 0) + 1
    reports = [t.get("memory") or {} for t in turns]
    stores = [float(r["store_ms"]) for r in reports if r.get("store_ms")]
    recalls = [float(r["recall_ms"]) for r in reports if r.get("recall_ms")]
    scheduler = results.get("scheduler") or {}
    recalled = [str(t) for t in (reports[-1].get("recalled") or [])] if reports else []
    items_stored = sum(int(r.get("stored") or 0) for r in reports)
    # Hermes runs Hindsight's own plugin inside its process: it reports the plugin's
    # failures only, so its stores and recalls are seen in the captured calls alone.
    reported = bool(stores or recalls)
    problems: list[str] = []
    if system is not None:
        if not by_component.get(f"memory:{system}"):
            problems.append(f"no model call of memory:{system} (the system never ran)")
        if reported and not items_stored:
            problems.append("nothing stored")
        elif reported and not recalled:
            problems.append("the question recalled nothing")
    return {
        "memory_calls": len(memory),
        "memory_calls_by_component": dict(sorted(by_component.items())),
        "memory_token_share": results.get("memory_token_share"),
        "store_ms_p50": _p50(stores),
        "retrieve_ms_p50": _p50(recalls),
        "stores": len(stores),
        "retrievals": len(recalls),
        "memory_errors": [str(r["error"]) for r in reports if r.get("error")],
        "items_stored": items_stored,
        "question_recalled": len(recalled),
        "answer_recalled": any(answer.lower() in t.lower() for t in recalled),
        "store_recall_reported": reported,
        "problems": problems,
        "delivery_delay_ms_p50": scheduler.get("delivery_delay_ms_p50"),
        "delivery_delay_ms_max": scheduler.get("delivery_delay_ms_max"),
    }


async def _one_pair(harness: str, memory: str, n_ctx: int, json_only: bool) -> dict[str, Any]:
    import grpc
    from google.protobuf.json_format import MessageToDict
    from sclate_api.v1 import sclate_pb2 as pb
    from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

    from sclated.bench._cli import end_group
    from sclated.bench._daemon import reap_daemon_sandboxes, start_daemon_process
    from sclated.store import Store

    out: dict[str, Any] = {"pair": f"{harness}+{memory}"}
    with tempfile.TemporaryDirectory(prefix="sclate-bench-memory-") as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        (state / "daemon-id").write_text(f"bench-{os.getpid()}-{secrets.token_hex(3)}\n")
        proc, ready = await start_daemon_process(state, "--model-n-ctx", str(n_ctx))
        try:
            async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
                stub = pb_grpc.SclateStub(ch)
                run = pb.Run(
                    benchmark=pb.BenchmarkSpec(name="longmemeval", scenario="tiny", subset=[QUESTION]),
                    agent=pb.AgentSpec(harness=harness, memory=memory),
                )
                run.agent.options.update(_OPTIONS.get(harness, {}))
                src = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id="bench-memory"))
                ended = 0
                restore_call_s = 0.0
                async for ev in stub.WatchRun(pb.WatchRunRequest(name=src.name)):
                    if ev.WhichOneof("kind") == "turn" and ev.turn.phase == "ended":
                        ended += 1
                        if ended == SNAPSHOT_AFTER_TURNS:
                            break
                if ended == SNAPSHOT_AFTER_TURNS:
                    t0 = time.monotonic()
                    snap = await stub.SaveSnapshot(pb.SaveSnapshotRequest(run=src.name, snapshot_id="after-cat"))
                    out["snapshot_s"] = round(time.monotonic() - t0, 2)
                    t0 = time.monotonic()
                    await stub.RestoreSnapshot(
                        pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id="bench-memory-br")
                    )
                    restore_call_s = time.monotonic() - t0
                runs: dict[str, Any] = {}
                turns: dict[str, list[dict[str, Any]]] = {}
                for key, name in (("source", src.name), ("branch", "runs/bench-memory-br")):
                    events = [
                        MessageToDict(ev.turn, preserving_proto_field_name=True)
                        async for ev in stub.WatchRun(pb.WatchRunRequest(name=name))
                        if ev.WhichOneof("kind") == "turn" and ev.turn.phase == "ended"
                    ]
                    done = await stub.GetRun(pb.GetRunRequest(name=name))
                    runs[key] = {
                        "state": pb.State.Name(done.state),
                        "state_reason": done.state_reason,
                        "results": MessageToDict(done.results, preserving_proto_field_name=True),
                    }
                    turns[key] = events
                    if not json_only:
                        print(f"{out['pair']} {key}: {runs[key]['state']}", file=sys.stderr)
                store = Store(state / "sclated.db")
                await store.open()
                try:
                    calls = await store.calls("local/bench-memory")
                finally:
                    await store.close()
                # Deleting the runs removes their snapshot images: the bench leaves no
                # image on the engine (its state directory goes with the temporary one).
                for name in ("runs/bench-memory-br", src.name):
                    with contextlib.suppress(grpc.aio.AioRpcError):
                        await stub.DeleteRun(pb.DeleteRunRequest(name=name))
        finally:
            await end_group(proc, sig=signal.SIGTERM, grace_s=60)
            await asyncio.shield(reap_daemon_sandboxes(state))
    source = runs["source"]
    out.update(
        state=source["state"],
        state_reason=source["state_reason"],
        branch_state=runs["branch"]["state"],
        restore_s=restore_seconds(restore_call_s, runs["branch"]["results"]),
        **memory_figures(source["results"], turns["source"], calls, system=memory),
    )
    return out


async def bench_memory(args: argparse.Namespace) -> dict[str, Any]:
    pairs = default_pairs()
    if args.pair:
        wanted = [tuple(p.split("+", 1)) for p in args.pair]
        bad = [p for p, w in zip(args.pair, wanted, strict=True) if len(w) != 2 or w not in pairs]
        if bad:
            offered = ", ".join(f"{h}+{m}" for h, m in pairs)
            raise SystemExit(f"sclated bench memory: no pair {', '.join(bad)}; offered: {offered}")
        pairs = [(w[0], w[1]) for w in wanted]
    figures = [await _one_pair(h, m, args.model_n_ctx, args.json) for h, m in pairs]
    return {"question": QUESTION, "pairs": figures}
