"""One daemon's worth of fault cases: the runs it tracks, what each acknowledged, and
the conclusion drawn once they ended (records lost, leases held at the end, the
journal replayed)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from sclate_api.v1 import sclate_pb2 as pb

from sclated.bench._faults_check import (
    END_REASONS,
    Acknowledged,
    CaseOutcome,
    StreamEvent,
    ended_for,
    leases_expired,
    leases_held_at_end,
    records_lost,
)
from sclated.bench._faults_daemon import (
    FaultDaemon,
    RunWatch,
    full_history,
    journal_of,
    leftovers,
    referenced_images,
    stored_calls,
)

__all__ = ["Phase", "Tracked"]


@dataclass(eq=False)
class Tracked:
    """One run under one fault (or a second fault on the same run: one Tracked each)."""

    fault: str
    watch: RunWatch
    injected: int = 0
    ack: Acknowledged = field(default_factory=Acknowledged)
    notes: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    """Acknowledged records found missing by the case itself (a saved snapshot gone)."""
    checks: list[Callable[[list[StreamEvent]], str | None]] = field(default_factory=list)
    """Checks on the run's events once it ended, each an anomaly or None (the fault's own,
    and that a run which succeeded ended for its scenario's reason)."""

    @property
    def name(self) -> str:
        return self.watch.name


class Phase:
    """The runs of one FaultDaemon and their conclusion."""

    def __init__(self, daemon: FaultDaemon, progress: Any, rng: random.Random) -> None:
        self.daemon = daemon
        self.progress = progress
        self.rng = rng
        """This part's own seeded stream of random points."""
        self.injected = 0
        """Faults its cases injected."""
        self.tracked: list[Tracked] = []
        self._watches: dict[str, RunWatch] = {}
        self.left_behind: dict[str, list[str]] = {}
        """What a case found left behind besides the daemon-wide leftovers (a half-made snapshot)."""

    async def create(self, fault: str, run: pb.Run, run_id: str) -> Tracked:
        created = await self.daemon.stub.CreateRun(pb.CreateRunRequest(run=run, run_id=run_id), timeout=60)
        t = self.track(fault, created.name)
        expected = END_REASONS.get(run.benchmark.name)
        if expected is not None:
            t.checks.append(lambda events: ended_for(events, expected))
        return t

    def track(self, fault: str, name: str) -> Tracked:
        watch = self._watches.get(name)
        if watch is None:
            watch = self._watches[name] = RunWatch(self.daemon, name)
            watch.follow()
        tracked = Tracked(fault, watch)
        self.tracked.append(tracked)
        return tracked

    async def acknowledge(self, *runs: Tracked) -> None:
        """Just before a fault: what each run's client holds as durable now."""
        for t in runs:
            t.ack.add_events(t.watch.events)
            t.ack.add_calls(await asyncio.to_thread(stored_calls, self.daemon, t.watch.key))

    async def resume(self, t: Tracked) -> None:
        """ResumeRun an INTERRUPTED run and follow it again."""
        try:
            await self.daemon.stub.ResumeRun(pb.ResumeRunRequest(name=t.name), timeout=60)
            t.notes.append("resumed with ResumeRun")
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            t.notes.append("resumed by the daemon itself")  # no longer INTERRUPTED by the time we asked
        t.watch.follow()

    async def finish(self, t: Tracked, timeout_s: float) -> None:
        """Until the run ended; an INTERRUPTED run is resumed (a client would) and followed
        to its end; one still going at the deadline is cancelled and noted."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not await t.watch.wait(left):
                t.notes.append(f"did not end within {timeout_s:.0f} s; cancelled")
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await self.daemon.stub.CancelRun(pb.CancelRunRequest(name=t.name), timeout=60)
                await t.watch.wait(60)
                return
            if t.watch.state[0] != "INTERRUPTED":
                return
            t.notes.append(f"interrupted: {t.watch.state[1][:160]}")
            await self.resume(t)

    async def conclude(self, timeout_s: float) -> list[CaseOutcome]:
        """Each run followed to its end, then checked against what it acknowledged."""
        await asyncio.gather(*(self.finish(t, timeout_s) for t in self.tracked))
        out: list[CaseOutcome] = []
        for t in self.tracked:
            events = t.watch.events
            t.ack.add_events(events)  # every event a stream delivered was committed
            history = await full_history(self.daemon, t.name)
            calls = await asyncio.to_thread(stored_calls, self.daemon, t.watch.key)
            run = await self.daemon.stub.GetRun(pb.GetRunRequest(name=t.name), timeout=60)
            divergence = await asyncio.to_thread(_replay, self.daemon, t.watch.key)
            out.append(
                CaseOutcome(
                    fault=t.fault,
                    run=t.name,
                    injected=t.injected,
                    state=pb.State.Name(run.state),
                    reason=run.state_reason,
                    records_lost=[*t.lost, *records_lost(t.ack, history, calls)],
                    # Expiring is what a lease of a sandbox paused past its TTL is for; for any
                    # other fault, a lease only its TTL released was left behind by its holder.
                    leases_leaked=[
                        *leases_held_at_end(events),
                        *(leases_expired(events) if t.fault != "container_pause" else []),
                    ],
                    anomalies=[a for a in (check(events) for check in t.checks) if a],
                    replay_divergence=divergence,
                    note="; ".join(t.notes),
                )
            )
        for w in self._watches.values():
            await w.stop()
        return out

    async def leftovers(self) -> dict[str, list[str]]:
        """Once the daemon was stopped: what it left behind."""
        found = await leftovers(self.daemon.daemon_id, self.daemon.state_dir, referenced_images(self.daemon))
        # A control directory is named by a hash of its run's key: say whose it is.
        owners = {hashlib.sha256(t.watch.key.encode()).hexdigest()[:16]: t.name for t in self.tracked}
        found["sockets"] = [
            f"{path} ({next((run for h, run in owners.items() if h in path), 'no run of ours')})"
            for path in found.get("sockets", [])
        ]
        found["processes"] = self.daemon.orphans()
        for kind, items in self.left_behind.items():
            found.setdefault(kind, []).extend(items)
        return found


def _replay(daemon: FaultDaemon, run_key: str) -> str | None:
    """The run's stored journal replayed through fresh sources: None, or the divergence."""
    from sclated.runs import RunSpec, default_registry, replay_stored
    from sclated.scheduler import ReplayDivergence

    rows = daemon.read("SELECT spec FROM runs WHERE name=?", (run_key,))
    if not rows:
        return "the run is not in the store"
    spec = RunSpec.from_dict(json.loads(rows[0][0]))
    try:
        replay_stored(_registry(default_registry), spec, journal_of(daemon, run_key))
    except ReplayDivergence as exc:
        return exc.message
    return None


_REGISTRY: list[Any] = []


def _registry(make: Any) -> Any:
    """One registry for every replay (making it registers images and loads adapters)."""
    if not _REGISTRY:
        _REGISTRY.append(make(None))
    return _REGISTRY[0]
