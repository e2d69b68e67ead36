"""Work an agent schedules itself (a harness's cron jobs): on the run's scheduler,
journaled, each id once, a past time run at once, and replayed the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters import AgentEnvironment, InProcessAgent, TurnResult
from sclated.runs import RunWorker
from sclated.runs._journal_json import entry_from_json
from sclated.scheduler import At, DeliverPrompt, EventSpec, InputRecord, Notify, Scheduler, replay
from tests.runs.doubles import synthetic_with

H = 3_600_000_000_000


class JournalSink:
    """Test double of the run manager's sink that keeps the journal."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def emit(self, kind: str, payload: dict[str, Any], sim_ns: int) -> None:
        pass

    def journal(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)

    def progress(self, sim_ns: int) -> None:
        pass


class SelfScheduling(InProcessAgent):
    """Test double of a harness with its own cron: at start it reports a job already
    overdue, after every turn the same job again and one 3 hours on."""

    def __init__(self) -> None:
        self.env: AgentEnvironment | None = None
        self.notified_at: list[int] = []

    @property
    def name(self) -> str:
        return "self-scheduling"

    async def prepare(self, env: AgentEnvironment) -> None:
        self.env = env
        assert env.schedule is not None
        env.schedule([EventSpec("own:overdue", At(env.clock.now() - H), (Notify("overdue job"),))])

    async def start_session(self, session: str) -> None:
        pass

    async def stop_session(self) -> None:
        pass

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        assert self.env is not None and self.env.schedule is not None
        now = self.env.clock.now()
        if prompt.text.startswith("job"):
            self.notified_at.append(now)
        else:
            # Reported again and again, as a harness reads its own job table after each turn.
            self.env.schedule(
                [
                    EventSpec("own:overdue", At(now), (Notify("job again"),)),
                    EventSpec(f"own:{now // H}", At(now + 3 * H), (Notify(f"job at {now // H}"),)),
                ]
            )
        return TurnResult(reply="ok", started_ns=0, ended_ns=0, received_wall_ns=0)


async def test_own_events_fire_once_each_and_replay(tmp_path: Path) -> None:
    agent = SelfScheduling()
    registry, spec = synthetic_with("self-scheduling", lambda options: agent, days=1, events_per_day=2)
    sink = JournalSink()
    worker = RunWorker("local/own", spec, registry, sink, run_dir=tmp_path)
    outcome = await worker.run()
    assert outcome.state == "SUCCEEDED", outcome.reason
    journal = [entry_from_json(e) for e in sink.entries]
    registered = [e for e in journal if isinstance(e, InputRecord) and e.kind == "register"]
    ids = [s.id for e in registered for s in e.specs]
    assert ids.count("own:overdue") == 1 and len(ids) == len(set(ids))  # reported many times, registered once
    # The overdue job ran at once, at the run's start, not an hour before it.
    overdue = next(s for e in registered for s in e.specs if s.id == "own:overdue")
    assert isinstance(overdue.trigger, At) and overdue.trigger.time_ns >= spec_start(journal)
    assert agent.notified_at  # the agent's own jobs were delivered to it
    # A fresh scheduler fed the journal fires the same events in the same order.
    scenario = worker.scenario
    replayed = replay(journal, lambda: Scheduler(start_ns=scenario.start_ns, sources=list(scenario.sources())))
    assert [f.event_id for f in replayed.fires] == [e.event_id for e in journal if not isinstance(e, InputRecord)]


def spec_start(journal: list[Any]) -> int:
    first = journal[0]
    return int(first.at_ns if isinstance(first, InputRecord) else first.fired_ns)


def test_registrations_round_trip_and_undurable_ones_are_refused() -> None:
    import pytest

    from sclated.errors import InvalidArgument
    from sclated.runs._journal_json import entry_to_json
    from sclated.scheduler import ExecInSandbox, Grade, Priority, Wake

    tick = EventSpec("own:t", At(5), (ExecInSandbox("tick", holder="cron", timeout_s=30.0),), Priority.LOW, {"j": [1]})
    rec = InputRecord(3, "register", 1, 2, ["own:t"], "", (tick,))
    back = entry_from_json(entry_to_json(rec))
    assert isinstance(back, InputRecord) and back.specs == (tick,)
    # A journal written before: wake-ups only, by waiter.
    old = {"t": "input", "seq": 1, "kind": "register", "at_ns": 0, "version": 1, "payload": ["w"], "source": "",
           "specs": [{"id": "w", "at_ns": 9, "waiter": "agent"}]}  # fmt: skip
    wake = entry_from_json(old)
    assert isinstance(wake, InputRecord) and wake.specs[0].effects == (Wake("agent"),)
    graded = InputRecord(4, "register", 1, 2, ["g"], "", (EventSpec("g", At(5), (Grade("c"),)),))
    with pytest.raises(InvalidArgument, match=r"'g'.*grade"):
        entry_to_json(graded)
