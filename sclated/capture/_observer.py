"""What the capture sink tells whoever watches it (the daemon's metrics), and a default that ignores it."""

from __future__ import annotations

from typing import Protocol

from sclated.capture._record import CallRecord

__all__ = ["NO_CAPTURE_OBSERVER", "CaptureObserver"]


class CaptureObserver(Protocol):
    def on_call_captured(self, record: CallRecord) -> None:
        """A model call's record was stored for the first time (a redelivery of the same
        call id is not told again). Called on the event loop: keep it cheap."""
        ...


class _NoCaptureObserver:
    def on_call_captured(self, record: CallRecord) -> None:
        pass


NO_CAPTURE_OBSERVER: CaptureObserver = _NoCaptureObserver()
