"""`pip install ./clients/python` is the client alone, and it talks to a daemon.

A fresh virtual environment (no system site-packages) gets the client
distribution from the tree, with the project's constraints (the same versions
as the .venv) and pip's configured index; it must hold grpcio and protobuf
and none of the daemon's dependencies, must not be able to import the
daemon, and its `sclate` must list benchmarks and run a synthetic run to the
end against a real `sclated` started from the project's .venv.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sclated.bench import start_daemon_process

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
NOT_IN_THE_CLIENT = ("mitmproxy", "aiodocker", "matplotlib", "aiohttp", "uvloop", "llama-cpp-python", "grpcio-tools")


def _env() -> dict[str, str]:
    # Nothing of the project's environment leaks in: no PYTHONPATH, no active venv.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    venv = tmp_path_factory.mktemp("client") / "venv"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=_env(), timeout=120)
    install = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "-c",
            str(ROOT / "constraints.txt"),
            str(ROOT / "clients" / "python"),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=venv.parent,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr
    print(f"client venv made and installed in {time.monotonic() - started:.1f} s")
    yield venv


def _installed(venv: Path) -> dict[str, str]:
    res = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
        timeout=120,
    )
    return {re.sub(r"[-_.]+", "-", p["name"]).lower(): p["version"] for p in json.loads(res.stdout)}


def test_the_client_installs_alone_and_cannot_import_the_daemon(client_venv: Path) -> None:
    installed = _installed(client_venv)
    assert {"sclate", "grpcio", "protobuf"} <= set(installed), installed
    assert not [name for name in NOT_IN_THE_CLIENT if name in installed], installed
    assert "sclated" not in installed
    for module in ("sclated", "adapters", "proxy_addons"):
        res = subprocess.run(
            [str(client_venv / "bin" / "python"), "-c", f"import {module}"],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=client_venv,  # not the repository: '' on sys.path must not find it
            timeout=60,
        )
        assert res.returncode == 1 and f"No module named '{module}'" in res.stderr, res.stderr


async def test_the_installed_client_talks_to_a_daemon(client_venv: Path, tmp_path: Path) -> None:
    proc, ready = await start_daemon_process(tmp_path / "state")
    sclate = str(client_venv / "bin" / "sclate")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sclate, "--endpoint", ready["tcp"], *args],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=tmp_path,
            timeout=120,
        )

    try:
        listed = run("benchmarks", "list", "-o", "json")
        assert listed.returncode == 0, listed.stderr
        names = {b["name"] for b in json.loads(listed.stdout)["benchmarks"]}
        assert "synthetic" in names

        created = run(
            "runs",
            "create",
            "--benchmark",
            "synthetic",
            "--benchmark-option",
            "days=2",
            "--harness",
            "scripted",
            "--wait",
            "-o",
            "json",
        )
        assert created.returncode == 0, created.stderr
        out: dict[str, Any] = json.loads(created.stdout)
        assert out["state"] == "SUCCEEDED" and out["benchmark"]["name"] == "synthetic"
        results = out["results"]
        assert results["score"] == 1.0 and results["rounds_graded"] == 2
        assert results["scheduler"]["events_fired"] == results["scheduler"]["events_scheduled"] > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
