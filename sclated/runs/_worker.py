"""One run, from its spec to its results.

The worker loads the benchmark scenario and the agent, builds the scheduler,
clock and loop, executes effects (agent turns, session control, grading),
and reports everything that happens to a :class:`RunSink` (which makes it
durable and visible to watchers). A run can start fresh or resume from a
durable journal: replay restores the scheduler exactly, then deliveries and
gradings that were in flight are dispatched again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from adapters import (
    AgentAdapter,
    AgentEnvironment,
    Capability,
    Judge,
    JudgeReply,
    Scenario,
    ScenarioConfig,
    SeededSessions,
    SessionSeed,
    Verdict,
    Workspace,
    WorldChange,
)
from sclated.clock import ClockConfig, Jump, Lease, LeaseChange, SimClock, WallLedger
from sclated.errors import FailedPrecondition, InvalidArgument, NotFound, describe
from sclated.report import Timeline
from sclated.runs._deliveries import Delivery, DeliveryLog
from sclated.runs._journal_json import entry_from_json, entry_to_json
from sclated.runs._loop import RunLoop, RunSummary, Turn
from sclated.runs._observe import NO_RUNS_OBSERVER, RunsObserver
from sclated.runs._registry import Registry, RunTaskContainers
from sclated.runs._spec import RunSpec
from sclated.scheduler import (
    AgentControl,
    At,
    DeliverPrompt,
    Effect,
    EventSpec,
    ExecInSandbox,
    FireRecord,
    Grade,
    InputRecord,
    Notify,
    SaveSnapshot,
    Scheduler,
    StopRun,
    WorldEvent,
    replay,
)

__all__ = ["Capture", "RunOutcome", "RunSink", "RunWorker", "load_scenario", "new_scheduler", "replay_stored"]

log = logging.getLogger("sclated.runs")

_REPLY_DISPLAY_LIMIT = 4096
"""Replies are graded and journaled whole; the run event (for watchers) carries at
most this many characters, marked ``reply_truncated``."""

AGENT_WORK = ("turn", "model_call")
"""Kinds of work (see WallLedger) that are the agent's own: its turns and model calls."""
_WORK_PRIORITY = (*AGENT_WORK, "cron", "grading", "session_control", "snapshot", "dispatch", "time_publication")


