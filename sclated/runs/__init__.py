"""Runs: a scheduler and a clock driven together, effects handed to executors,
many runs managed durably in one daemon."""

from sclated.runs._data_roots import DataRoots
from sclated.runs._executor import (
    AdmittedRun,
    Execution,
    Executor,
    LocalExecutor,
    RecordSink,
    RemoteCapture,
    RemoteSnapshot,
)
from sclated.runs._judge import JUDGE_MAX_TOKENS, JudgeConfig, ask_judge
from sclated.runs._loop import EffectExecutor, RunLoop, RunObserver, RunSummary, Turn
from sclated.runs._manager import (
    ACTIVE_STATES,
    STATES,
    TERMINAL_STATES,
    ManagerConfig,
    RunManager,
    RunView,
    parse_run_name,
)
from sclated.runs._observe import NO_RUNS_OBSERVER, RunsObserver, StateCounts
from sclated.runs._registry import AgentEntry, Registry, default_registry
from sclated.runs._retention import HistoryExpiry, Retention, SweepReport, format_duration, parse_duration
from sclated.runs._snapshots import RestorePlan, SnapshotView
from sclated.runs._spec import (
    AgentRef,
    BenchmarkRef,
    ClockRef,
    ModelRef,
    Resources,
    RunSpec,
    validate_run_id,
    validate_tenant,
)
from sclated.runs._worker import RunOutcome, RunSink, RunWorker, load_scenario, replay_stored

__all__ = [
    "ACTIVE_STATES",
    "JUDGE_MAX_TOKENS",
    "NO_RUNS_OBSERVER",
    "STATES",
    "TERMINAL_STATES",
    "AdmittedRun",
    "AgentEntry",
    "AgentRef",
    "BenchmarkRef",
    "ClockRef",
    "DataRoots",
    "EffectExecutor",
    "Execution",
    "Executor",
    "HistoryExpiry",
    "JudgeConfig",
    "LocalExecutor",
    "ManagerConfig",
    "ModelRef",
    "RecordSink",
    "Registry",
    "RemoteCapture",
    "RemoteSnapshot",
    "Resources",
    "RestorePlan",
    "Retention",
    "RunLoop",
    "RunManager",
    "RunObserver",
    "RunOutcome",
    "RunSink",
    "RunSpec",
    "RunSummary",
    "RunView",
    "RunWorker",
    "RunsObserver",
    "SnapshotView",
    "StateCounts",
    "SweepReport",
    "Turn",
    "ask_judge",
    "default_registry",
    "format_duration",
    "load_scenario",
    "parse_duration",
    "parse_run_name",
    "replay_stored",
    "validate_run_id",
    "validate_tenant",
]
