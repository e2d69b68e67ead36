"""What sandbox sessions tell whoever watches them (the daemon's metrics), and a default that ignores it."""

from __future__ import annotations

from typing import Protocol

__all__ = ["NO_SANDBOX_OBSERVER", "SandboxObserver"]


class SandboxObserver(Protocol):
    def on_sandbox_start(self, mode: str, outcome: str, seconds: float) -> None:
        """A sandbox session's start ended: ``mode`` how it started (``fresh``, ``adopt``,
        ``restore``), ``outcome`` ``started``, ``failed`` or ``cancelled``, after ``seconds``
        of wall time (the container, the bridge, the control socket and the proxy ready)."""
        ...


class _NoSandboxObserver:
    def on_sandbox_start(self, mode: str, outcome: str, seconds: float) -> None:
        pass


NO_SANDBOX_OBSERVER: SandboxObserver = _NoSandboxObserver()
