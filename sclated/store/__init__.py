"""Durable state: SQLite in WAL mode, on a thread of its own."""

from sclated.store._store import EventRow, ExpiredHistory, JournalRow, RunRow, SpaceReclaimed, Store, WriteBatch

__all__ = ["EventRow", "ExpiredHistory", "JournalRow", "RunRow", "SpaceReclaimed", "Store", "WriteBatch"]
