"""The open event scheduler: sources, triggers, effects, snapshots, the journal."""

from sclated.scheduler._effects import (
    AgentControl,
    DeliverPrompt,
    Effect,
    ExecInSandbox,
    Grade,
    MutateWorld,
    Notify,
    SaveSnapshot,
    StopRun,
    Wake,
    WorldEvent,
)
from sclated.scheduler._events import After, At, EventSource, EventSpec, Priority, Trigger, When
from sclated.scheduler._journal import FireRecord, InputRecord, JournalEntry
from sclated.scheduler._scheduler import PendingEvent, ReplayDivergence, Scheduler, replay
from sclated.scheduler._snapshot import AgentAction, Snapshot

__all__ = [
    "After",
    "AgentAction",
    "AgentControl",
    "At",
    "DeliverPrompt",
    "Effect",
    "EventSource",
    "EventSpec",
    "ExecInSandbox",
    "FireRecord",
    "Grade",
    "InputRecord",
    "JournalEntry",
    "MutateWorld",
    "Notify",
    "PendingEvent",
    "Priority",
    "ReplayDivergence",
    "SaveSnapshot",
    "Scheduler",
    "Snapshot",
    "StopRun",
    "Trigger",
    "Wake",
    "When",
    "WorldEvent",
    "replay",
]
