"""Durable state: SQLite in WAL mode, on a thread of its own."""

from sclated.store._store import EventRow, JournalRow, RunRow, Store, WriteBatch

__all__ = ["EventRow", "JournalRow", "RunRow", "Store", "WriteBatch"]
