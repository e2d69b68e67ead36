"""A benchmark day that starts from a recorded session and a fresh workspace:
the worker empties the workspace, seeds it, hands the session over, then starts
the session, in that order, for an agent that declares it can."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapters import Capability, InProcessAgent, SeededSessions, SessionSeed, TurnResult, Workspace
from adapters.metaclaw import MetaClawBenchmark
from sclated.runs import RunWorker
from sclated.runs._registry import AgentEntry, Registry
from sclated.runs._spec import RunSpec
from sclated.scheduler import DeliverPrompt
from tests.runs.test_agent_schedule import JournalSink


class SeedTaking(InProcessAgent):
    """Test double of a harness that takes seeded sessions (OpenClaw's shape) and has a
    workspace: it logs what the worker asks of it, in order, and answers every prompt."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    @property
    def name(self) -> str:
        return "seed-taking"

    @property
    def capabilities(self) -> frozenset[Capability]:
        return frozenset({Capability.WORKSPACE, Capability.SEEDED_SESSIONS})

    @property
    def workspace(self) -> Workspace:
        return self

    @property
    def sessions(self) -> SeededSessions:
        return self

    async def exec(self, command: str, *, timeout_s: float = 120.0) -> tuple[int, str]:
        return 0, ""

    async def seed(self, src: Path, dest: str) -> None:
        self.log.append(("seed", sorted(p.name for p in src.iterdir())))

    async def clear(self) -> None:
        self.log.append(("clear", None))

    async def export(self, src: str, dest: Path) -> None:
        self.log.append(("export", src))

    async def seed_session(self, seed: SessionSeed) -> None:
        self.log.append(("seed_session", seed))

    async def start_session(self, session: str) -> None:
        self.log.append(("start", session))

    async def stop_session(self) -> None:
        self.log.append(("stop", None))

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        self.log.append(("deliver", prompt.session))
        return TurnResult(reply=r"\bbox{A}", started_ns=0, ended_ns=0, received_wall_ns=0)


def _registry(agent: SeedTaking) -> Registry:
    registry = Registry()
    registry.add_benchmark(MetaClawBenchmark())
    caps = tuple(sorted(c.value for c in agent.capabilities))

    def factory(options: Mapping[str, Any], memory: str) -> SeedTaking:
        return agent

    registry.add_agent(AgentEntry(agent.name, "test double", sandboxed=False, factory=factory, capabilities=caps))
    return registry


async def test_each_day_clears_seeds_then_hands_its_session_over(tmp_path: Path) -> None:
    agent = SeedTaking()
    spec = RunSpec.from_dict(
        {
            "benchmark": {"name": "metaclaw", "scenario": "tiny", "subset": ["day01", "day02"]},
            "agent": {"harness": agent.name},
        }
    )
    worker = RunWorker("local/seeded", spec, _registry(agent), JournalSink(), run_dir=tmp_path)
    outcome = await worker.run()
    assert outcome.state == "SUCCEEDED", outcome.reason
    starts = [i for i, (what, _) in enumerate(agent.log) if what == "start"]
    assert len(starts) == 2
    days = worker.scenario.days  # type: ignore[attr-defined]
    for start, day in zip(starts, days, strict=True):
        # Chosen by the benchmark because the agent declares seeded sessions: upstream's protocol.
        clear, seed, handed = agent.log[start - 3 : start]
        assert clear == ("clear", None)
        assert seed[0] == "seed" and day.day in seed[1] and "AGENTS.md" in seed[1]
        assert not [n for n in seed[1] if n.startswith("day") and n != day.day]
        assert handed[0] == "seed_session"
        assert handed[1].session_id == day.session and handed[1].agent == "tiny_agent"
        assert handed[1].transcript is not None and handed[1].transcript.name == f"{day.session}.jsonl"
    # Every prompt went to the day's seeded session; none was a replayed opening.
    assert {s for what, s in agent.log if what == "deliver"} == {d.session for d in days}
    assert sum(1 for what, _ in agent.log if what == "deliver") == 2 * 3  # two rounds + feedback per day


async def test_an_agent_without_seeded_sessions_keeps_the_continual_protocol(tmp_path: Path) -> None:
    agent = SeedTaking()
    registry = _registry(agent)
    registry.agents[agent.name] = AgentEntry(
        agent.name, "test double", sandboxed=False, factory=lambda o, m: agent, capabilities=("workspace",)
    )
    spec = RunSpec.from_dict(
        {"benchmark": {"name": "metaclaw", "scenario": "tiny", "subset": ["day01"]}, "agent": {"harness": agent.name}}
    )
    worker = RunWorker("local/continual", spec, registry, JournalSink(), run_dir=tmp_path)
    outcome = await worker.run()
    assert outcome.state == "SUCCEEDED", outcome.reason
    assert not [what for what, _ in agent.log if what in ("clear", "seed_session")]
