"""What the store tells whoever watches it (the daemon's metrics), and a default that ignores it.

The calls come from the store's own thread, right after a commit: an observer must be
cheap and thread-safe, and must never call back into the store."""

from __future__ import annotations

from typing import Protocol

__all__ = ["NO_STORE_OBSERVER", "StoreObserver"]


class StoreObserver(Protocol):
    def on_commit(self, records: int, seconds: float) -> None:
        """A transaction committed ``records`` rows (a flush: its events, journal entries,
        inserts and run updates) in ``seconds`` (BEGIN to COMMIT)."""
        ...

    def on_db_size(self, file_bytes: int) -> None:
        """The database's files (main, WAL, shared memory) hold ``file_bytes`` now."""
        ...


class _NoStoreObserver:
    def on_commit(self, records: int, seconds: float) -> None:
        pass

    def on_db_size(self, file_bytes: int) -> None:
        pass


NO_STORE_OBSERVER: StoreObserver = _NoStoreObserver()
