"""What the API's interceptor tells whoever watches it (the daemon's metrics), and a default that ignores it."""

from __future__ import annotations

from typing import Protocol

__all__ = ["NO_API_OBSERVER", "ApiObserver"]


class ApiObserver(Protocol):
    def on_request(self, method: str, code: str) -> None:
        """A call of ``method`` (``CreateRun``) ended with the gRPC status ``code`` (``OK``,
        ``NOT_FOUND``, ..., ``CANCELLED`` when the client went away)."""
        ...

    def on_stream(self, method: str, opened: int) -> None:
        """A server stream (``WatchRun``, ``WatchGroup``, ``StreamTrajectories``) opened
        (``opened`` 1) or ended (-1)."""
        ...


class _NoApiObserver:
    def on_request(self, method: str, code: str) -> None:
        pass

    def on_stream(self, method: str, opened: int) -> None:
        pass


NO_API_OBSERVER: ApiObserver = _NoApiObserver()
