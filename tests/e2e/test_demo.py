"""`sclated demo` tells the truth: a broken model stops it at the start with what to do,
and a run without tokens or trajectories is a failure, not a report."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench import start_daemon_process
from sclated.e2e import VIEWER_PORT, demo_problems, serve_again_command, serve_viewer
from tests.api.conftest import synthetic_request

pytestmark = pytest.mark.e2e


def test_a_demo_whose_model_is_broken_exits_non_zero_saying_what_to_do(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    res = subprocess.run(
        [str(Path(sys.executable).with_name("sclated")), "demo", "--model-url", dead, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 1, res.stderr
    assert f"sclated demo failed: the model does not work: {dead}" in res.stderr
    assert "What to do:" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "state").exists()  # nothing was started


def _run(**kw: Any) -> dict[str, Any]:
    run: dict[str, Any] = {
        "state": "SUCCEEDED",
        "results": {"capture": {"calls": 11, "prompt_tokens": 900, "completion_tokens": 80}},
        "export_rows": {"skyrl": 9, "atif": 1},
    }
    run.update(kw)
    return run


def test_a_good_run_has_no_problem() -> None:
    assert demo_problems(_run()) == []


def test_no_tokens_no_trajectories_or_a_failed_run_are_problems() -> None:
    no_tokens = _run(results={"capture": {"calls": 11, "calls_failed": 11, "prompt_tokens": 0}})
    assert demo_problems(no_tokens) == ["the run captured no tokens (11 calls, 11 failed)"]
    assert demo_problems(_run(export_rows={"skyrl": 0, "atif": 0})) == ["no trajectory was exported (0 rows)"]
    failed = demo_problems(_run(state="FAILED", state_reason="the model endpoint stayed unreachable"))
    assert failed == ["the run ended FAILED: the model endpoint stayed unreachable"]


async def test_the_demo_serves_its_run_in_the_viewer_again(tmp_path: Path) -> None:
    """What `sclated demo` does after its report: a daemon on the demo's state directory
    serving the viewer until cancelled (Ctrl-C), or the command that does it."""
    state = tmp_path / "state"
    proc, ready = await start_daemon_process(state)
    async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
        stub = pb_grpc.SclateStub(ch)
        run = await stub.CreateRun(synthetic_request(run_id="demo-run"))
        async for _ in stub.WatchRun(pb.WatchRunRequest(name=run.name)):
            pass
    proc.send_signal(signal.SIGTERM)
    assert await proc.wait() == 0

    said: list[str] = []
    serving = asyncio.create_task(serve_viewer(state, "runs/demo-run", said.append))
    while not said and not serving.done():
        await asyncio.sleep(0.05)
    assert said and said[0].startswith("viewer: http://127.0.0.1:"), said
    url = said[0].split()[1]
    assert url.endswith("/#/runs/demo-run")
    base = url.split("/#/")[0]
    async with aiohttp.ClientSession() as http:
        async with http.get(base + "/api/v1/runs/demo-run") as resp:
            assert resp.status == 200 and (await resp.json())["run"]["state"] == "SUCCEEDED"
        async with http.get(base + "/") as resp:
            assert resp.status == 200 and "viewer.js" in await resp.text()
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving
    assert not (state / "ready.json").exists(), "the daemon stopped with the viewer"

    command = serve_again_command(state)
    assert f"--state-dir {state}" in command and f"--http-listen 127.0.0.1:{VIEWER_PORT}" in command
