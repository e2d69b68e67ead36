"""The run's wall time split into the agent's own work and the substrate's overhead.

The split can fail both ways: a slow agent turn lands in agent_s, a slow
session start (the substrate's job) lands in overhead_s, and the kinds add up
to the wall time measured."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from adapters import InProcessAgent, TurnResult
from sclated.runs import RunWorker
from sclated.scheduler import DeliverPrompt
from tests.runs.doubles import NullSink, synthetic_with


class SlowPartsAgent(InProcessAgent):
    """Test double: turns and session starts take the wall time it is told to."""

    def __init__(self, turn_s: float, start_s: float) -> None:
        self._turn_s = turn_s
        self._start_s = start_s

    @property
    def name(self) -> str:
        return "slow-parts"

    async def start_session(self, session: str) -> None:
        await asyncio.sleep(self._start_s)

    async def stop_session(self) -> None:
        pass

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        received = time.monotonic_ns()
        await asyncio.sleep(self._turn_s)
        return TurnResult(reply="ok", started_ns=0, ended_ns=0, received_wall_ns=received)


async def _split(turn_s: float, start_s: float) -> dict[str, Any]:
    registry, spec = synthetic_with(
        "slow-parts", lambda options: SlowPartsAgent(turn_s, start_s), days=2, events_per_day=2
    )
    outcome = await RunWorker("local/split", spec, registry, NullSink()).run()
    assert outcome.state == "SUCCEEDED", outcome.reason
    s: dict[str, Any] = outcome.results["scheduler"]
    return s


async def test_slow_turns_are_the_agents_own_work() -> None:
    s = await _split(turn_s=0.2, start_s=0.0)
    # 2 days x (2 tasks + 1 review), each turn at least 0.2 s of the agent's time.
    assert s["agent_s"] >= 6 * 0.2
    assert s["overhead_fraction"] < 0.5
    assert s["compression_limit_agent"] == pytest.approx(s["sim_span_s"] / s["agent_s"])
    assert s["compression_limit_agent"] < s["compression_limit"] * 1.5


async def test_slow_session_control_is_the_substrates_overhead() -> None:
    s = await _split(turn_s=0.0, start_s=0.3)
    assert s["overhead_s"]["session_control"] >= 2 * 0.3
    assert s["overhead_fraction"] > 0.5
    # The old limit counts session control as busy; the agent's own limit does not.
    assert s["compression_limit_agent"] > 2 * s["compression_limit"]


async def test_the_kinds_add_up_to_the_wall_time() -> None:
    s = await _split(turn_s=0.05, start_s=0.05)
    total = s["agent_s"] + s["waiting_s"] + sum(s["overhead_s"].values())
    assert total == pytest.approx(s["run_wall_s"], rel=1e-6)
    assert s["run_wall_s"] >= s["wall_s"]
