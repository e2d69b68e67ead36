"""Durable state: SQLite in WAL mode, on a thread of its own."""

from sclated.store._observer import NO_STORE_OBSERVER, StoreObserver
from sclated.store._store import EventRow, ExpiredHistory, JournalRow, RunRow, SpaceReclaimed, Store, WriteBatch

__all__ = [
    "NO_STORE_OBSERVER",
    "EventRow",
    "ExpiredHistory",
    "JournalRow",
    "RunRow",
    "SpaceReclaimed",
    "Store",
    "StoreObserver",
    "WriteBatch",
]
