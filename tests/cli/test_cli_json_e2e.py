"""`sclate runs ... -o json` from the real CLI against a real `sclated` process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sclated.bench import start_daemon_process

pytestmark = pytest.mark.e2e
SCLATE = str(Path(sys.executable).with_name("sclate"))


async def test_runs_get_json_has_every_field_with_numbers_as_numbers(tmp_path: Path) -> None:
    proc, ready = await start_daemon_process(tmp_path)
    env = {**os.environ, "SCLATE_ENDPOINT": ready["tcp"]}

    def sclate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SCLATE, *args], capture_output=True, text=True, env=env, timeout=120)

    def create(run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return sclate(
            "runs",
            "create",
            "--benchmark",
            "synthetic",
            "--benchmark-option",
            "days=2",
            "--harness",
            "scripted",
            "--run-id",
            run_id,
            *extra,
            "--wait",
            "-o",
            "json",
        )

    def get(run_id: str) -> dict[str, Any]:
        got = sclate("runs", "get", run_id, "-o", "json")
        assert got.returncode == 0, got.stderr
        out: dict[str, Any] = json.loads(got.stdout)
        return out

    try:
        ok, half, none = await asyncio.gather(
            asyncio.to_thread(create, "ok"),
            # The scripted agent fails on a day's first task: that day is never graded.
            asyncio.to_thread(create, "half", "--agent-option", "fail_on_round=d1.task0"),
            asyncio.to_thread(create, "none", "--agent-option", "fail_on_round=d0.task0"),
        )
        assert ok.returncode == 0, ok.stderr
        assert half.returncode == 1 and none.returncode == 1

        run = await asyncio.to_thread(get, "ok")
        assert run["state"] == "SUCCEEDED"
        assert type(run["last_event_seq"]) is int and run["last_event_seq"] > 0
        assert run["parent"] == "" and run["labels"] == {} and run["clock"]["start_time"] is None
        assert run["create_time"].endswith("Z") and run["benchmark"]["options"] == {"days": 2}
        results = run["results"]
        assert results["score"] == 1.0 and type(results["score"]) is float
        assert results["rounds"] == 2 and results["rounds_graded"] == 2
        sched = results["scheduler"]
        for key in ("events_scheduled", "events_fired", "jumps"):
            assert type(sched[key]) is int, (key, sched[key])
        assert sched["events_fired"] == sched["events_scheduled"] > 0
        assert sched["unfired"] == [] and sched["in_order"] is True
        assert [(r["round_id"], r["graded"], r["score"]) for r in results["round_scores"]] == [
            ("d0", True, 1.0),
            ("d1", True, 1.0),
        ]
        assert results["calls"] == []  # the scripted agent calls no model

        # An ungraded round and a run with no graded round keep their keys, as null.
        half_results = (await asyncio.to_thread(get, "half"))["results"]
        assert [(r["round_id"], r["graded"], r["score"]) for r in half_results["round_scores"]] == [
            ("d0", True, 1.0),
            ("d1", False, None),
        ]
        assert half_results["score"] == 1.0 and half_results["rounds_graded"] == 1
        assert half_results["scheduler"]["unfired"]  # the failed day's grading never fired
        none_results = (await asyncio.to_thread(get, "none"))["results"]
        assert "score" in none_results and none_results["score"] is None
        assert none_results["rounds_graded"] == 0
        assert all("score" in r and r["score"] is None for r in none_results["round_scores"])

        # The other JSON outputs go through the same converter.
        listed = await asyncio.to_thread(sclate, "runs", "list", "-o", "json")
        scores = {r["name"]: r["results"]["score"] for r in json.loads(listed.stdout)["runs"]}
        assert scores == {"runs/ok": 1.0, "runs/half": 1.0, "runs/none": None}
        watched = await asyncio.to_thread(sclate, "runs", "watch", "ok", "-o", "json")
        events = [json.loads(line) for line in watched.stdout.splitlines()]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        verdicts = [e["verdict"] for e in events if "verdict" in e]
        assert [(v["round_id"], v["score"]) for v in verdicts] == [("d0", 1.0), ("d1", 1.0)]
        table = await asyncio.to_thread(sclate, "runs", "get", "none")
        assert table.returncode == 0 and "ungraded (0/2 rounds graded)" in table.stdout
        # The table shows the checked deliveries and where the wall time went.
        ok_table = (await asyncio.to_thread(sclate, "runs", "get", "ok")).stdout
        assert "out of order" in ok_table and "overhead" in ok_table, ok_table

        # Each harness with its version, the APIs it speaks and its capabilities.
        agents = json.loads((await asyncio.to_thread(sclate, "agents", "list", "-o", "json")).stdout)["agents"]
        reference = next(a for a in agents if a["name"] == "reference")
        assert reference["wire_apis"] == ["openai_chat"] and "workspace" in reference["capabilities"]
        assert reference["version"] and reference["image"] == "sclate-reference-agent"
        hermes = next(a for a in agents if a["name"] == "hermes")
        assert hermes["version"] == "0.19.0" and hermes["image"] == "sclate-hermes" and "jobs" in hermes["capabilities"]
        listing = (await asyncio.to_thread(sclate, "agents", "list")).stdout
        assert "speaks: openai_chat" in listing and "capabilities: consolidate, file_snapshots" in listing, listing
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
