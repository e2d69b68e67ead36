"""The real `sclated` process: signals, crashes, restarts, load, and the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench import start_daemon_process
from tests.api.conftest import synthetic_request

pytestmark = pytest.mark.e2e
SCLATE = str(Path(sys.executable).with_name("sclate"))


async def _watch(stub: pb_grpc.SclateStub, name: str, after: int = 0) -> list[pb.RunEvent]:
    return [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=name, after_seq=after))]


async def test_sigterm_drains_interrupts_and_resume_finishes(tmp_path: Path) -> None:
    proc, ready = await start_daemon_process(tmp_path, "--drain-grace-s", "0.5")
    async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
        stub = pb_grpc.SclateStub(ch)
        quick = await stub.CreateRun(synthetic_request(run_id="quick"))
        await _watch(stub, quick.name)
        slow = await stub.CreateRun(synthetic_request(days=3, events=4, turn_ms=300, run_id="slow"))
        seen: list[pb.RunEvent] = []
        async for ev in stub.WatchRun(pb.WatchRunRequest(name=slow.name)):
            seen.append(ev)
            if ev.WhichOneof("kind") == "turn" and proc.returncode is None:
                # The open stream is not cut off: it ends with the run's interruption.
                proc.send_signal(signal.SIGTERM)
    assert await proc.wait() == 0
    assert seen[-1].state.state == pb.INTERRUPTED
    assert not Path(ready["unix"]).exists()

    proc, ready = await start_daemon_process(tmp_path)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            assert (await stub.GetRun(pb.GetRunRequest(name="runs/quick"))).state == pb.SUCCEEDED
            run = await stub.GetRun(pb.GetRunRequest(name="runs/slow"))
            assert run.state == pb.INTERRUPTED and "ResumeRun" in run.state_reason
            await stub.ResumeRun(pb.ResumeRunRequest(name="runs/slow"))
            rest = await _watch(stub, "runs/slow", after=seen[-1].seq)
            assert rest[0].seq == seen[-1].seq + 1
            assert rest[-1].state.state == pb.SUCCEEDED
            final = await stub.GetRun(pb.GetRunRequest(name="runs/slow"))
            assert final.results.rounds_graded == 3 and final.results.score == 1.0
            assert final.results.scheduler.in_order
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0


async def test_sigkill_loses_nothing_acknowledged_and_runs_resume(tmp_path: Path) -> None:
    proc, ready = await start_daemon_process(tmp_path)
    async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
        stub = pb_grpc.SclateStub(ch)
        created = [
            await stub.CreateRun(synthetic_request(days=2, events=4, turn_ms=150, run_id=f"k{i}"))
            for i in range(3)
        ]
        acknowledged: list[pb.RunEvent] = []
        async for ev in stub.WatchRun(pb.WatchRunRequest(name=created[0].name)):
            acknowledged.append(ev)
            if sum(1 for e in acknowledged if e.WhichOneof("kind") == "turn") == 3:
                break
    proc.kill()
    await proc.wait()

    proc, ready = await start_daemon_process(tmp_path)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            # Every run that was acknowledged is there, and resumes by itself.
            for run in created:
                events = await _watch(stub, run.name)
                assert [e.seq for e in events] == list(range(1, len(events) + 1))
                assert events[-1].state.state == pb.SUCCEEDED, events[-1]
                resumed = [
                    e
                    for e in events
                    if e.WhichOneof("kind") == "state" and "resumed" in e.state.reason
                ]
                assert resumed, "the run should say it resumed from its durable point"
                final = await stub.GetRun(pb.GetRunRequest(name=run.name))
                assert final.results.rounds_graded == 2
            history = await _watch(stub, created[0].name)
            by_seq = {e.seq: e.SerializeToString() for e in history}
            for ev in acknowledged:
                assert by_seq[ev.seq] == ev.SerializeToString()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0


async def test_hundred_concurrent_runs_complete(tmp_path: Path) -> None:
    proc, ready = await start_daemon_process(tmp_path, "--max-running", "100")
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)

            async def one(i: int) -> int:
                run = await stub.CreateRun(
                    synthetic_request(days=2, events=3, turn_ms=20, turn_jitter=0.5)
                )
                events = await _watch(stub, run.name)
                assert [e.seq for e in events] == list(range(1, len(events) + 1))
                return int(events[-1].state.state)

            states = await asyncio.gather(*(one(i) for i in range(100)))
            assert states == [pb.SUCCEEDED] * 100
            listed = await stub.ListRuns(
                pb.ListRunsRequest(page_size=1000, filter="state=SUCCEEDED")
            )
            assert len(listed.runs) == 100
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0


async def test_cli_against_the_daemon(tmp_path: Path) -> None:
    proc, ready = await start_daemon_process(tmp_path)
    env = {**os.environ, "SCLATE_ENDPOINT": ready["tcp"]}

    def sclate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SCLATE, *args], capture_output=True, text=True, env=env, timeout=120)

    try:
        ok = await asyncio.to_thread(
            sclate,
            "runs",
            "create",
            "--benchmark",
            "synthetic",
            "--benchmark-option",
            "days=2",
            "--harness",
            "scripted",
            "--run-id",
            "cli-ok",
            "--label",
            "who=cli",
            "--wait",
            "-o",
            "json",
        )
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["state"] == "SUCCEEDED"
        bad = await asyncio.to_thread(
            sclate,
            "runs",
            "create",
            "--benchmark",
            "synthetic",
            "--harness",
            "scripted",
            "--agent-option",
            "fail_on_round=d0.task0",
            "--wait",
            "-o",
            "json",
        )
        assert bad.returncode == 1 and json.loads(bad.stdout)["state"] == "FAILED"
        got = await asyncio.to_thread(sclate, "runs", "get", "cli-ok", "-o", "json")
        assert json.loads(got.stdout)["results"]["rounds_graded"] == 2
        listed = await asyncio.to_thread(
            sclate, "runs", "list", "--filter", "labels.who=cli", "-o", "json"
        )
        assert [r["name"] for r in json.loads(listed.stdout)["runs"]] == ["runs/cli-ok"]
        watched = await asyncio.to_thread(
            sclate, "runs", "watch", "cli-ok", "--after-seq", "5", "-o", "json"
        )
        seqs = [int(json.loads(line)["seq"]) for line in watched.stdout.splitlines()]
        assert seqs[0] == 6 and seqs == list(range(6, 6 + len(seqs)))
        for args in (("benchmarks", "list", "-o", "json"), ("agents", "list", "-o", "json")):
            out = await asyncio.to_thread(sclate, *args)
            assert out.returncode == 0 and json.loads(out.stdout)
        missing = await asyncio.to_thread(sclate, "runs", "get", "nope")
        assert missing.returncode == 2 and "NOT_FOUND" in missing.stderr
        unknown = await asyncio.to_thread(
            sclate, "runs", "create", "--benchmark", "nope", "--harness", "scripted"
        )
        assert unknown.returncode == 2 and "field=run.benchmark.name" in unknown.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
    down = await asyncio.to_thread(sclate, "runs", "list")
    assert down.returncode == 2 and "Is the daemon running?" in down.stderr


async def test_systemd_notify_protocol(tmp_path: Path) -> None:
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.setblocking(False)
    os.environ["NOTIFY_SOCKET"] = str(sock_path)
    try:
        proc, _ = await start_daemon_process(tmp_path / "state")
    finally:
        del os.environ["NOTIFY_SOCKET"]
    loop = asyncio.get_running_loop()
    first = await asyncio.wait_for(loop.sock_recv(sock, 4096), 10)
    assert first.startswith(b"READY=1")
    proc.send_signal(signal.SIGTERM)
    second = await asyncio.wait_for(loop.sock_recv(sock, 4096), 10)
    assert second == b"STOPPING=1"
    assert await proc.wait() == 0
    sock.close()


def test_config_file_and_bad_config(tmp_path: Path) -> None:
    cfg = tmp_path / "sclated.toml"
    cfg.write_text(f'listen = "127.0.0.1:0"\nstate_dir = "{tmp_path / "s"}"\nmax_running = 3\n')
    bad = subprocess.run(
        [sys.executable, "-m", "sclated", "--config", str(cfg), "--listen", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "loopback" in bad.stderr
    cfg.write_text(cfg.read_text() + "colour = 1\n")
    bad = subprocess.run(
        [sys.executable, "-m", "sclated", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "unknown key 'colour'" in bad.stderr
    cfg.write_text(f'state_dir = "{tmp_path / "s"}"\nmax_running = "many"\n')
    bad = subprocess.run(
        [sys.executable, "-m", "sclated", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "max_running" in bad.stderr
