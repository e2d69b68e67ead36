"""`ModelBridge`: the host end of a sandbox's model path.

Sandboxes have no network. The daemon serves a Unix socket in the run's
directory (``/run/sclate/model.sock`` inside) and pipes each connection's
bytes to the model endpoint over TCP, optionally TLS-wrapped for https
upstreams; inside, socat exposes the socket on loopback TCP. Bytes are passed
through untouched: capture happens inside, in mitmproxy, where calls are
attributed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from sclated.errors import InvalidArgument

__all__ = ["BridgeStats", "ModelBridge"]

# sockaddr_un.sun_path is 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107
_CHUNK = 1 << 16


@dataclass
class BridgeStats:
    connections: int = 0
    active: int = 0
    failed: int = 0
    bytes_up: int = 0
    bytes_down: int = 0


class ModelBridge:
    """Serve ``socket_path``, forwarding every connection to ``host:port``.

    ``tls``: False for plain TCP, True for TLS with the system's trust store,
    or an ``ssl.SSLContext``. ``server_hostname`` defaults to ``host``.
    """

    def __init__(
        self,
        socket_path: Path,
        host: str,
        port: int,
        *,
        tls: bool | ssl.SSLContext = False,
        server_hostname: str | None = None,
        connect_timeout_s: float = 10.0,
    ) -> None:
        path = Path(socket_path)
        if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
            raise InvalidArgument(
                f"socket path {path} is longer than {_MAX_SOCKET_PATH} bytes, the Unix "
                "socket limit; use a shorter data directory",
                field="socket_path",
            )
        if not 0 < port < 65536:
            raise InvalidArgument(f"upstream port {port} is out of range", field="port")
        self.socket_path = path
        self.host = host
        self.port = port
        if tls is True:
            self._ssl: ssl.SSLContext | None = ssl.create_default_context()
        elif tls is False:
            self._ssl = None
        else:
            self._ssl = tls
        self._server_hostname = server_hostname or host
        self._connect_timeout_s = connect_timeout_s
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.stats = BridgeStats()

    @property
    def upstream(self) -> str:
        scheme = "tls" if self._ssl else "tcp"
        return f"{scheme}://{self.host}:{self.port}"

    async def start(self) -> None:
        if self._server is not None:
            return
        # A stale socket from a previous daemon would make bind fail.
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(self.socket_path.unlink)
        self._server = await asyncio.start_unix_server(self._handle, path=str(self.socket_path))
        # Sandboxes may run as an unprivileged user, and root inside has no
        # CAP_DAC_OVERRIDE: make the socket connectable by anyone who can see it
        # (only the run's sandbox mounts this directory).
        await asyncio.to_thread(os.chmod, self.socket_path, 0o666)

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(self.socket_path.unlink)

    async def __aenter__(self) -> ModelBridge:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        self.stats.connections += 1
        self.stats.active += 1
        try:
            try:
                async with asyncio.timeout(self._connect_timeout_s):
                    up_reader, up_writer = await asyncio.open_connection(
                        self.host,
                        self.port,
                        ssl=self._ssl,
                        server_hostname=self._server_hostname if self._ssl else None,
                    )
            except (OSError, TimeoutError, ssl.SSLError) as exc:
                self.stats.failed += 1
                await self._refuse(writer, exc)
                return
            try:
                await asyncio.gather(
                    self._pipe(reader, up_writer, up=True),
                    self._pipe(up_reader, writer, up=False),
                )
            finally:
                up_writer.close()
                with contextlib.suppress(OSError, ssl.SSLError):
                    await up_writer.wait_closed()
        finally:
            self.stats.active -= 1
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, up: bool) -> None:
        try:
            while data := await reader.read(_CHUNK):
                writer.write(data)
                await writer.drain()
                if up:
                    self.stats.bytes_up += len(data)
                else:
                    self.stats.bytes_down += len(data)
            # Half-close: an HTTP client that shut down its write side still
            # waits for the response.
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, ssl.SSLError):
            # One side went away; closing both ends (in _handle) is all that is left.
            writer.close()

    async def _refuse(self, writer: asyncio.StreamWriter, exc: BaseException) -> None:
        # The model path speaks HTTP, so say why in HTTP rather than just reset:
        # the harness's error message then names the real cause.
        body = json.dumps(
            {
                "error": {
                    "type": "sclate_model_unavailable",
                    "message": f"sclate: the model endpoint {self.upstream} is unreachable: "
                    f"{exc or type(exc).__name__}",
                }
            }
        ).encode()
        head = (
            "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        with contextlib.suppress(OSError):
            writer.write(head + body)
            await writer.drain()
