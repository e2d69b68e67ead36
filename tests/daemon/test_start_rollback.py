"""A start-up that fails at any step lets go of everything acquired before it.

Each case makes exactly one start-up step fail (a named test double in place
of the step's callee), calls ``Daemon.start()`` in-process and checks that
the step's own error comes out and that what came before was let go of, in
reverse: the store closed (no connection, no thread), the runs' flusher
done, the container engine closed, the gRPC server stopped (its TCP port can
be bound again, its socket file is gone), no ready file, STOPPING=1 sent if
READY=1 was, no task of the daemon left; and that a fresh ``Daemon`` then
starts on the same state directory. A start followed by a stop leaves
nothing behind either.

The container engine is a stand-in (:class:`FakeEngine`): no Docker here.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc.aio._server import Server as AioServer
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.daemon import Daemon, DaemonConfig
from sclated.daemon import _daemon as daemon_module
from sclated.daemon._daemon import ReadyFile
from sclated.daemon._gc import GarbageCollector
from sclated.daemon._listeners import UnixSocketListener
from sclated.daemon._sdnotify import notify as real_notify
from sclated.errors import ConfigError
from sclated.runs import RunManager
from sclated.store import Store
from tests.api.conftest import synthetic_request

STEPS = [
    "ready file",
    "grpc server",
    "tcp listener",
    "unix listener",
    "store",
    "sandboxes",
    "handlers",
    "runs",
    "serving",
    "health",
    "ready",
    "watchdog",
    "garbage collector",
]
"""The stack entries of a full start, in the order they are acquired."""


class InjectedFailure(Exception):
    """What every test double raises at its step."""


# -- the stand-ins --------------------------------------------------------------------


@dataclass
class FakeEngine:
    """Stands in for the container engine: records what the daemon asks of it."""

    fail_reap: bool = False
    reaped: list[str] = field(default_factory=list)
    closed: bool = False

    async def reap(self, daemon_id: str, keep: set[str]) -> list[object]:
        self.reaped.append(daemon_id)
        if self.fail_reap:
            raise InjectedFailure("reaping leftovers")
        return []

    async def close(self) -> None:
        self.closed = True


@dataclass
class Notifications:
    """A datagram socket standing in for systemd's $NOTIFY_SOCKET, read as
    datagrams arrive (a full socket would block the sender)."""

    sock: socket.socket
    seen: list[str] = field(default_factory=list)
    _new: list[str] = field(default_factory=list)

    def read(self) -> None:
        while True:
            try:
                message = self.sock.recv(4096).decode()
            except BlockingIOError:
                return
            self.seen.append(message)
            self._new.append(message)

    def drain(self) -> list[str]:
        """The messages received since the last drain, watchdog pings left out."""
        self.read()
        new, self._new = self._new, []
        return [m for m in new if m != "WATCHDOG=1"]


@dataclass
class Setup:
    base: Path
    engine: FakeEngine
    notifications: Notifications
    tasks_before: set[asyncio.Task[Any]]

    def config(self, listen: str = "127.0.0.1:0") -> DaemonConfig:
        return DaemonConfig(
            state_dir=self.base / "state",
            listen=listen,
            unix_socket=str(self.base / "d.sock"),
            ready_file=self.base / "ready.json",
            drain_grace_s=1.0,
            retention="1s",  # its periodic sweep is one more task to stop in order
        )


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="sr-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def setup(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Setup]:
    engine = FakeEngine()

    async def fake_runtime(services: Any) -> FakeEngine:
        services._runtime = engine
        return engine

    # The class of the daemon's sandbox services, wherever it lives.
    services = type(Daemon(DaemonConfig(state_dir=short_dir / "state")).services)
    monkeypatch.setattr(services, "runtime", fake_runtime)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(short_dir / "notify.sock"))
    sock.setblocking(False)
    monkeypatch.setenv("NOTIFY_SOCKET", str(short_dir / "notify.sock"))
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    notifications = Notifications(sock)
    loop = asyncio.get_running_loop()
    loop.add_reader(sock.fileno(), notifications.read)
    try:
        yield Setup(short_dir, engine, notifications, set(asyncio.all_tasks()))
    finally:
        loop.remove_reader(sock.fileno())
        sock.close()


# -- what must be left ------------------------------------------------------------------


def _port_is_free(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
        try:
            sock.bind((host, int(port)))
            sock.listen()
        except OSError:
            return False
    return True


def assert_nothing_left(d: Daemon, s: Setup) -> None:
    steps = d.steps
    assert steps.released == steps.acquired[::-1], "let go of in reverse, each once"
    assert d.store._conn is None, "the store is closed"
    assert not [t for t in threading.enumerate() if t.name.startswith("sclated-store")], "the store's thread"
    flusher = d.manager._flusher
    assert flusher is None or flusher.done(), "the runs' flusher is done"
    assert not d.manager.history_expiry.running, "the retention sweep is stopped"
    assert not d.gc.running, "the scheduled garbage collections are stopped"
    if "sandboxes" in steps.acquired:
        assert s.engine.closed, "the container engine is closed"
    if d.tcp_address is not None:
        assert _port_is_free(d.tcp_address), "the TCP port can be bound again"
    assert not (s.base / "d.sock").exists(), "the socket file is gone"
    assert not (s.base / "ready.json").exists() and not (s.base / "ready.json.tmp").exists(), "no ready file"
    messages = s.notifications.drain()
    if "ready" in steps.acquired:
        assert [m.split("\n")[0] for m in messages] == ["READY=1", "STOPPING=1"]
    else:
        assert messages == []
    left = set(asyncio.all_tasks()) - s.tasks_before - {asyncio.current_task()}
    assert not left, f"tasks of the daemon left: {left}"


async def _start_again_and_stop(s: Setup) -> None:
    """A fresh daemon on the same state directory starts, serves and stops."""
    s.engine.closed = False
    s.engine.fail_reap = False
    d = Daemon(s.config())
    await d.start()
    assert d.steps.acquired == STEPS
    async with grpc.aio.insecure_channel(f"unix:{d.unix_path}") as ch:
        health = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    await d.stop()
    assert_nothing_left(d, s)


# -- the test doubles, one per step -----------------------------------------------------


@dataclass(frozen=True)
class Case:
    inject: Callable[[pytest.MonkeyPatch, Daemon, Setup], None]
    acquired: list[str]
    """The entries acquired before the failing step."""
    error: type[Exception] = InjectedFailure
    port_taken: bool = False
    """Not a double: the configured TCP port is really taken."""


def _before(step: str) -> list[str]:
    return STEPS[: STEPS.index(step)]


def daemon_id_unwritable(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    def failing_daemon_id(state_dir: Path) -> str:
        raise InjectedFailure("the daemon id")

    mp.setattr(daemon_module, "_daemon_id", failing_daemon_id)


def ready_file_claim_fails(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    def failing_claim(self: ReadyFile) -> None:
        raise InjectedFailure("claiming the ready file")

    mp.setattr(ReadyFile, "claim", failing_claim)


def grpc_server_creation_fails(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    def failing_server(*args: Any, **kwargs: Any) -> grpc.aio.Server:
        raise InjectedFailure("creating the gRPC server")

    mp.setattr(grpc.aio, "server", failing_server)


def nothing(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    pass


def second_listener_bind_fails(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    def failing_bind(self: UnixSocketListener, server: Any) -> None:
        raise InjectedFailure("binding the unix socket")

    mp.setattr(UnixSocketListener, "bind", failing_bind)


def store_open_fails_half_open(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    real_open = Store.open

    async def open_then_fail(self: Store) -> None:
        await real_open(self)  # the connection and its thread exist: half open
        raise InjectedFailure("opening the store")

    mp.setattr(Store, "open", open_then_fail)


def reaping_fails(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    s.engine.fail_reap = True


def reflection_fails(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    def failing_reflection(*args: Any, **kwargs: Any) -> None:
        raise InjectedFailure("adding reflection")

    mp.setattr(reflection, "enable_server_reflection", failing_reflection)


def manager_start_fails_after_flusher(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    real_start = RunManager.start

    async def start_then_fail(self: RunManager) -> None:
        await real_start(self)  # its flusher task runs
        raise InjectedFailure("starting the runs")

    mp.setattr(RunManager, "start", start_then_fail)


def server_start_fails_after_starting(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    real_start = AioServer.start

    async def start_then_fail(self: AioServer) -> None:
        await real_start(self)  # it serves: its ports must be let go
        raise InjectedFailure("starting the gRPC server")

    mp.setattr(AioServer, "start", start_then_fail)


def health_serving_fails(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    real_set = d.health.set

    async def failing_serving(service: str, status: Any) -> None:
        if status == health_pb2.HealthCheckResponse.SERVING:
            raise InjectedFailure("health SERVING")
        await real_set(service, status)

    mp.setattr(d.health, "set", failing_serving)


def ready_file_write_fails_half_written(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    def write_tmp_then_fail(self: ReadyFile, info: dict[str, object]) -> None:
        self._written = True
        self._tmp.write_text("{")  # half written
        raise InjectedFailure("writing the ready file")

    mp.setattr(ReadyFile, "write", write_tmp_then_fail)


def ready_notification_fails(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    def failing_ready(message: str) -> bool:
        if message.startswith("READY=1"):
            raise InjectedFailure("sd_notify READY")
        return real_notify(message)

    mp.setattr(daemon_module, "notify", failing_ready)


def watchdog_fails(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    def failing_interval() -> float | None:
        raise InjectedFailure("starting the watchdog")

    mp.setattr(daemon_module, "watchdog_interval_s", failing_interval)


def garbage_collector_fails(mp: pytest.MonkeyPatch, d: Daemon, s: Setup) -> None:
    def failing_start(self: GarbageCollector) -> None:
        raise InjectedFailure("starting the garbage collector")

    mp.setattr(GarbageCollector, "start", failing_start)


CASES: dict[str, Case] = {
    "state-dir/daemon-id": Case(daemon_id_unwritable, []),
    "ready-file-claim": Case(ready_file_claim_fails, _before("ready file")),
    "grpc-server": Case(grpc_server_creation_fails, _before("grpc server")),
    "first-listener-tcp-port-taken": Case(nothing, _before("tcp listener"), ConfigError, port_taken=True),
    "second-listener-unix": Case(second_listener_bind_fails, _before("unix listener")),
    "store-open": Case(store_open_fails_half_open, _before("store")),
    "reap-leftovers": Case(reaping_fails, _before("sandboxes")),
    "handlers": Case(reflection_fails, _before("handlers")),
    "manager-start": Case(manager_start_fails_after_flusher, _before("runs")),
    "server-start": Case(server_start_fails_after_starting, _before("serving")),
    "health-serving": Case(health_serving_fails, _before("health")),
    "ready-file-write": Case(ready_file_write_fails_half_written, _before("ready")),
    "sd-notify-ready": Case(ready_notification_fails, _before("ready")),
    "watchdog": Case(watchdog_fails, _before("watchdog")),
    "garbage-collector": Case(garbage_collector_fails, _before("garbage collector")),
}


@pytest.mark.parametrize("name", list(CASES))
async def test_a_failed_step_lets_go_of_everything_before_it(
    name: str, setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = CASES[name]
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        d = Daemon(setup.config(f"127.0.0.1:{busy.getsockname()[1]}" if case.port_taken else "127.0.0.1:0"))
        with monkeypatch.context() as mp:
            case.inject(mp, d, setup)
            with pytest.raises(case.error) as raised:
                await d.start()
    if case.port_taken:
        assert "cannot listen there: address already in use" in str(raised.value)
    assert d.steps.acquired == case.acquired
    assert_nothing_left(d, setup)
    await d.stop()  # nothing left to do
    assert d.steps.released == case.acquired[::-1]
    await _start_again_and_stop(setup)


def test_every_step_has_a_case() -> None:
    failing_at = {STEPS[len(case.acquired)] for case in CASES.values() if len(case.acquired) < len(STEPS)}
    assert failing_at == set(STEPS)


async def test_start_then_stop_leaves_nothing_behind(setup: Setup) -> None:
    d = Daemon(setup.config())
    await d.start()
    assert d.steps.acquired == STEPS
    with pytest.raises(RuntimeError, match="starts once"):
        await d.start()
    ready = (setup.base / "ready.json").read_text()
    assert str(d.unix_path) in ready and str(d.tcp_address) in ready
    assert setup.engine.reaped == [d.daemon_id]
    async with grpc.aio.insecure_channel(d.tcp_address or "") as ch:
        stub = pb_grpc.SclateStub(ch)
        run = await stub.CreateRun(synthetic_request(days=1, events=2))
        events = [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=run.name))]
        assert events[-1].state.state == pb.SUCCEEDED
    await d.stop()
    assert d.steps.released == STEPS[::-1]
    assert_nothing_left(d, setup)
    seen = setup.notifications.seen
    assert "WATCHDOG=1" in seen, "the watchdog pinged"
    stopping = next(i for i, m in enumerate(seen) if m == "STOPPING=1")
    assert "WATCHDOG=1" not in seen[stopping:], "the pings stop before STOPPING=1"
    await _start_again_and_stop(setup)
