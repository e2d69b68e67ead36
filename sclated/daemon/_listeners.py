"""The gRPC server and the addresses it listens on, set up and let go symmetrically.

Modelled on aiohttp's runner and sites: :class:`GrpcServer` holds the
``grpc.aio`` server and the state grpc does not expose (whether it started,
whether it was asked to stop); each :class:`Listener` is one address, bound
to the server before it starts and closed once the server let go of it.

gRPC has no per-port close: a port is bound by ``add_*_port`` and let go
only when a *started* server stops. So ``Listener.close()`` waits for
:meth:`GrpcServer.stopped`, which, for a server that bound ports but never
started (a start-up that failed halfway), starts it and stops it at once.
"""

from __future__ import annotations

import abc
import asyncio
import os
import socket
import stat
from pathlib import Path

import grpc

from sclated.daemon._config import DaemonConfig, tcp_listen_problem
from sclated.errors import ConfigError

__all__ = [
    "GrpcServer",
    "Listener",
    "TcpListener",
    "TlsListener",
    "UnixSocketListener",
    "listeners_for",
]


class GrpcServer:
    """The daemon's ``grpc.aio`` server, its start and its two-phase stop.

    ``stop_accepting(grace)`` refuses new calls at once and gives open ones
    ``grace`` seconds; ``stopped()`` waits until the server has stopped and
    let go of every address it bound (stopping it first if nobody asked)."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self.server = server
        self.ports = 0
        """Addresses bound so far (by listeners)."""
        self._start_tried = False
        self._stopping: asyncio.Task[None] | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping is not None

    async def start(self) -> None:
        self._start_tried = True
        await self.server.start()

    def stop_accepting(self, grace_s: float | None) -> None:
        """Refuse new calls from now on; open calls end within ``grace_s`` (None: at once)."""
        if self._stopping is None:
            self._stopping = asyncio.get_running_loop().create_task(self.server.stop(grace_s), name="sclated-grpc-stop")

    async def stopped(self) -> None:
        """Return once the server has stopped and let go of its addresses."""
        if self._stopping is None and not self._start_tried and self.ports:
            # The only way grpc lets go of a bound port: start, then stop at once.
            # Nothing has announced the address yet (no ready file, no READY).
            self._start_tried = True
            await self.server.start()
        self.stop_accepting(None)
        assert self._stopping is not None
        await asyncio.shield(self._stopping)


class Listener(abc.ABC):
    """One address of the daemon (an aiohttp site): ``bind(server)`` before the
    server starts, ``close()`` once the daemon stops serving it.

    ``close()`` returns when the address is free again."""

    kind = ""
    """``tcp``, ``tls`` or ``unix``."""
    field = "listen"
    """The configuration key of the address (for errors)."""

    def __init__(self) -> None:
        self._server: GrpcServer | None = None

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """What it is, for logs: ``tcp 127.0.0.1:7431``."""

    def bind(self, server: GrpcServer) -> None:
        """Add the address to ``server`` (not started yet); :class:`ConfigError` if it cannot be had."""
        self._bind(server.server)
        server.ports += 1
        self._server = server

    @abc.abstractmethod
    def _bind(self, server: grpc.aio.Server) -> None: ...

    async def close(self) -> None:
        """Wait until the server let go of the address (all a TCP port needs)."""
        server, self._server = self._server, None
        if server is not None:
            await server.stopped()


class TcpListener(Listener):
    """``HOST:PORT`` in plain text; ``tcp_address`` is what it bound (the port
    picked when the configuration says 0)."""

    kind = "tcp"

    def __init__(self, listen: str) -> None:
        super().__init__()
        self.listen = listen
        self.tcp_address: str | None = None

    @property
    def name(self) -> str:
        return f"{self.kind} {self.tcp_address or self.listen}"

    def _bind(self, server: grpc.aio.Server) -> None:
        # Tried first with a socket of our own, as gRPC will bind: a taken
        # address is one clear line instead of gRPC's own log line and error.
        problem = tcp_listen_problem(self.listen)
        if problem is not None:
            if not problem.startswith("cannot"):
                problem = f"cannot listen there: {problem}"
            raise ConfigError(f"listen {self.listen!r}: {problem}", field=self.field)
        try:
            port = self._add_port(server)
        except RuntimeError:  # what grpc raises now where it used to return 0
            port = 0
        if port == 0:  # taken in between, or an address of another host
            raise ConfigError(
                f"listen {self.listen!r}: cannot listen there (in use, or not this host's)", field=self.field
            )
        self.tcp_address = f"{self.listen.rpartition(':')[0]}:{port}"

    def _add_port(self, server: grpc.aio.Server) -> int:
        port: int = server.add_insecure_port(self.listen)
        return port


class TlsListener(TcpListener):
    """``HOST:PORT`` with TLS (the certificate chain and its private key, PEM)."""

    kind = "tls"

    def __init__(self, listen: str, cert: Path, key: Path) -> None:
        super().__init__(listen)
        self.cert = cert
        self.key = key

    def _add_port(self, server: grpc.aio.Server) -> int:
        pem: dict[str, bytes] = {}
        for path, what, field in ((self.cert, "TLS certificate", "tls_cert"), (self.key, "TLS private key", "tls_key")):
            try:
                pem[field] = path.read_bytes()
            except OSError as exc:
                raise ConfigError(f"cannot read the {what}: {exc.strerror or exc}", path=path, field=field) from None
        creds = grpc.ssl_server_credentials([(pem["tls_key"], pem["tls_cert"])])
        port: int = server.add_secure_port(self.listen, creds)
        return port


class UnixSocketListener(Listener):
    """A unix socket at ``path``. Before binding it removes a stale socket (one
    nobody answers on); it never removes a live one or anything that is not a
    socket. On close it removes its socket file, if that is still its own."""

    kind = "unix"
    field = "unix_socket"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.unix_path: Path | None = None
        self._identity: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        return f"{self.kind} {self.path}"

    def _bind(self, server: grpc.aio.Server) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the unix socket's directory: {exc.strerror or exc}", path=self.path, field=self.field
            ) from None
        self._remove_stale()
        try:
            server.add_insecure_port(f"unix:{self.path}")
        except RuntimeError:
            raise ConfigError("cannot listen on this unix socket", path=self.path, field=self.field) from None
        self._identity = _identity(self.path)
        self.unix_path = self.path

    def _remove_stale(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            # check_startup refuses this too: never a file of the user's.
            raise ConfigError("the unix socket path exists and is not a socket", path=self.path, field=self.field)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.setblocking(False)
            try:
                probe.connect(str(self.path))
            except (ConnectionRefusedError, FileNotFoundError):
                pass  # stale: left by a process that was killed
            except BlockingIOError:  # a live listener with a full backlog
                raise self._in_use() from None
            except OSError as exc:
                raise ConfigError(
                    f"cannot tell whether the unix socket is stale: {exc.strerror or exc}",
                    path=self.path,
                    field=self.field,
                ) from None
            else:
                raise self._in_use()
        self.path.unlink(missing_ok=True)

    def _in_use(self) -> ConfigError:
        return ConfigError(
            "another process listens on this unix socket (is another sclated running?)",
            path=self.path,
            field=self.field,
        )

    async def close(self) -> None:
        """Wait until the server let go of the socket, then remove its file: gRPC
        removes it when it stops, this covers the rest, and never removes a
        socket another process has put at the path since."""
        await super().close()
        if self._identity is not None and _identity(self.path) == self._identity:
            self.path.unlink(missing_ok=True)
        self._identity = None


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISSOCK(st.st_mode) else None


def listeners_for(config: DaemonConfig) -> list[Listener]:
    """The listeners a configuration asks for, in binding order: TCP (or TLS), then the unix socket."""
    out: list[Listener] = []
    if config.listen:
        if config.tls_cert is not None and config.tls_key is not None:
            out.append(TlsListener(config.listen, config.tls_cert, config.tls_key))
        else:
            out.append(TcpListener(config.listen))
    if config.unix_socket_path is not None:
        out.append(UnixSocketListener(config.unix_socket_path))
    return out
