"""Capture: call records from the in-sandbox proxy, trajectories, trainer export.

The proxy side lives in ``proxy_addons/`` (it runs inside sandboxes and
imports nothing from here); this package is the daemon side. The call-record
schema is shared: ``proxy_addons.record`` declares it once, the addon builds
records with it and ``CallRecord`` reads and writes them through it.
"""

from sclated.capture._export import (
    ATIF_SCHEMA_VERSION,
    EXPORT_FORMATS,
    LEFT_OUT_REASONS,
    UNREWARDED_POLICIES,
    ExportReport,
    LeftOut,
    check_export_args,
    export,
    export_samples,
)
from sclated.capture._failures import FAILURE_CAUSES, failure_cause
from sclated.capture._groups import Grouping, GroupRow, export_group, group_rows
from sclated.capture._observer import NO_CAPTURE_OBSERVER, CaptureObserver
from sclated.capture._record import (
    API_KINDS,
    MAX_CONTROL_LINE_BYTES,
    SCHEMA_VERSION,
    CallRecord,
    Chunk,
    Completion,
    Timings,
)
from sclated.capture._rounds import DEFAULT_SLACK_NS, TurnSpan, call_rounds, resolve_round
from sclated.capture._sink import DEFAULT_CALL_TTL_NS, CaptureSink, LeaseHolder, MemoryRecordStore, RecordStore
from sclated.capture._trajectories import (
    BRANCH_REASONS,
    REWARD_MODES,
    LossMaskPolicy,
    RewardCredit,
    Sample,
    TokenNode,
    Trajectories,
    Verdict,
    attach_rewards,
    build_trajectories,
)

__all__ = [
    "API_KINDS",
    "ATIF_SCHEMA_VERSION",
    "BRANCH_REASONS",
    "DEFAULT_CALL_TTL_NS",
    "DEFAULT_SLACK_NS",
    "EXPORT_FORMATS",
    "FAILURE_CAUSES",
    "LEFT_OUT_REASONS",
    "MAX_CONTROL_LINE_BYTES",
    "NO_CAPTURE_OBSERVER",
    "REWARD_MODES",
    "SCHEMA_VERSION",
    "UNREWARDED_POLICIES",
    "CallRecord",
    "CaptureObserver",
    "CaptureSink",
    "Chunk",
    "Completion",
    "ExportReport",
    "GroupRow",
    "Grouping",
    "LeaseHolder",
    "LeftOut",
    "LossMaskPolicy",
    "MemoryRecordStore",
    "RecordStore",
    "RewardCredit",
    "Sample",
    "Timings",
    "TokenNode",
    "Trajectories",
    "TurnSpan",
    "Verdict",
    "attach_rewards",
    "build_trajectories",
    "call_rounds",
    "check_export_args",
    "export",
    "export_group",
    "export_samples",
    "failure_cause",
    "group_rows",
    "resolve_round",
]
