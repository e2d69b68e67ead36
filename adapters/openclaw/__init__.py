"""OpenClaw (npm ``openclaw``), unmodified, as a sclate harness.

:class:`OpenClawHarness` declares it on the harness contract (``DECLARATION``);
``bridge.py`` runs inside its sandbox (image ``sclate-openclaw``, see
``image.py``); :func:`tick_events` turns OpenClaw's own schedule (cron jobs,
heartbeat) into scheduler events.
"""

from adapters.openclaw._harness import BRIDGE, DECLARATION, GATEWAY_PORT, OpenClawHarness, tick_events

__all__ = ["BRIDGE", "DECLARATION", "GATEWAY_PORT", "OpenClawHarness", "tick_events"]
