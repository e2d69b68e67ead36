"""A run's sandbox, wired: container, model bridge, control socket, capture, time.

Nothing here is harness-specific: harnesses declare themselves
(``adapters.HarnessDeclaration``) and get a :class:`SandboxSession` through the
``adapters.SandboxAccess`` view. See docs/architecture.md.
"""

from sclated.sandbox._control import ControlLimits, ControlServer, Handler
from sclated.sandbox._disk_watch import DiskUsage, DiskVerdict, DiskWatchdog, SandboxDiskMeter
from sclated.sandbox._isolation import CHECKS, IsolationResult, judge_attempts, run_isolation, run_isolation_checks
from sclated.sandbox._observer import NO_SANDBOX_OBSERVER, SandboxObserver
from sclated.sandbox._process_probe import ProcessProbe
from sclated.sandbox._proxy import PROXY_LOG, ROLE_PORTS, SPOOL_DIR, endpoints_for, mitmdump_command
from sclated.sandbox._session import (
    CallStore,
    ModelService,
    SandboxOptions,
    SandboxServices,
    SandboxSession,
    SessionConfig,
    SessionStart,
    short_sockets_dir,
)

__all__ = [
    "CHECKS",
    "NO_SANDBOX_OBSERVER",
    "PROXY_LOG",
    "ROLE_PORTS",
    "SPOOL_DIR",
    "CallStore",
    "ControlLimits",
    "ControlServer",
    "DiskUsage",
    "DiskVerdict",
    "DiskWatchdog",
    "Handler",
    "IsolationResult",
    "ModelService",
    "ProcessProbe",
    "SandboxDiskMeter",
    "SandboxObserver",
    "SandboxOptions",
    "SandboxServices",
    "SandboxSession",
    "SessionConfig",
    "SessionStart",
    "endpoints_for",
    "judge_attempts",
    "mitmdump_command",
    "run_isolation",
    "run_isolation_checks",
    "short_sockets_dir",
]
