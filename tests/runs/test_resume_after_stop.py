"""A run whose scenario had told it to stop when its daemon died ends, once resumed, for
the scenario's reason (found by `sclated bench faults`: a daemon SIGKILLed between a
StopRun's fire and the run's end left a run that, resumed, ended "idle: nothing scheduled
and nothing busy")."""

from __future__ import annotations

from typing import Any

from sclated.runs import RunSpec, RunWorker, default_registry
from tests.runs.doubles import NullSink


class JournalSink(NullSink):
    """Test double: keeps the journal, as the store would."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def journal(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)


SPEC = RunSpec.from_dict(
    {
        "benchmark": {"name": "synthetic", "options": {"days": 1, "events_per_day": 2}},
        "agent": {"harness": "scripted", "options": {"turn_ms": 1}},
    }
)


async def test_a_run_resumed_after_its_stop_fired_ends_for_the_scenario_s_reason() -> None:
    registry = default_registry()
    sink = JournalSink()
    first = await RunWorker("local/stopped", SPEC, registry, sink).run()
    assert first.state == "SUCCEEDED" and first.reason == "all days done", first.reason
    assert sink.entries[-1]["t"] == "fire" and sink.entries[-1]["effects"] == ["stop_run"]
    # The daemon died right after the StopRun's fire was journaled: the run resumes.
    again = await RunWorker("local/stopped", SPEC, registry, NullSink(), journal=sink.entries).run()
    assert again.state == "SUCCEEDED" and again.reason == "all days done", again.reason
    assert again.results["rounds_graded"] == 1
