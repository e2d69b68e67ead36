"""Gaia2 (Meta's Agents Research Environments): ARE's scenarios, apps, events and
validation, run on sclate's scheduler with ARE used as a library in its own process."""

from adapters.gaia2._files import ScenarioFile, check_scenario_file
from adapters.gaia2._scenario import ARE_SCENARIOS, Gaia2Benchmark, Gaia2Scenario, Gaia2World, event_specs
from adapters.gaia2._world import ARE_PYTHON_ENV, WorldProcess, are_python

__all__ = [
    "ARE_PYTHON_ENV",
    "ARE_SCENARIOS",
    "Gaia2Benchmark",
    "Gaia2Scenario",
    "Gaia2World",
    "ScenarioFile",
    "WorldProcess",
    "are_python",
    "check_scenario_file",
    "event_specs",
]
