"""Runs: a scheduler and a clock driven together, effects handed to executors,
many runs managed durably in one daemon."""

from sclated.runs._loop import EffectExecutor, RunLoop, RunObserver, RunSummary
from sclated.runs._manager import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    ManagerConfig,
    RunManager,
    RunView,
    parse_run_name,
)
from sclated.runs._registry import AgentEntry, Registry, default_registry
from sclated.runs._spec import AgentRef, BenchmarkRef, ClockRef, ModelRef, Resources, RunSpec
from sclated.runs._worker import RunOutcome, RunSink, RunWorker, load_scenario

__all__ = [
    "ACTIVE_STATES",
    "TERMINAL_STATES",
    "AgentEntry",
    "AgentRef",
    "BenchmarkRef",
    "ClockRef",
    "EffectExecutor",
    "ManagerConfig",
    "ModelRef",
    "Registry",
    "Resources",
    "RunLoop",
    "RunManager",
    "RunObserver",
    "RunOutcome",
    "RunSink",
    "RunSpec",
    "RunSummary",
    "RunView",
    "RunWorker",
    "default_registry",
    "load_scenario",
    "parse_run_name",
]
