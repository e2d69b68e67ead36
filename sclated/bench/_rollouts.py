"""`sclated bench rollouts`: a K-way branch group for a trainer, measured.

A fresh daemon process runs the ``tiny`` MetaClaw scenario with the reference
harness against the embedded model; once the first round of day 2 has ended, a
snapshot is saved at the next turn boundary (with the harness's session:
``snapshot_session_saved``) and the source cancelled; then ``BranchRun`` makes K runs
(default 8) from it, which run concurrently under the daemon's admission. The
figures:

* ``branch_s``: from the BranchRun call until every run of the group has its
  sandbox restored and running, on the wall clock: a run is running once its
  scheduler fires an event of its own (one the source did not fire before the
  snapshot), which it does only after its sandbox and the harness's state are
  restored;
* ``group_wall_s``: from the call until the last run of the group ended;
* ``samples``, ``calls_per_branch_mean``, ``prefix_mismatch_share``,
  ``trainable_tokens``: the group's trajectories (StreamTrajectories), the calls
  after the snapshot only (the shared prefix before it is the group's prompt state);
* ``export_valid``: the group exported in each trainer format, checked by our
  export contracts and by the trainers' own validation where their packages are
  installed (``.venv-trainers``); ``export_checked_by`` says which checked it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["bench_rollouts"]


async def bench_rollouts(args: argparse.Namespace) -> dict[str, Any]:
    import grpc
    from sclate_api.v1 import sclate_pb2 as pb
    from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

    from sclated.bench._cli import end_group
    from sclated.bench._daemon import reap_daemon_sandboxes, start_daemon_process

    k = args.count
    with tempfile.TemporaryDirectory(prefix="sclate-bench-rollouts-") as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        (state / "daemon-id").write_text(f"bench-{os.getpid()}-{secrets.token_hex(3)}\n")
        proc, ready = await start_daemon_process(
            state, "--model-n-ctx", str(args.model_n_ctx), "--max-running", str(max(k, 2))
        )
        try:
            async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
                stub = pb_grpc.SclateStub(ch)
                run = pb.Run(
                    benchmark=pb.BenchmarkSpec(name="metaclaw", scenario="tiny"),
                    agent=pb.AgentSpec(harness="reference"),
                )
                run.agent.options.update({"max_tokens": args.max_tokens, "max_steps": 3})
                src = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id="rollout-src"))
                source_fires: set[str] = set()
                async for ev in stub.WatchRun(pb.WatchRunRequest(name=src.name)):
                    kind = ev.WhichOneof("kind")
                    if kind == "fire":
                        source_fires.add(ev.fire.event_id)
                    if kind == "turn" and ev.turn.phase == "ended" and ev.turn.round_id.startswith("day02/"):
                        break
                    if kind == "state" and ev.state.state not in (pb.PENDING, pb.RUNNING):
                        raise RuntimeError(f"the source run ended before day 2: {ev.state.reason}")
                # At a turn boundary: the harness's session is in the snapshot, so every branch
                # continues the same conversation (the group's shared prompt state).
                snap = await stub.SaveSnapshot(
                    pb.SaveSnapshotRequest(run=src.name, snapshot_id="day02", at_turn_boundary=True)
                )
                await stub.CancelRun(pb.CancelRunRequest(name=src.name))
                t0 = time.monotonic()
                group = await stub.BranchRun(pb.BranchRunRequest(snapshot=snap.name, count=k, group_id="rollouts"))
                progress = GroupProgress(source_fires)
                async for ev in stub.WatchGroup(pb.WatchGroupRequest(group=group.group)):
                    kind = ev.WhichOneof("kind")
                    now = time.monotonic() - t0
                    if kind == "fire":
                        progress.fired(ev.run, ev.fire.event_id, now)
                    elif kind == "state" and ev.state.state not in (pb.PENDING, pb.RUNNING):
                        progress.ended(ev.run, pb.State.Name(ev.state.state), now)
                    if not args.json and kind in ("state", "turn"):
                        print(f"{now:7.1f}s {ev.run} {kind}", file=sys.stderr)
                figures = await _trajectory_figures(stub, [r.name for r in group.runs], snap.journal_length)
                export_valid, checked_by, exports = await _exports(stub, group.group, Path(tmp))
        finally:
            await end_group(proc, sig=signal.SIGTERM, grace_s=60)
            await asyncio.shield(reap_daemon_sandboxes(state))
    return {
        "group_size": k,
        **progress.figures(k),
        **figures,
        "snapshot_session_saved": snap.session_saved,
        "export_valid": export_valid,
        "export_checked_by": checked_by,
        "exports": exports,
    }


class GroupProgress:
    """When each run of a group was running on its own and when it ended, in wall
    seconds from the BranchRun call (as WatchGroup's events arrive)."""

    def __init__(self, source_fires: set[str]) -> None:
        self.source_fires = source_fires
        """Events the source fired before the snapshot: a branch holds them, never fires them."""
        self.started: dict[str, float] = {}
        self.ended_at: dict[str, float] = {}
        self.states: dict[str, str] = {}

    def fired(self, run: str, event_id: str, now: float) -> None:
        if event_id not in self.source_fires:
            self.started.setdefault(run, now)

    def ended(self, run: str, state: str, now: float) -> None:
        self.ended_at[run] = now
        self.states[run] = state

    def figures(self, k: int) -> dict[str, Any]:
        """``branch_s`` is None unless all ``k`` runs got running (a run that failed
        before its first event of its own leaves no time to report)."""
        return {
            "runs_succeeded": sum(s == "SUCCEEDED" for s in self.states.values()),
            "run_states": dict(Counter(self.states.values())),
            "branch_s": round(max(self.started.values()), 2) if len(self.started) == k else None,
            "group_wall_s": round(max(self.ended_at.values()), 2) if len(self.ended_at) == k else None,
        }


async def _trajectory_figures(stub: Any, names: list[str], prefix_events: int) -> dict[str, Any]:
    """The group's trajectories, each branch once (every member holds the shared
    prefix's calls: a trajectory seen in one member already is not counted again)."""
    from sclate_api.v1 import sclate_pb2 as pb

    from sclated.bench._branches import branch_figures

    seen: set[tuple[str, ...]] = set()
    trajectories: list[dict[str, Any]] = []
    trainable = 0
    for name in names:
        async for t in stub.StreamTrajectories(pb.StreamTrajectoriesRequest(run=name)):
            key = tuple(t.call_ids)
            if key in seen:
                continue
            seen.add(key)
            trajectories.append({"call_ids": list(t.call_ids), "branch_reason": t.branch_reason, "role": t.role})
            trainable += sum(t.loss_mask)
    figures = branch_figures(trajectories)
    figures.pop("by_role", None)
    return {**figures, "samples": len(trajectories), "trainable_tokens": trainable, "snapshot_events": prefix_events}


_VALIDATOR = Path(__file__).resolve().parents[2] / "tests" / "trainers" / "validate_exports.py"
_TRAINERS_PYTHON = Path(__file__).resolve().parents[2] / ".venv-trainers" / "bin" / "python"


async def _exports(stub: Any, group: str, tmp: Path) -> tuple[bool, list[str], dict[str, Any]]:
    """The group exported per trainer format (our contracts are checked as it is
    written), then each file given to the trainer's own validation when its
    environment is there (``.venv-trainers``, ``make venv``)."""
    from sclate_api.v1 import sclate_pb2 as pb

    checked_by = ["sclate"]
    detail: dict[str, Any] = {}
    valid = True
    for fmt in ("skyrl", "verl"):
        out = tmp / f"{group}.{fmt}.jsonl"
        rows = 0
        left_out = 0
        with out.open("wb") as f:
            req = pb.ExportTrajectoriesRequest(group=group, format=fmt)
            async for chunk in stub.ExportTrajectories(req):
                f.write(chunk.data)
                rows = chunk.rows or rows
                left_out += len(chunk.left_out)
        detail[fmt] = {"rows": rows, "left_out": left_out}
        if rows == 0:
            valid = False
            continue
        if _VALIDATOR.is_file() and _TRAINERS_PYTHON.exists():
            proc = await asyncio.create_subprocess_exec(
                str(_TRAINERS_PYTHON), str(_VALIDATOR), fmt, str(out),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            stdout, stderr = await proc.communicate()
            detail[fmt]["trainer"] = stdout.decode().strip().splitlines()[-1:] or stderr.decode()[-300:]
            valid = valid and proc.returncode == 0
            checked_by.append({"skyrl": "skyrl", "verl": "verl"}[fmt])
    return valid, checked_by, detail
