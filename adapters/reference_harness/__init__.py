"""The project's reference harness (``agent.py``) and its sclate adapter.

``agent.py`` runs inside the sandbox (stdlib only, /opt/agent/agent.py in the
``reference-agent`` image); :class:`ReferenceHarness` declares it on the harness
contract (``DECLARATION``); :class:`ReferenceHarnessAdapter` drives its
``serve`` mode over any :class:`LineTransport`; :class:`HarnessCronSource`
turns its ``crontab`` into scheduler events.
"""

from adapters.reference_harness._adapter import (
    AGENT_PY,
    CRONTAB,
    CronLine,
    HarnessCronSource,
    LineTransport,
    NextFire,
    ReferenceHarnessAdapter,
    SubprocessTransport,
    parse_crontab,
)
from adapters.reference_harness._harness import DECLARATION, ReferenceHarness

__all__ = [
    "AGENT_PY",
    "CRONTAB",
    "DECLARATION",
    "CronLine",
    "HarnessCronSource",
    "LineTransport",
    "NextFire",
    "ReferenceHarness",
    "ReferenceHarnessAdapter",
    "SubprocessTransport",
    "parse_crontab",
]
