"""`ModelBridge`: the host end of a sandbox's model path.

Sandboxes have no network. The daemon serves a Unix socket in the run's
directory (``/run/sclate/model.sock`` inside) and pipes each connection's
bytes to the model endpoint over TCP, optionally TLS-wrapped for https
upstreams; inside, socat exposes the socket on loopback TCP. Bytes are passed
through untouched: capture happens inside, in mitmproxy, where calls are
attributed.

The upstream is either fixed (``host``, ``port``: an external endpoint) or
resolved again for every connection (``resolve``: the daemon's embedded model,
which may have been restarted, perhaps on another port). When the bridge
cannot reach it, or it closes a connection without answering, the client gets
an HTTP 502 whose JSON body (``sclate_model_unavailable``) says why; the
bridge's health fields (``stats.failing_since``, ``stats.last_error``,
:meth:`ModelBridge.unreachable_for_s`) let the run act on an endpoint that
stays unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from sclated.errors import InvalidArgument, SclateError

__all__ = ["BridgeStats", "ExplainDrop", "ModelBridge", "Resolver", "Upstream"]

log = logging.getLogger("sclated.runtime.bridge")

# sockaddr_un.sun_path is 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107
_CHUNK = 1 << 16
_EXPLAIN_TIMEOUT_S = 5.0
# After answering 502, how long to keep reading (and discarding) what the client
# still sends before closing: closing a Unix socket with unread bytes resets it,
# and the client may then lose the answer.
_LINGER_S = 5.0

Upstream = tuple[str, int, bool | ssl.SSLContext]
"""``(host, port, tls)``: where the model endpoint is now; ``tls`` as in :class:`ModelBridge`."""
Resolver = Callable[[], Awaitable[Upstream]]
"""Finds the upstream for one new connection; raises :class:`SclateError` (its message is the cause) when it can't."""
ExplainDrop = Callable[[], Awaitable[str | None]]
"""Says why the upstream may just have closed a connection without answering (e.g. the model died), or None."""


@dataclass
class BridgeStats:
    """Counters and upstream health of one bridge.

    ``failed``: failed resolves or connects (each connection's answered 502;
    :meth:`ModelBridge.probe` counts too). ``dropped``: connections where the client sent
    a request and the upstream closed (or reset) before sending any response
    byte (answered 502 too). ``failing_since``: ``time.monotonic()`` of the
    first failed resolve/connect since the last successful connect, None
    while the last attempt succeeded. ``last_error``: the text of the last
    failure or drop ("" if none).
    """

    connections: int = 0
    active: int = 0
    failed: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    dropped: int = 0
    failing_since: float | None = None
    last_error: str = ""
    reached: int = 0
    """Successful connects to the upstream (probes included)."""


class _Refused(Exception):
    """The upstream could not be reached; the message is the 502's text."""


@dataclass
class _Flow:
    up: int = 0  # bytes read from the client
    down: int = 0  # bytes read from the upstream


def _ssl_context(tls: bool | ssl.SSLContext) -> ssl.SSLContext | None:
    if tls is True:
        return ssl.create_default_context()
    if tls is False:
        return None
    return tls


