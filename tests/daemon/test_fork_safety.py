"""Children the daemon (or a bench) starts are not killed by gRPC's fork handlers.

Found by `sclated bench faults`: restarted daemons, and a daemon's model server, died of
SIGSEGV before they ran a line ("did not become ready (exit -11)"), about one start in
forty while the starting process's gRPC threads were busy: gRPC's fork handlers ran in the
child between fork and exec. `sclated` turns them off before grpc is imported."""

from __future__ import annotations

import os
import subprocess
import sys

# A gRPC server and busy clients in one process, which meanwhile starts many children
# the way the daemon starts its model server (asyncio subprocesses under uvloop).
_SPAWNER = """
import asyncio, os, sys
from sclated.__main__ import without_grpc_fork_handlers
without_grpc_fork_handlers()
import grpc, uvloop
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

async def main() -> None:
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    await server.start()
    stop = asyncio.Event()

    async def hammer() -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while not stop.is_set():
                await stub.Check(health_pb2.HealthCheckRequest())

    clients = [asyncio.create_task(hammer()) for _ in range(8)]
    codes = []
    for _ in range(int(sys.argv[1])):
        child = await asyncio.create_subprocess_exec("/bin/true")
        codes.append(await child.wait())
        await asyncio.to_thread(os.getpid)
    stop.set()
    await asyncio.gather(*clients)
    await server.stop(None)
    print(sum(1 for c in codes if c != 0), len(codes))

uvloop.run(main())
"""


def test_children_started_beside_busy_grpc_threads_all_run() -> None:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    done = subprocess.run(
        [sys.executable, "-c", _SPAWNER, "300"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    crashed, started = map(int, done.stdout.split())
    assert (crashed, started) == (0, 300), done.stderr[-2000:]
    assert "skipping fork() handlers" not in done.stderr  # the handlers are not there at all


def test_an_explicit_setting_is_kept() -> None:
    code = (
        "import os; from sclated.__main__ import without_grpc_fork_handlers;"
        "without_grpc_fork_handlers(); print(os.environ['GRPC_ENABLE_FORK_SUPPORT'])"
    )
    env = {**os.environ, "GRPC_ENABLE_FORK_SUPPORT": "1"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout == "1\n"
