"""The local executor (the default) never loads Ray, even where Ray is installed."""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench import start_daemon_process
from tests.api.conftest import synthetic_request

pytestmark = pytest.mark.e2e


def _ray_loaded(pid: int) -> list[str]:
    """Ray's files the process has mapped: importing ray loads its core extension (_raylet)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return sorted({line.split()[-1] for line in maps.splitlines() if "/site-packages/ray/" in line})


async def test_a_local_daemon_runs_a_run_without_loading_ray(tmp_path: Path) -> None:
    import ray  # installed here (the dev environment has the extra): the check below can fail

    assert Path(ray.__file__).parent.joinpath("_raylet.so").exists()
    proc, ready = await start_daemon_process(tmp_path / "state")
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = await stub.CreateRun(synthetic_request(days=1, events=2))
            events = [e async for e in stub.WatchRun(pb.WatchRunRequest(name=run.name))]
            assert events[-1].state.state == pb.SUCCEEDED
            assert (await stub.GetRun(pb.GetRunRequest(name=run.name))).node == ""
        assert _ray_loaded(proc.pid) == []
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