class ModelBridge:
    """Serve ``socket_path``, forwarding every connection to the model endpoint.

    Either a fixed ``host:port`` (``tls``: False for plain TCP, True for TLS
    with the system's trust store, or an ``ssl.SSLContext``;
    ``server_hostname`` defaults to ``host``), or ``resolve``: an async
    callable returning ``(host, port, tls)``, awaited for each new connection
    (it must bound its own wait). ``explain_drop``: an optional async callable
    whose text is added to the 502 sent when the upstream closes without
    answering.

    Health: :meth:`unreachable_for_s` is how long the upstream has been
    unreachable (0 when the last attempt succeeded); it is learnt from
    connections (and :meth:`probe`), so it only goes back to 0 on the next
    successful one.
    """

    def __init__(
        self,
        socket_path: Path,
        host: str | None = None,
        port: int | None = None,
        *,
        tls: bool | ssl.SSLContext = False,
        server_hostname: str | None = None,
        connect_timeout_s: float = 10.0,
        resolve: Resolver | None = None,
        explain_drop: ExplainDrop | None = None,
    ) -> None:
        path = Path(socket_path)
        if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
            raise InvalidArgument(
                f"socket path {path} is longer than {_MAX_SOCKET_PATH} bytes, the Unix "
                "socket limit; use a shorter data directory",
                field="socket_path",
            )
        if resolve is None:
            if host is None or port is None:
                raise InvalidArgument("a model bridge needs an upstream host and port, or a resolver", field="host")
            if not 0 < port < 65536:
                raise InvalidArgument(f"upstream port {port} is out of range", field="port")
        elif host is not None or port is not None:
            raise InvalidArgument("a model bridge takes a fixed host and port or a resolver, not both", field="host")
        self.socket_path = path
        # With a resolver: the last address resolved (None before the first connection).
        self.host: str | None = host
        self.port: int | None = port
        self._resolve = resolve
        self._explain_drop = explain_drop
        self._ssl = _ssl_context(tls)
        self._default_ssl: ssl.SSLContext | None = None
        self._server_hostname = server_hostname
        self._connect_timeout_s = connect_timeout_s
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.stats = BridgeStats()

    @property
    def upstream(self) -> str:
        """``tcp://host:port`` or ``tls://host:port`` (with a resolver: the last one resolved)."""
        if self.host is None or self.port is None:
            return "the model endpoint (not resolved yet)"
        scheme = "tls" if self._ssl else "tcp"
        return f"{scheme}://{self.host}:{self.port}"

    def unreachable_for_s(self, now: float | None = None) -> float:
        """Seconds since the first failed resolve/connect with no success since; 0 when the last one succeeded.

        ``now``: a ``time.monotonic()`` value (default: now).
        """
        since = self.stats.failing_since
        if since is None:
            return 0.0
        return max(0.0, (time.monotonic() if now is None else now) - since)

    async def probe(self) -> bool:
        """Resolve and connect once without sending anything, updating the health fields.

        True when the upstream accepted the connection.
        """
        try:
            _, writer = await self._open_upstream()
        except _Refused:
            return False
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
        return True

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

    # -- upstream ------------------------------------------------------------------------
    def _failed(self, text: str) -> None:
        self.stats.failed += 1
        self.stats.last_error = text
        if self.stats.failing_since is None:
            self.stats.failing_since = time.monotonic()

    async def _target(self) -> tuple[str, int, ssl.SSLContext | None]:
        if self._resolve is None:
            assert self.host is not None and self.port is not None
            return self.host, self.port, self._ssl
        try:
            host, port, tls = await self._resolve()
        except SclateError as exc:
            raise _Refused(exc.message) from exc
        except Exception as exc:  # a resolver's bug still answers the client
            log.exception("model bridge %s: the upstream resolver failed", self.socket_path)
            raise _Refused(f"the model endpoint could not be resolved: {exc!r}") from exc
        if tls is True:
            if self._default_ssl is None:
                self._default_ssl = ssl.create_default_context()
            context: ssl.SSLContext | None = self._default_ssl
        else:
            context = _ssl_context(tls)
        self.host, self.port, self._ssl = host, port, context
        return host, port, context

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Resolve (if needed) and connect, recording health; raises _Refused with the reason."""
        try:
            host, port, context = await self._target()
            try:
                async with asyncio.timeout(self._connect_timeout_s):
                    streams = await asyncio.open_connection(
                        host,
                        port,
                        ssl=context,
                        server_hostname=(self._server_hostname or host) if context else None,
                    )
            except (OSError, TimeoutError, ssl.SSLError) as exc:
                raise _Refused(
                    f"the model endpoint {self.upstream} is unreachable: {exc or type(exc).__name__}"
                ) from exc
        except _Refused as exc:
            self._failed(str(exc))
            raise
        self.stats.failing_since = None
        self.stats.reached += 1
        return streams

    # -- connections ---------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        self.stats.connections += 1
        self.stats.active += 1
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            if self._server is not None:
                raise
            # close() ended this connection: finish quietly (Python 3.11's stream
            # server would log a cancelled handler as an error).
        finally:
            self.stats.active -= 1
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await self._open_upstream()
        except _Refused as exc:
            await self._answer_502(writer, str(exc))
            await self._linger(reader)
            return
        flow = _Flow()
        try:
            await asyncio.gather(
                self._pipe_up(reader, up_writer, flow),
                self._pipe_down(up_reader, writer, flow),
            )
        finally:
            up_writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await up_writer.wait_closed()

    async def _pipe_up(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flow: _Flow) -> None:
        try:
            while data := await reader.read(_CHUNK):
                flow.up += len(data)
                try:
                    writer.write(data)
                    await writer.drain()
                except (OSError, ssl.SSLError):
                    # The upstream went away mid-request (_pipe_down answers):
                    # read the rest of the request so that the answer gets through.
                    writer.close()
                    await self._linger(reader)
                    return
                self.stats.bytes_up += len(data)
            # Half-close: an HTTP server reading until EOF still answers.
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, ssl.SSLError):
            # One side went away; closing both ends (in _handle) is all that is left.
            writer.close()

    async def _pipe_down(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flow: _Flow) -> None:
        error: BaseException | None = None
        try:
            while data := await reader.read(_CHUNK):
                flow.down += len(data)
                writer.write(data)
                await writer.drain()
                self.stats.bytes_down += len(data)
        except (OSError, ssl.SSLError) as exc:
            error = exc
        if flow.down == 0 and flow.up > 0:
            # A request went up and nothing came back: the server closed (or
            # died) mid-call. An empty reply would leave the harness guessing.
            await self._dropped(writer, error)
            return
        if error is not None:
            # Part of a response was sent: the client sees it truncated.
            writer.close()
            return
        # Half-close: the client reads the response to its end.
        with contextlib.suppress(OSError, ssl.SSLError):
            if writer.can_write_eof():
                writer.write_eof()

    async def _dropped(self, writer: asyncio.StreamWriter, error: BaseException | None) -> None:
        self.stats.dropped += 1
        how = f"reset the connection ({error})" if error is not None else "closed the connection"
        text = f"the model endpoint {self.upstream} {how} without answering (it may have crashed mid-call)"
        if self._explain_drop is not None:
            why: str | None = None
            try:
                async with asyncio.timeout(_EXPLAIN_TIMEOUT_S):
                    why = await self._explain_drop()
            except Exception:
                log.exception("model bridge %s: explain_drop failed", self.socket_path)
            if why:
                text += f"; {why}"
        self.stats.last_error = text
        await self._answer_502(writer, text)

    async def _linger(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
            async with asyncio.timeout(_LINGER_S):
                while await reader.read(_CHUNK):
                    pass

    async def _answer_502(self, writer: asyncio.StreamWriter, text: str) -> None:
        # The model path speaks HTTP, so say why in HTTP rather than just reset:
        # the harness's error message then names the real cause.
        body = json.dumps({"error": {"type": "sclate_model_unavailable", "message": f"sclate: {text}"}}).encode()
        head = (
            "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        with contextlib.suppress(OSError):
            writer.write(head + body)
            await writer.drain()
            # Half-close: the client reads the answer to its end, then closes.
            if writer.can_write_eof():
                writer.write_eof()
