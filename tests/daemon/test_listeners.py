"""The daemon's listeners: what each binds, what it refuses, what its close lets go."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from sclated.daemon._listeners import GrpcServer, TcpListener, UnixSocketListener
from sclated.errors import ConfigError


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="sl-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
    return True


async def test_a_port_bound_by_a_server_that_never_started_is_let_go_on_close() -> None:
    # gRPC keeps a bound port until a started server stops: close() sees to it.
    server = GrpcServer(grpc.aio.server())
    tcp = TcpListener("127.0.0.1:0")
    tcp.bind(server)
    port = int((tcp.tcp_address or "").rpartition(":")[2])
    assert not _port_is_free(port)
    await tcp.close()
    assert _port_is_free(port)


async def test_a_taken_tcp_port_is_one_config_error_without_grpcs_own_line(capfd: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        listen = f"127.0.0.1:{busy.getsockname()[1]}"
        server = GrpcServer(grpc.aio.server())
        with pytest.raises(ConfigError, match="cannot listen there: address already in use") as raised:
            TcpListener(listen).bind(server)
        assert raised.value.field == "listen"
        assert server.ports == 0
        await server.stopped()
    assert "add_port" not in capfd.readouterr().err


async def test_a_stale_unix_socket_is_replaced_and_the_file_goes_on_close(short_dir: Path) -> None:
    path = short_dir / "d.sock"
    with socket.socket(socket.AF_UNIX) as killed:
        killed.bind(str(path))  # bound, nobody listening: what a killed process leaves
    server = GrpcServer(grpc.aio.server())
    unix = UnixSocketListener(path)
    unix.bind(server)
    assert unix.unix_path == path and path.is_socket()
    await server.start()
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(str(path))
    server.stop_accepting(None)
    await unix.close()
    assert not path.exists()


async def test_a_live_unix_socket_is_never_taken_over(short_dir: Path) -> None:
    path = short_dir / "d.sock"
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(path))
        live.listen()
        server = GrpcServer(grpc.aio.server())
        with pytest.raises(ConfigError, match="another process listens on this unix socket") as raised:
            UnixSocketListener(path).bind(server)
        assert raised.value.field == "unix_socket"
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))  # still the other process's
        await server.stopped()


async def test_a_file_that_is_not_a_socket_is_never_removed(short_dir: Path) -> None:
    path = short_dir / "d.sock"
    path.write_text("a file of the user's\n")
    server = GrpcServer(grpc.aio.server())
    with pytest.raises(ConfigError, match="exists and is not a socket"):
        UnixSocketListener(path).bind(server)
    assert path.read_text() == "a file of the user's\n"
    await server.stopped()
