"""Suite-wide policy: no silent skips on CI, no test that hangs forever.

A skipped test proves nothing. Locally a skip with a written reason is
reported (``make test`` runs pytest with ``-rs``). On CI (``SCLATE_CI=1``,
set by ``.ci/run``) every prerequisite is installed by ``make test`` itself,
so a skip is allowed only when its reason is listed in ``CI_ALLOWED_SKIPS``
(things no machine of this kind can provide); any other skip, and any skip
without a reason, fails the run.
"""

from __future__ import annotations

import os

# Before anything imports grpc: tests start daemons from a process whose gRPC threads are
# busy, and gRPC's fork handlers can then kill the child before it execs (see
# sclated.__main__.without_grpc_fork_handlers).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import pytest

CI_ALLOWED_SKIPS: tuple[str, ...] = ("the portable target is x86-64",)
"""Reasons (prefixes) that may skip on CI: none of them applies to the CI machines."""

_GENERIC = {"", "unconditional skip", "skipped", "skip"}
_skips: list[tuple[str, str]] = []


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ").strip()
    return str(longrepr or "").strip()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skips.append((report.nodeid, _reason(report)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    on_ci = os.environ.get("SCLATE_CI") == "1"
    bad = [
        (node, reason)
        for node, reason in _skips
        if reason.lower() in _GENERIC or (on_ci and not reason.startswith(CI_ALLOWED_SKIPS))
    ]
    if not bad:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    where = "on CI " if on_ci else ""
    lines = [f"{len(bad)} test(s) skipped {where}without an accepted written reason:"]
    lines += [f"  {node}: {reason or '(no reason given)'}" for node, reason in bad]
    if reporter is not None:
        reporter.write_sep("=", "skips that fail the run", red=True)
        for line in lines:
            reporter.write_line(line)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
