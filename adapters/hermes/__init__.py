"""Hermes Agent (PyPI ``hermes-agent``), unmodified, as a sclate harness.

:class:`HermesHarness` declares it on the harness contract (``DECLARATION``);
``bridge.py`` runs inside its sandbox (image ``sclate-hermes``, see
``image.py``); :func:`cron_events` turns Hermes's own cron schedule into
scheduler events.
"""

from adapters.hermes._harness import BRIDGE, DECLARATION, HOME, HermesHarness, cron_events

__all__ = ["BRIDGE", "DECLARATION", "HOME", "HermesHarness", "cron_events"]
