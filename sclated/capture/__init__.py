"""Capture: call records from the in-sandbox proxy, trajectories, trainer export.

The proxy side lives in ``proxy_addons/`` (it runs inside sandboxes and
imports nothing from here); this package is the daemon side. The call-record
schema is shared: ``proxy_addons.record`` declares it once, the addon builds
records with it and ``CallRecord`` reads and writes them through it.
"""

from sclated.capture._export import ATIF_SCHEMA_VERSION, EXPORT_FORMATS, export
from sclated.capture._failures import FAILURE_CAUSES, failure_cause
from sclated.capture._record import (
    API_KINDS,
    SCHEMA_VERSION,
    CallRecord,
    Chunk,
    Completion,
    Timings,
)
from sclated.capture._sink import CaptureSink, LeaseHolder, MemoryRecordStore, RecordStore
from sclated.capture._trajectories import (
    BRANCH_REASONS,
    LossMaskPolicy,
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
    "EXPORT_FORMATS",
    "FAILURE_CAUSES",
    "SCHEMA_VERSION",
    "CallRecord",
    "CaptureSink",
    "Chunk",
    "Completion",
    "LeaseHolder",
    "LossMaskPolicy",
    "MemoryRecordStore",
    "RecordStore",
    "Sample",
    "Timings",
    "TokenNode",
    "Trajectories",
    "Verdict",
    "attach_rewards",
    "build_trajectories",
    "export",
    "failure_cause",
]
