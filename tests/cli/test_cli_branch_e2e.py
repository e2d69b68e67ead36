"""`sclate runs branch` / `runs watch --group` / `runs list --filter group=` from the real
CLI against a real `sclated` process (scripted agent, no Docker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sclated.bench import start_daemon_process

pytestmark = pytest.mark.e2e
SCLATE = str(Path(sys.executable).with_name("sclate"))


async def test_branch_a_group_watch_it_and_list_it(tmp_path: Path) -> None:
    proc, ready = await start_daemon_process(tmp_path)
    env = {**os.environ, "SCLATE_ENDPOINT": ready["tcp"]}

    def sclate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SCLATE, *args], capture_output=True, text=True, env=env, timeout=120)

    def json_of(*args: str) -> Any:
        out = sclate(*args, "-o", "json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    try:
        created = sclate(
            "runs", "create", "--benchmark", "synthetic", "--benchmark-option", "days=3",
            "--harness", "scripted", "--agent-option", "turn_ms=300", "--run-id", "src",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        deadline = time.monotonic() + 60
        snap = sclate("runs", "snapshot", "src", "--id", "mid")
        while snap.returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
            snap = sclate("runs", "snapshot", "src", "--id", "mid")
        assert snap.returncode == 0, snap.stderr
        branched = json_of("runs", "branch", "src/snapshots/mid", "--count", "2", "--group", "g1", "--label", "k=v")
        assert branched["group"] == "g1"
        assert [r["name"] for r in branched["runs"]] == ["runs/g1-0", "runs/g1-1"]
        watched = sclate("runs", "watch", "--group", "g1", "-o", "json")
        assert watched.returncode == 0, watched.stderr
        events = [json.loads(line) for line in watched.stdout.splitlines()]
        assert {e["run"] for e in events} == {"runs/g1-0", "runs/g1-1"}
        finals = [e for e in events if e.get("state", {}).get("state") in ("SUCCEEDED", "FAILED")]
        assert len(finals) == 2 and all(e["state"]["state"] == "SUCCEEDED" for e in finals), finals
        listed = json_of("runs", "list", "--filter", "group=g1")
        runs = listed["runs"] if isinstance(listed, dict) else listed
        assert sorted(r["name"] for r in runs) == ["runs/g1-0", "runs/g1-1"]
        assert all(r["group"] == "g1" and r["labels"]["k"] == "v" for r in runs)
        bad = sclate("runs", "watch")
        assert bad.returncode != 0 and "--group" in bad.stderr
    finally:
        proc.terminate()
        proc_wait = proc.wait()
        await proc_wait
