"""A run's sandbox, wired: container, model bridge, control socket, capture, time.

Nothing here is harness-specific: harnesses declare themselves
(``adapters.HarnessDeclaration``) and get a :class:`SandboxSession` through the
``adapters.SandboxAccess`` view. See docs/architecture.md.
"""

from sclated.sandbox._control import ControlLimits, ControlServer, Handler
from sclated.sandbox._process_probe import ProcessProbe
from sclated.sandbox._proxy import PROXY_LOG, ROLE_PORTS, SPOOL_DIR, endpoints_for, mitmdump_command
from sclated.sandbox._session import (
    SandboxOptions,
    SandboxServices,
    SandboxSession,
    SessionConfig,
    SessionStart,
    short_sockets_dir,
)

__all__ = [
    "PROXY_LOG",
    "ROLE_PORTS",
    "SPOOL_DIR",
    "ControlLimits",
    "ControlServer",
    "Handler",
    "ProcessProbe",
    "SandboxOptions",
    "SandboxServices",
    "SandboxSession",
    "SessionConfig",
    "SessionStart",
    "endpoints_for",
    "mitmdump_command",
    "short_sockets_dir",
]