class RunSink(Protocol):
    def emit(self, kind: str, payload: dict[str, Any], sim_ns: int) -> None: ...
    def journal(self, entry: dict[str, Any]) -> None: ...
    def progress(self, sim_ns: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Capture:
    """What a snapshot of a running run holds besides its files (see RunWorker.capture)."""

    journal_length: int
    """The durable journal prefix (entries with seq below this) the snapshot goes with."""
    sim_ns: int
    sandbox: dict[str, Any] | None
    """The sandbox's SnapshotInfo as a dict, for agents in a sandbox."""
    agent_state: bool
    """Whether the agent's in-process state was saved (only when no turn was in flight)."""


@dataclass(slots=True)
class RunOutcome:
    state: str
    reason: str
    results: dict[str, Any] = field(default_factory=dict)


def load_scenario(registry: Registry, spec: RunSpec) -> Scenario:
    """Load (and so validate) the benchmark scenario a spec names."""
    bench = registry.benchmark(spec.benchmark.name)
    data_dir = Path(spec.benchmark.data_dir) if spec.benchmark.data_dir else None
    if data_dir is not None and not data_dir.is_dir():
        raise InvalidArgument(
            f"run.benchmark.data_dir {str(data_dir)!r} is not a directory on the daemon's host",
            field="run.benchmark.data_dir",
        )
    try:
        capabilities = frozenset(Capability(c) for c in registry.agent(spec.agent.harness).capabilities)
    except NotFound:
        capabilities = frozenset()  # the agent's own check names it
    return bench.load(
        ScenarioConfig(
            data_dir=data_dir,
            scenario=spec.benchmark.scenario or None,
            subset=spec.benchmark.subset,
            options=spec.benchmark.options,
            agent_capabilities=capabilities,
        )
    )


def new_scheduler(spec: RunSpec, scenario: Scenario, agent: AgentAdapter) -> Scheduler:
    """A run's scheduler before anything fired: the scenario's sources and the agent's routines."""
    start = spec.clock.start_ns if spec.clock.start_ns is not None else scenario.start_ns
    return Scheduler(start_ns=start, sources=[*scenario.sources(), *agent.routines()])


def replay_stored(registry: Registry, spec: RunSpec, journal: Sequence[Mapping[str, Any]]) -> Scheduler:
    """Replay a run's stored journal (its durable JSON entries, in order) through fresh
    sources, as a resumed run does; raises ReplayDivergence naming the first entry that
    differs. Loads the scenario (reads its files): call it off the event loop."""
    scenario = load_scenario(registry, spec)
    agent = registry.agent(spec.agent.harness).make(spec.agent.options, spec.agent.memory)
    return replay([entry_from_json(dict(e)) for e in journal], lambda: new_scheduler(spec, scenario, agent))


def _session_seed(data: Mapping[str, Any]) -> SessionSeed:
    """A start event's ``session_seed`` (JSON in the journal) as the agent takes it."""

    def path(key: str) -> Path | None:
        raw = data.get(key)
        return Path(str(raw)) if raw else None

    return SessionSeed(
        session_id=str(data.get("session_id", "")),
        agent=str(data.get("agent", "")),
        transcript=path("transcript"),
        harness_config=path("harness_config"),
    )


def _iso(sim_ns: int) -> str:
    return dt.datetime.fromtimestamp(sim_ns / 1e9, tz=dt.UTC).isoformat(timespec="seconds")


def _jsonable(value: Any) -> Any:
    """Verdict details must survive the durable journal: keep what JSON can carry."""
    return json.loads(json.dumps(value, default=str))


class _GradeContext:
    def __init__(self, worker: RunWorker) -> None:
        self._worker = worker

    async def exec_in_workspace(self, command: str, *, timeout_s: float = 120.0) -> tuple[int, str]:
        workspace = self._worker.agent.workspace
        if workspace is None:
            raise FailedPrecondition(
                f"agent {self._worker.agent.name!r} has no workspace to run a check in",
                reason="NO_WORKSPACE",
            )
        return await workspace.exec(command, timeout_s=timeout_s)

    async def export_from_workspace(self, src: str, dest: Path) -> None:
        await self._worker._needs_workspace().export(src, dest)

    def reply_for(self, round_id: str) -> str | None:
        return self._worker.replies.get(round_id)

    async def judge(self, prompt: str) -> JudgeReply:
        judge = self._worker.judge
        if judge is None:
            raise FailedPrecondition("this run has no judge model endpoint", reason="NO_JUDGE")
        reply = await judge(prompt)
        self._worker.note_judge(reply)
        return reply


class RunWorker:
    def __init__(
        self,
        name: str,
        spec: RunSpec,
        registry: Registry,
        sink: RunSink,
        *,
        journal: list[dict[str, Any]] | None = None,
        judge: Judge | None = None,
        run_dir: Path | None = None,
        observer: RunsObserver = NO_RUNS_OBSERVER,
    ) -> None:
        self.name = name
        self.observer = observer
        """Told of this run's fires, jumps and deliveries (the daemon's metrics)."""
        self.run_dir = run_dir
        self.keep_sandbox = False
        """Set before cancelling for a daemon shutdown: the sandbox stays for the resumed run."""
        self.spec = spec
        self.sink = sink
        self.judge = judge
        self.scenario = load_scenario(registry, spec)
        self.agent: AgentAdapter = registry.agent(spec.agent.harness).make(spec.agent.options, spec.agent.memory)
        self._registry = registry
        self._task_containers: RunTaskContainers | None = None
        self._journal_in = journal
        self.replies: dict[str, str] = {}
        self.verdicts: dict[str, Verdict] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._turn_lock = asyncio.Lock()
        self._current_turn: Turn | None = None
        self._failure: BaseException | None = None
        self.deliveries = DeliveryLog()
        self._fire_wall: dict[str, int] = {}
        self.ledger: WallLedger | None = None
        self.loop: RunLoop | None = None
        self.timeline = Timeline()
        self.restore_from: Path | None = None
        """A snapshot directory: the agent (sandbox, in-process state) starts from it."""
        self.on_restored: Callable[[], Awaitable[None]] | None = None
        """Called once the agent was restored from ``restore_from``."""
        self.on_save_snapshot: Callable[[str, int], Awaitable[None]] | None = None
        """Takes a snapshot for a scenario's SaveSnapshot effect: (label, fire seq)."""
        self._agent_ready = False
        self._state_restored = False
        self._judges: dict[tuple[str, str], bool] = {}
        self._world_lock = asyncio.Lock()
        """World steps and their journal records in one order (fires and the agent's calls)."""

    # -- building -------------------------------------------------------------
    def _make_scheduler(self) -> Scheduler:
        return new_scheduler(self.spec, self.scenario, self.agent)

    def _build(self) -> RunLoop:
        if self._journal_in:
            entries = [entry_from_json(e) for e in self._journal_in]
            sched = replay(entries, self._make_scheduler)
            for entry in sched.journal:
                if isinstance(entry, InputRecord) and entry.kind == "action":
                    self._note_action(entry.payload)
                elif isinstance(entry, InputRecord) and entry.kind == "grade":
                    self._note_grade(entry.payload)
        else:
            sched = self._make_scheduler()
            for entry in sched.journal:  # registrations made while adding sources
                self.sink.journal(entry_to_json(entry))
        c = self.spec.clock
        clock = SimClock(ClockConfig(mode=c.mode, start_ns=sched.now_ns, rate=c.rate))
        self.ledger = WallLedger(clock.leases, priority=_WORK_PRIORITY)
        loop = RunLoop(sched, clock, self._execute, observer=self, ledger=self.ledger)
        self.loop = loop
        return loop

    def _note_action(self, payload: dict[str, Any]) -> None:
        if payload.get("kind") == "turn_end":
            data = payload.get("data", {})
            rid = data.get("round_id")
            if rid:
                self.replies[str(rid)] = str(data.get("reply", ""))
            delivery = data.get("delivery")
            if isinstance(delivery, dict):
                self.deliveries.add(Delivery.from_json(delivery))

    def _note_grade(self, payload: dict[str, Any]) -> None:
        """A verdict from the journal (a resumed or restored run reports rounds graded before)."""
        outcome = payload.get("outcome")
        if isinstance(outcome, dict) and outcome.get("round_id"):
            score = outcome.get("score")
            self.verdicts[str(outcome["round_id"])] = Verdict(
                round_id=str(outcome["round_id"]),
                score=float(score) if isinstance(score, int | float) else None,
                graded=bool(outcome.get("graded")),
                reason=str(outcome.get("reason", "")),
                details=outcome.get("details") or {},
            )

    # -- observer (RunObserver) ------------------------------------------------
    def on_fire(self, record: FireRecord, wall_ns: int) -> None:
        self._fire_wall[record.event_id] = wall_ns
        self.observer.on_fire(
            record.effects[0].kind if record.effects else "none", (record.fired_ns - record.due_ns) / 1e9
        )
        self.timeline.note_fire(wall_ns, record.fired_ns, record.event_id, [e.kind for e in record.effects])
        self.sink.journal(entry_to_json(record))
        self.sink.emit(
            "fire",
            {
                "event_id": record.event_id,
                "source": record.source,
                "due_ns": record.due_ns,
                "priority": record.priority,
                "snapshot_version": record.snapshot_version,
                "effects": [e.kind for e in record.effects],
            },
            record.fired_ns,
        )
        self.sink.progress(record.fired_ns)

    def on_jump(self, jump: Jump) -> None:
        self.observer.on_jump(jump.skipped_ns / 1e9)
        self.timeline.note_jump(jump.wall_ns, jump.from_ns, jump.to_ns)
        self.sink.emit("jump", {"from_ns": jump.from_ns, "to_ns": jump.to_ns}, jump.to_ns)

    def on_lease(self, change: LeaseChange) -> None:
        if change.kind == "heartbeat" or self.loop is None:
            return
        self.sink.emit(
            "lease",
            {
                "change": change.kind,
                "lease": change.lease.name,
                "holder": change.lease.holder,
                "held_count": change.held_count,
            },
            self.loop.clock.now(),
        )

    def on_input(self, record: InputRecord) -> None:
        self.sink.journal(entry_to_json(record))

    # -- effects ----------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and self._failure is None:
            self._failure = exc
            if self.loop is not None:
                self.loop.request_stop(f"failed: {exc}")

    def fail(self, reason: str) -> None:
        """End the run FAILED with ``reason`` (the first failure wins)."""
        if self._failure is None:
            self._failure = FailedPrecondition(reason, reason="SUBSTRATE_FAILED")
        if self.loop is not None:
            self.loop.request_stop(f"failed: {reason}")

    def _lease(self, name: str, fire: FireRecord, kind: str) -> Lease:
        assert self.loop is not None
        return self.loop.leases.acquire(name, self.agent.name, sim_ns=fire.fired_ns, kind=kind)

    def _execute(self, fire: FireRecord, effect: Effect) -> Awaitable[None] | None:
        assert self.loop is not None
        if isinstance(effect, DeliverPrompt | Notify):
            # Busy now, at the fire, so the clock cannot jump before the turn starts.
            turn = self.loop.begin_turn(f"turn:{fire.event_id}", self.agent.name, fire.fired_ns)
            self._spawn(self._turn(fire, effect, turn))
            return None
        if isinstance(effect, Grade):
            lease = self._lease(f"grade:{effect.check_id}", fire, "grading")
            self._spawn(self._grade(effect, lease))
            return None
        if isinstance(effect, AgentControl):
            return self._control(fire, effect)
        if isinstance(effect, ExecInSandbox):
            lease = self._lease(f"exec:{effect.holder}", fire, "cron")
            self._spawn(self._exec(effect, lease))
            return None
        if isinstance(effect, WorldEvent):
            # Awaited by the loop: the world changes in fire order, nothing overtakes it.
            return self._world_event(fire, effect)
        if isinstance(effect, StopRun):
            return None
        if isinstance(effect, SaveSnapshot):
            if self.on_save_snapshot is None:
                raise FailedPrecondition("this run has nowhere to keep snapshots", reason="UNSUPPORTED")
            # Awaited by the loop: nothing else fires while the snapshot is taken.
            return self.on_save_snapshot(effect.label, fire.seq)
        raise FailedPrecondition(f"no executor for effect {effect.kind!r} (event {fire.event_id!r})")

    async def _world_event(self, fire: FireRecord, effect: WorldEvent) -> None:
        world = self.scenario.world
        if world is None:
            raise FailedPrecondition(
                f"event {fire.event_id!r} is a world event but the scenario has no world", reason="NO_WORLD"
            )
        async with self._world_lock:
            change = await world.apply(effect, due_ns=fire.due_ns, fired_ns=fire.fired_ns)
            self._note_world_change(change, origin=fire.event_id)

    def _note_world_change(self, change: WorldChange, *, origin: str) -> None:
        """Journal what a world step changed: state for ``When`` triggers, and each thing the
        agent is now told as an event at this time (so a replay tells it the same)."""
        loop = self.loop
        assert loop is not None
        if change.state:
            loop.apply_world(dict(change.state))
        if change.deliveries:
            now = loop.clock.now()
            loop.register(
                [EventSpec(f"{origin}#tell{i}", At(now), (d,)) for i, d in enumerate(change.deliveries)], now_ns=now
            )

    async def world_request(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        """The sandbox's ``are`` command: the world's tools, or one call of the agent."""
        world = self.scenario.world
        if world is None:
            raise FailedPrecondition("this run's scenario has no world to call", reason="NO_WORLD")
        loop = self.loop
        if loop is None:
            raise FailedPrecondition("the run is not running", reason="NOT_RUNNING")
        op = msg.get("op")
        if op == "tools":
            return {"tools": await world.tools()}
        if op != "call":
            raise InvalidArgument(f"world op must be tools or call, got {op!r}", field="op")
        app, function, args = msg.get("app"), msg.get("function"), msg.get("args", {})
        if not isinstance(app, str) or not app or not isinstance(function, str) or not function:
            raise InvalidArgument("a world call needs app and function (strings)", field="app")
        if not isinstance(args, dict):
            raise InvalidArgument("a world call's args must be an object", field="args")
        timeout_s = world.wait_for(app, function, args)
        if timeout_s is not None:
            return await self._world_wait(timeout_s)
        async with self._world_lock:
            at = loop.clock.now()
            reply = await world.agent_call(app, function, args, at)
            rec = loop.apply_action(
                self.agent.name,
                "world_call",
                {"app": app, "function": function, "args": _jsonable(args), "at_ns": at, "error": reply.error},
            )
            self._note_world_change(reply.change, origin=f"call{rec.seq}")
        return {"result": reply.result, "error": reply.error, "sim_ns": at}

    async def _world_wait(self, timeout_s: float) -> dict[str, Any]:
        """The agent waits for something to happen: in simulated time, until the world's
        next scheduled event (or ``timeout_s``, when given), so the clock jumps there.
        What happens then reaches the agent as its next messages."""
        loop = self.loop
        assert loop is not None
        now = loop.clock.now()
        # The world's next event with a time (what follows a condition has none yet).
        dues = [
            p.due_ns
            for p in loop.scheduler.pending()
            if p.due_ns is not None and p.due_ns > now and any(isinstance(e, WorldEvent) for e in p.spec.effects)
        ]
        nxt = min(dues) if dues else None
        until = now + int(timeout_s * 1e9) if timeout_s > 0 else (nxt if nxt is not None else now)
        if nxt is not None:
            until = min(until, nxt)
        loop.apply_action(self.agent.name, "world_wait", {"until_ns": until, "timeout_s": timeout_s})
        # The HYBRID clock flows meanwhile: an event due by now needs no wait at all.
        woke = await self.wait(until) if until > loop.clock.now() + 1_000_000 else loop.clock.now()
        return {
            "result": f"waited until {_iso(woke)}; what happened reaches you as messages",
            "error": None,
            "sim_ns": woke,
        }

    async def _world_reply(self, text: str) -> None:
        """A turn ended: the world hears the agent's last words (Gaia2: its answer)."""
        world = self.scenario.world
        loop = self.loop
        if world is None or loop is None:
            return
        async with self._world_lock:
            at = loop.clock.now()
            change = await world.agent_reply(text, at)
            rec = loop.apply_action(self.agent.name, "world_reply", {"text": text, "at_ns": at})
            self._note_world_change(change, origin=f"reply{rec.seq}")

    async def _open_world(self) -> None:
        """Open the scenario's world before the scheduler is built (its sources may
        need it); a resumed run's world gets the journal's world fires again, in order."""
        world = self.scenario.world
        if world is None:
            return
        await world.open(self.run_dir, self.judge)

    async def _rebuild_world(self, loop: RunLoop) -> None:
        world = self.scenario.world
        if world is None or not self._journal_in:
            return
        changes: dict[str, Any] = {}
        for entry in loop.scheduler.journal:
            if isinstance(entry, FireRecord):
                for effect in entry.effects:
                    if isinstance(effect, WorldEvent):
                        change = await world.apply(effect, due_ns=entry.due_ns, fired_ns=entry.fired_ns)
                        changes.update(change.state)
            elif isinstance(entry, InputRecord) and entry.kind == "action":
                kind, data = entry.payload.get("kind"), entry.payload.get("data") or {}
                if kind == "world_call":
                    reply = await world.agent_call(
                        str(data["app"]), str(data["function"]), dict(data.get("args") or {}), int(data["at_ns"])
                    )
                    changes.update(reply.change.state)
                elif kind == "world_reply":
                    changes.update((await world.agent_reply(str(data["text"]), int(data["at_ns"]))).state)
        # A crash between a world fire and its journaled changes: record them now.
        seen = loop.scheduler.snapshot().world
        missing = {k: v for k, v in changes.items() if seen.get(k) != v}
        if missing:
            loop.apply_world(missing)

    async def _turn(self, fire: FireRecord, effect: DeliverPrompt | Notify, turn: Turn) -> None:
        assert self.loop is not None
        loop = self.loop
        try:
            async with self._turn_lock:
                # A `wait` from inside the sandbox suspends this turn (see wait()).
                self._current_turn = turn
                turn_started_wall, turn_started_sim = time.monotonic_ns(), loop.clock.now()
                prompt = effect if isinstance(effect, DeliverPrompt) else DeliverPrompt(effect.text)
                try:
                    result = await self.agent.deliver(prompt)
                finally:
                    self._current_turn = None
            delay_ms: float | None = None
            fired_wall = self._fire_wall.get(fire.event_id)
            if result.received_wall_ns and fired_wall is not None:
                # Never clamped: a receipt before the fire is a clock fault, counted as such.
                lateness_ns = fire.fired_ns - fire.due_ns if loop.clock.flows else 0
                delay_ms = (lateness_ns + result.received_wall_ns - fired_wall) / 1e6
                self.observer.on_delivery(delay_ms / 1e3)
            delivery = Delivery(fire.event_id, fire.seq, fire.due_ns, delay_ms, result.received_sim_ns)
            self.deliveries.add(delivery)
            round_id = prompt.round_id or ""
            reply = result.reply
            now = loop.clock.now()
            self.timeline.note_turn(turn_started_wall, time.monotonic_ns(), turn_started_sim, round_id)
            memory = _memory_turn(result.details.get("memory"))
            self.sink.emit(
                "turn",
                {
                    **({"memory": memory} if memory is not None else {}),
                    "round_id": round_id,
                    "session": prompt.session or "",
                    "phase": "ended",
                    # What the harness was given, so a viewer can show the conversation turn by turn.
                    "prompt": prompt.text[:_REPLY_DISPLAY_LIMIT],
                    "prompt_truncated": len(prompt.text) > _REPLY_DISPLAY_LIMIT,
                    "reply": reply[:_REPLY_DISPLAY_LIMIT],
                    "reply_truncated": len(reply) > _REPLY_DISPLAY_LIMIT,
                    "reply_chars": len(reply),
                    "delivery_delay_ms": delay_ms if delay_ms is not None else 0.0,
                    "harness_error": str(result.details.get("error") or "")[-_REPLY_DISPLAY_LIMIT:],
                },
                now,
            )
            if round_id:
                self.replies[round_id] = reply
            await self._world_reply(reply)
            loop.apply_action(
                "agent",
                "turn_end",
                {"round_id": round_id, "event_id": fire.event_id, "reply": reply, "delivery": delivery.to_json()},
            )
        finally:
            turn.end()

    async def _grade(self, effect: Grade, lease: Lease) -> None:
        assert self.loop is not None
        loop = self.loop
        try:
            verdict = await self.scenario.grade(effect, _GradeContext(self))
            self.verdicts[verdict.round_id] = verdict
            self.sink.emit(
                "verdict",
                {
                    "round_id": verdict.round_id,
                    "graded": verdict.graded,
                    "score": verdict.score if verdict.score is not None else 0.0,
                    "reason": verdict.reason,
                },
                loop.clock.now(),
            )
            # The verdict itself goes into the snapshot: adapters chain on it (feedback, next round).
            loop.apply_grade(effect.check_id, _jsonable(dataclasses.asdict(verdict)))
        finally:
            loop.leases.release(lease)

    async def _control(self, fire: FireRecord, effect: AgentControl) -> None:
        if effect.action == "start":
            if fire.data.get("workspace_fresh"):
                await self._needs_workspace().clear()
            seed = fire.data.get("workspace_seed")
            if seed:
                await self._needs_workspace().seed(Path(str(seed)), str(fire.data.get("workspace_dest", "/workspace")))
            history = fire.data.get("session_seed")
            if isinstance(history, Mapping):
                await self._needs_seeded_sessions().seed_session(_session_seed(history))
            await self.agent.start_session(fire.event_id)
            assert self.loop is not None
            # What a benchmark waits on before its first prompt of the session.
            self.loop.apply_action("agent", "session_started", {"event_id": fire.event_id})
        elif effect.action == "stop":
            await self.agent.stop_session()
        elif effect.action == "consolidate":
            jobs = self.agent.jobs
            if jobs is None or Capability.CONSOLIDATE not in self.agent.capabilities:
                raise FailedPrecondition(f"agent {self.agent.name!r} cannot consolidate memory", reason="UNSUPPORTED")
            await jobs.consolidate()
        else:
            raise FailedPrecondition(f"agent control {effect.action!r} is not supported by {self.agent.name!r}")

    async def _exec(self, effect: ExecInSandbox, lease: Lease) -> None:
        assert self.loop is not None
        try:
            jobs = self.agent.jobs
            if jobs is not None:
                await jobs.run_job(effect.command, holder=effect.holder, timeout_s=effect.timeout_s)
            else:
                await self._needs_workspace().exec(effect.command, timeout_s=effect.timeout_s)
        finally:
            self.loop.leases.release(lease)

    # -- running ------------------------------------------------------------------
    def _redispatch_unfinished(self, loop: RunLoop) -> None:
        """After a replay: deliver again what was in flight when the previous process died.

        A run whose scenario had already told it to stop (its StopRun fired, and the
        process died before the run's end was written) stops at once, for that reason:
        nothing is left to fire, and it would otherwise end as merely idle."""
        sched = loop.scheduler
        for fire in sched.fires:
            for effect in fire.effects:
                if isinstance(effect, StopRun):
                    loop.request_stop(effect.reason)
                    return
        ended = {
            str(e.payload.get("data", {}).get("event_id"))
            for e in sched.journal
            if isinstance(e, InputRecord) and e.kind == "action" and e.payload.get("kind") == "turn_end"
        }
        graded = set(sched.snapshot().grades)
        session_open = False
        for fire in sched.fires:
            for effect in fire.effects:
                if isinstance(effect, AgentControl) and effect.target == "agent":
                    session_open = effect.action == "start" or (session_open and effect.action != "stop")
        if session_open and not self._state_restored:
            # A restored in-process state already holds its session.
            self._spawn(self.agent.start_session("resumed"))
        for fire in sched.fires:
            for effect in fire.effects:
                if isinstance(effect, DeliverPrompt | Notify) and fire.event_id not in ended:
                    # Delivered again now: its delay is measured from this dispatch.
                    self._fire_wall[fire.event_id] = time.monotonic_ns()
                    turn = loop.begin_turn(f"turn:{fire.event_id}", self.agent.name, fire.fired_ns)
                    self._spawn(self._turn(fire, effect, turn))
                elif isinstance(effect, Grade) and effect.check_id not in graded:
                    self._spawn(self._grade(effect, self._lease(f"grade:{effect.check_id}", fire, "grading")))

    def _needs_seeded_sessions(self) -> SeededSessions:
        sessions = self.agent.sessions
        if sessions is None:
            raise FailedPrecondition(
                f"agent {self.agent.name!r} cannot take a recorded session history", reason="UNSUPPORTED"
            )
        return sessions

    def _needs_workspace(self) -> Workspace:
        workspace = self.agent.workspace
        if workspace is None:
            raise FailedPrecondition(f"agent {self.agent.name!r} has no workspace", reason="NO_WORKSPACE")
        return workspace

    def schedule_own(self, specs: Sequence[EventSpec]) -> None:
        """Events the agent scheduled itself (its harness's cron jobs), journaled.

        A harness reads its own schedule again after every turn and job, so it
        reports the same job many times: an id the scheduler knows is skipped. A
        due time already past (the job came due during a turn) becomes now, the
        way a late cron job runs at once."""
        assert self.loop is not None
        sched, now = self.loop.scheduler, self.loop.clock.now()
        fresh: list[EventSpec] = []
        for spec in specs:
            if sched.knows(spec.id) or any(s.id == spec.id for s in fresh):
                continue
            trigger = spec.trigger
            if isinstance(trigger, At) and trigger.time_ns < now:
                spec = dataclasses.replace(spec, trigger=At(now))
            fresh.append(spec)
        if fresh:
            self.loop.register(fresh, now_ns=now)

    async def wait(self, until_ns: int) -> int:
        """Wait in simulated time (``sclate-wait``): the current turn, if any, is suspended.
        A time that has passed (the agent read a clock that flowed on since) wakes at once."""
        assert self.loop is not None
        turn = self._current_turn
        if turn is not None and turn.busy:
            async with turn.suspended(until_ns, past_is_now=True) as woke:
                return woke
        return await self.loop.sleep_until(until_ns, waiter=self.agent.name, past_is_now=True)

    def environment(self, loop: RunLoop) -> AgentEnvironment:
        tenant, _, run_id = self.name.partition("/")
        m = self.spec.agent.model
        return AgentEnvironment(
            run_key=self.name,
            tenant=tenant,
            run_id=run_id,
            run_dir=self.run_dir,
            clock=loop.clock,
            leases=loop.leases,
            wait=self.wait,
            model_base_url=m.base_url,
            model_api=m.api,
            model_name=m.model,
            model_api_key_env=m.api_key_env,
            model_skip_token_ids=m.skip_token_ids,
            model_sampling_seed=m.sampling_seed,
            resources=self.spec.agent.resources,
            workspace_seed=self.scenario.workspace_seed(),
            resume=bool(self._journal_in),
            fail_run=self.fail,
            restore_from=self.restore_from,
            schedule=self.schedule_own,
            world=self.world_request if self.scenario.world is not None else None,
        )

    async def run(self) -> RunOutcome:
        try:
            await self._open_environment()
            await self._open_world()
            loop = self._build()
            await self._rebuild_world(loop)
        except BaseException:
            await self._close_world()
            await self._close_environment()
            raise
        ledger = loop.ledger
        summary: RunSummary | None = None
        try:
            with ledger.segment("sandbox_prepare"):
                await self.agent.prepare(self.environment(loop))
                # A branch's restored state is part of getting its sandbox ready.
                if self.restore_from is not None:
                    await self._restore_agent_state(self.restore_from)
            if self._journal_in:
                self._redispatch_unfinished(loop)
            self._agent_ready = True
            try:
                summary = await loop.run()
            finally:
                self._agent_ready = False
        finally:
            for task in list(self._tasks):
                task.cancel()
            for task in list(self._tasks):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            with ledger.segment("sandbox_close"):
                if not self.keep_sandbox:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(self.agent.stop_session(), 30)
                await self._release_agent()
            await self._close_world()
            await self._close_environment()
        assert summary is not None
        results = self.results(summary)
        if self._failure is not None:
            exc = self._failure
            msg = describe(exc)
            return RunOutcome("FAILED", msg, results)
        if summary.reason.startswith("failed"):
            return RunOutcome("FAILED", summary.reason, results)
        return RunOutcome("SUCCEEDED", summary.reason, results)

    async def _open_environment(self) -> None:
        """Have the scenario's task environment ready (SWE-bench's instance images and
        repositories) before the scheduler is built; again after a daemon restart."""
        environment = self.scenario.environment
        if environment is None:
            return
        factory = self._registry.task_containers
        if factory is None:
            raise FailedPrecondition(
                f"benchmark {self.spec.benchmark.name!r} needs containers of its own images, "
                "and this daemon has no sandbox runtime",
                reason="NO_RUNTIME",
            )
        tenant, _, run_id = self.name.partition("/")
        self._task_containers = factory(tenant, run_id)
        await environment.open(self.run_dir, self._task_containers)

    async def _close_environment(self) -> None:
        environment = self.scenario.environment
        if environment is not None:
            with contextlib.suppress(Exception):
                await environment.close()
        if self._task_containers is not None:
            with contextlib.suppress(Exception):
                await self._task_containers.close()

    async def _close_world(self) -> None:
        world = self.scenario.world
        if world is not None:
            with contextlib.suppress(Exception):
                await world.close()

    async def _restore_agent_state(self, snapshot_dir: Path) -> None:
        state_dir = snapshot_dir / "agent"
        if await asyncio.to_thread(state_dir.is_dir):
            await self.agent.restore_state(state_dir)
            self._state_restored = True
        if self.on_restored is not None:
            await self.on_restored()

    async def capture(
        self, dest: Path, on_paused: Callable[[], Awaitable[None]] | None = None, *, at_turn_boundary: bool = False
    ) -> Capture:
        """Save the running agent into ``dest`` and say which journal prefix goes with it.

        A sandboxed agent (one with ``snapshot``) is frozen, committed and its
        state directories archived; the journal length and simulated time are
        read while it is frozen (and ``on_paused`` runs then), so every
        journaled fire and input happened before the files were taken. The
        agent's in-process state (``save_state``) is saved only when no turn
        is in flight, and then no turn starts until the snapshot is done: a turn
        in flight has no ``turn_end`` in the prefix, so a restored run delivers
        it again to an agent that starts a fresh session, as a resumed run does.
        With ``at_turn_boundary`` the snapshot waits for the turn in flight (and any
        already waiting for the agent) to end instead, so the session is always saved.
        """
        loop = self.loop
        if loop is None or not self._agent_ready:
            raise FailedPrecondition(
                f"run {self.name!r} is starting or stopping; take the snapshot once it is running",
                reason="RUN_NOT_READY",
            )
        marks: dict[str, int] = {}

        async def paused() -> None:
            marks["journal_length"] = len(loop.scheduler.journal)
            marks["sim_ns"] = loop.clock.now()
            if on_paused is not None:
                await on_paused()

        idle = at_turn_boundary or not self._turn_lock.locked()
        async with contextlib.AsyncExitStack() as hold:
            if idle:
                await hold.enter_async_context(self._turn_lock)
                if not self._agent_ready:
                    raise FailedPrecondition(
                        f"run {self.name!r} ended while its snapshot waited for the turn in flight",
                        reason="RUN_NOT_READY",
                    )
            sandbox: dict[str, Any] | None = None
            files = self.agent.files
            if files is not None:
                sandbox = await files.snapshot(dest / "sandbox", on_paused=paused)
            else:
                await paused()
            saved_state = idle and Capability.SESSION_STATE in self.agent.capabilities
            if saved_state:
                await self.agent.save_state(dest / "agent")
        return Capture(marks["journal_length"], marks["sim_ns"], sandbox, saved_state)

    async def _release_agent(self) -> None:
        # Shielded: this runs while the run is being cancelled, and a sandbox
        # must never be left behind half-closed.
        try:
            await asyncio.shield(self.agent.close(keep=self.keep_sandbox))
        except Exception:
            log.exception("run %s: closing agent %r failed", self.name, self.agent.name)

    def _work_split(self, span_ns: int, loop_wall_ns: int) -> dict[str, Any]:
        """The run's wall time split into the agent's own work and the substrate's overhead.

        ``compression_limit`` (simulated span over busy time, busy = any lease
        held) counts the daemon's own work as busy, so it stays near the ratio
        whatever the overhead. ``compression_limit_agent`` is the span over the
        agent's own work only (its turns and model calls): what a substrate with
        no overhead at all would reach; ``compression_vs_agent_limit`` is how
        close this run came to it (the share of the loop's wall time the agent
        was working).
        """
        if self.loop is None:
            return {}
        totals = {k: v / 1e9 for k, v in self.loop.ledger.totals_ns().items()}
        run_wall = sum(totals.values())  # = the ledger's elapsed time, read once
        agent = sum(totals.get(k, 0.0) for k in AGENT_WORK)
        waiting = totals.get("waiting", 0.0)
        overhead = {k: v for k, v in sorted(totals.items()) if k not in AGENT_WORK and k != "waiting"}
        limit_agent = span_ns / 1e9 / agent if agent > 0 else 0.0
        ratio = span_ns / loop_wall_ns if loop_wall_ns else 0.0
        return {
            "run_wall_s": run_wall,
            "agent_s": agent,
            "waiting_s": waiting,
            "overhead_s": overhead,
            "overhead_fraction": sum(overhead.values()) / run_wall if run_wall > 0 else 0.0,
            "compression_limit_agent": limit_agent,
            "compression_vs_agent_limit": ratio / limit_agent if limit_agent > 0 else 0.0,
        }

    def _judges_seen(self) -> list[dict[str, Any]]:
        """Who judged this run's verdicts (those graded by an earlier process included)."""
        seen = dict(self._judges)
        for v in self.verdicts.values():
            d = v.details
            if "judge_endpoint" in d:
                seen.setdefault(
                    (str(d["judge_endpoint"]), str(d.get("judge_model", ""))), bool(d.get("judge_embedded"))
                )
        out = []
        for (endpoint, model), embedded in sorted(seen.items()):
            row: dict[str, Any] = {"endpoint": endpoint, "model": model, "embedded": embedded}
            if embedded:
                row["note"] = (
                    "judged by the daemon's small embedded model: scores are not comparable with published "
                    "ones; set judge_base_url/judge_model/judge_api_key_env for a real judge"
                )
            out.append(row)
        return out

    def note_judge(self, reply: JudgeReply) -> None:
        """Remember who judged (results say so; the embedded model's scores are not comparable)."""
        self._judges[(reply.endpoint, reply.model)] = reply.embedded

    def capture_at_close(self) -> dict[str, Any] | None:
        """What the agent's capture proxy handed over when its sandbox closed (None: no proxy)."""
        report = self.agent.capture_report()
        return dict(report) if report else None

    def results(self, summary: RunSummary | None) -> dict[str, Any]:
        rounds: list[dict[str, Any]] = []
        for info in self.scenario.rounds:
            v = self.verdicts.get(info.round_id)
            graded = bool(v and v.graded and info.gradable)
            rounds.append(
                {
                    "round_id": info.round_id,
                    "day": info.day,
                    "kind": info.kind,
                    "graded": graded,
                    "score": (v.score or 0.0) if graded and v else None,
                    "reason": (v.reason if v else (info.why_ungradable or "not graded")),
                }
            )
        graded_scores = [float(r["score"]) for r in rounds if r["graded"]]
        out: dict[str, Any] = {
            "score": sum(graded_scores) / len(graded_scores) if graded_scores else None,
            "rounds": len(rounds),
            "rounds_graded": len(graded_scores),
            "round_scores": rounds,
        }
        judges = self._judges_seen()
        if judges:
            out["judges"] = judges
        process = self.agent.process_report()
        if process:
            out["harness"] = dict(process)
        if summary is not None and self.loop is not None:
            sched = self.loop.scheduler
            # A routine's next occurrence after the run ended (tomorrow's cron) was
            # never due: it is reported, not counted as scheduled-and-missed.
            beyond = sorted(p.spec.id for p in sched.pending() if p.due_ns is not None and p.due_ns > summary.end_ns)
            span_ns = summary.end_ns - sched.start_ns
            out["scheduler"] = {
                "events_scheduled": summary.scheduled - len(beyond),
                "events_beyond_end": beyond[:100],
                "events_fired": summary.fires,
                "in_order": summary.in_order,
                **self.deliveries.summary(),
                "sim_span_s": span_ns / 1e9,
                "wall_s": summary.wall_ns / 1e9,
                "compression_ratio": summary.compression_ratio,
                "compression_limit": summary.compression_limit if summary.busy_ns else 0.0,
                **self._work_split(span_ns, summary.wall_ns),
                "jumps": summary.jumps,
                "unfired": [e for e in summary.unfired if e not in set(beyond)][:100],
                "expired_leases": [
                    {"name": e.info.name, "holder": e.info.holder, "kind": e.info.kind}
                    for e in summary.expired_leases[:100]
                ],
                "end_reason": summary.reason,
                "clock_mode": self.loop.clock.mode.value,
            }
        return out


def _memory_turn(report: Any) -> dict[str, Any] | None:
    """A harness's report of its memory system's turn (recalled, stored, timings) as a
    turn event carries it: texts cut, errors joined; None without a report."""
    if not isinstance(report, dict):
        return None
    recalled = report.get("recalled")
    errors = [str(report[k]) for k in ("recall_error", "store_error") if report.get(k)]

    def number(key: str) -> float:
        value = report.get(key)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0

    return {
        "system": str(report.get("system", "")),
        "recalled": [str(t)[:500] for t in recalled[:50]] if isinstance(recalled, list) else [],
        "recall_ms": number("recall_ms"),
        "stored": int(number("stored")),
        "store_ms": number("store_ms"),
        "error": "; ".join(errors)[:1000],
    }
