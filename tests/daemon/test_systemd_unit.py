"""The shipped systemd unit is valid and asks for what the daemon implements."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "sclated.service"


def _unit() -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read(UNIT)
    return cp


def test_unit_declares_notify_watchdog_and_directories() -> None:
    svc = _unit()["Service"]
    assert svc["Type"] == "notify"
    assert int(svc["WatchdogSec"]) > 0
    assert svc["StateDirectory"] == "sclated" and svc["RuntimeDirectory"] == "sclated"
    assert svc["Restart"] == "on-failure"
    assert svc["NoNewPrivileges"] == "yes" and svc["ProtectSystem"] == "strict"


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
def test_unit_verifies(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("sclated")
    unit = tmp_path / "sclated.service"
    unit.write_text(UNIT.read_text().replace("/opt/sclate/.venv/bin/sclated", str(exe)))
    out = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "sclated.service" not in out.stderr, out.stderr
