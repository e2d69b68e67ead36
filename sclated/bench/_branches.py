"""`sclated bench branches [--harness NAME] [--compare]`: how long the trainer's samples are.

A fresh daemon process runs a scenario (default: MetaClaw ``tiny``) with one
harness against the embedded model, then the run's trajectories are read the
way a trainer reads them (gRPC ``StreamTrajectories``). A call extends a
branch only when its prompt ids start with the branch's whole token sequence,
so the figures say how much of a session survives as one token-level sample:

* ``calls``: the calls in the trajectories (those with token ids);
* ``branches``: root-to-leaf branches, one training sample each;
* ``calls_per_branch_mean``: calls along a branch, on average;
* ``prefix_mismatch_share``: the share of calls that start a branch because
  their prompt does not extend any earlier call's tokens (``prefix_mismatch``);
* ``branch_reasons``: branches by the reason they start (``fork`` for one
  that leaves another part way);
* the same per role in ``by_role``.

``--compare`` runs the scenario twice, the embedded model's token
continuation off (``SCLATE_MODEL_TOKEN_CONTINUATION=0``: every prompt
rendered and tokenized whole, as before it existed) and on, and prints both.
Without it, one run with the continuation as the environment sets it (on
unless ``SCLATE_MODEL_TOKEN_CONTINUATION=0``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import re
import secrets
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["bench_branches", "branch_figures"]


def _figures(trajectories: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    calls = {c for t in trajectories for c in t["call_ids"]}
    # A call that starts a branch has the branch's reason on the branch that
    # follows its first children (later children are forks): one per root.
    mismatched = {t["call_ids"][0] for t in trajectories if t["branch_reason"] == "prefix_mismatch" and t["call_ids"]}
    lengths = [len(t["call_ids"]) for t in trajectories]
    return {
        "calls": len(calls),
        "branches": len(trajectories),
        "calls_per_branch_mean": round(statistics.fmean(lengths), 3) if lengths else 0.0,
        "calls_per_branch_max": max(lengths, default=0),
        "prefix_mismatch_share": round(len(mismatched) / len(calls), 4) if calls else 0.0,
        "branch_reasons": dict(sorted(collections.Counter(str(t["branch_reason"]) for t in trajectories).items())),
    }


def branch_figures(trajectories: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The figures of a run's trajectories, each a mapping with ``call_ids``,
    ``branch_reason`` and ``role`` (as ``StreamTrajectories`` sends them)."""
    by_role: dict[str, list[Mapping[str, Any]]] = collections.defaultdict(list)
    for t in trajectories:
        by_role[str(t["role"])].append(t)
    return {**_figures(trajectories), "by_role": {role: _figures(ts) for role, ts in sorted(by_role.items())}}


_SERVED_AT = re.compile(r"model server for .* at (http://[0-9.]+:[0-9]+)")


async def _model_continuation(log: Path) -> dict[str, Any] | None:
    """The embedded model's continuation figures from its ``/health`` (the daemon still up);
    None when its address is not in its log or it does not answer."""
    import aiohttp

    try:
        urls = _SERVED_AT.findall(await asyncio.to_thread(log.read_text, errors="replace"))
    except OSError:
        return None
    if not urls:
        return None
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
            http.get(f"{urls[-1]}/health") as r,
        ):
            body = await r.json()
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    continuation = body.get("continuation") if isinstance(body, dict) else None
    return continuation if isinstance(continuation, dict) else None


@contextlib.contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    """``name`` set to ``value`` (None: left as it is) for the daemons started meanwhile."""
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


async def _one_run(args: argparse.Namespace, harness: str, continuation: bool | None) -> dict[str, Any]:
    import grpc
    from sclate_api.v1 import sclate_pb2 as pb
    from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

    from adapters.harnesses import HARNESSES
    from sclated.bench._cli import end_group
    from sclated.bench._daemon import data_root_args, reap_daemon_sandboxes, start_daemon_process
    from sclated.bench._harness import _BENCH_OPTIONS
    from sclated.model import TOKEN_CONTINUATION_ENV, continuation_from_env

    declared = {h.declaration.name: h.declaration.options for h in HARNESSES}
    if harness not in declared:
        raise SystemExit(f"sclated bench branches: no harness named {harness!r}; have: {', '.join(sorted(declared))}")
    options = dict(_BENCH_OPTIONS.get(harness, {}))
    if "max_tokens" in declared[harness]:
        options["max_tokens"] = args.max_tokens
    flag = None if continuation is None else ("1" if continuation else "0")
    started = time.monotonic()
    environment = _environment(TOKEN_CONTINUATION_ENV, flag)
    with tempfile.TemporaryDirectory(prefix="sclate-bench-branches-") as tmp, environment:
        on = continuation_from_env()
        state = Path(tmp) / "state"
        state.mkdir()
        (state / "daemon-id").write_text(f"bench-{os.getpid()}-{secrets.token_hex(3)}\n")
        # The daemon's embedded model (its child) inherits the flag from the environment.
        proc, ready = await start_daemon_process(
            state, "--model-n-ctx", str(args.model_n_ctx), *data_root_args(args.data_dir)
        )
        try:
            async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
                stub = pb_grpc.SclateStub(ch)
                run = pb.Run(
                    benchmark=pb.BenchmarkSpec(
                        name=args.benchmark,
                        scenario="" if args.data_dir else args.scenario,
                        data_dir=str(args.data_dir.resolve()) if args.data_dir else "",
                        subset=list(args.subset or ()),
                    ),
                    agent=pb.AgentSpec(harness=harness),
                    clock=pb.ClockSpec(mode=pb.HYBRID),
                )
                run.agent.options.update(options)
                created = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id="bench-branches"))
                async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name)):
                    kind = ev.WhichOneof("kind")
                    if not args.json and kind in ("fire", "turn"):
                        what = ev.fire.event_id if kind == "fire" else f"{ev.turn.round_id} {ev.turn.phase}"
                        print(f"{harness} {'on' if on else 'off'}: {kind} {what}", file=sys.stderr)
                final = await stub.GetRun(pb.GetRunRequest(name=created.name))
                trajectories = [
                    {"call_ids": list(t.call_ids), "branch_reason": t.branch_reason, "role": t.role}
                    async for t in stub.StreamTrajectories(pb.StreamTrajectoriesRequest(run=created.name))
                ]
            server = await _model_continuation(state / "model-server.log")
        finally:
            await end_group(proc, sig=signal.SIGTERM, grace_s=60)
            await asyncio.shield(reap_daemon_sandboxes(state))
    return {
        "harness": harness,
        "token_continuation": on,
        **branch_figures(trajectories),
        "calls_captured": int(final.results.capture.calls),
        # What the embedded model's continuation did (its /health), all callers of the run together.
        "model_server_continuation": server,
        "turns": int(final.results.rounds),
        "state": pb.State.Name(final.state),
        "state_reason": final.state_reason,
        "wall_s": round(time.monotonic() - started, 1),
    }


async def bench_branches(args: argparse.Namespace) -> dict[str, Any]:
    harness = args.harness or "reference"
    if not args.compare:
        return await _one_run(args, harness, None)
    before = await _one_run(args, harness, False)
    after = await _one_run(args, harness, True)
    return {
        "harness": harness,
        "benchmark": args.benchmark,
        "scenario": args.scenario,
        "before": before,
        "after": after,
    }
