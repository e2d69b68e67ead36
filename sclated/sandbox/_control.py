"""The host side of a sandbox's control socket (``/run/sclate/sclate.sock``).

Newline-delimited JSON, one request per line ``{"id", "type", ...}``, one
reply per request ``{"id", "ok": true, ...}`` or ``{"id", "ok": false,
"error", "reason"}``. Requests on one connection are served concurrently (a
``wait`` may block for a long time while the same connection reports calls).

Whatever is inside the sandbox can connect, so nothing it sends may cost the
daemon unbounded memory or take the socket down (the bounds are
:class:`ControlLimits`): a line longer than ``line_bytes`` is refused (read
past, not kept); the unfinished and unanswered lines of all connections
together hold at most ``held_bytes`` (past that a line is refused as
RESOURCE_EXHAUSTED, to be sent again later); at most ``in_flight`` requests
are being handled (more are refused at once); a connection has at most
``queued`` requests not yet answered (past that it is not read until it reads
its replies); at most ``connections`` connections are served at once. Every
refusal is a reply; the ``id`` of an over-long line is read from its start
when it has one there (the proxy's and the sandbox tools' requests do), so
the caller can tell which request was refused.

A handler can tell which client asked (:func:`current_connection`). When a client
closes its connection, what it still waits for is cancelled (nobody is left to read
the reply: a ``wait`` whose caller was killed must not hold its turn suspended), and
``on_disconnect`` hears which client left (the capture proxy's calls in flight end
with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sclated.capture import MAX_CONTROL_LINE_BYTES
from sclated.errors import InvalidArgument, ResourceExhausted, SclateError

__all__ = ["ControlConnection", "ControlLimits", "ControlServer", "Handler", "current_connection"]

log = logging.getLogger("sclated.control")

Handler = Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]
MAX_ID_CHARS = 128


@dataclass(frozen=True, slots=True)
class ControlLimits:
    """What one control socket gives whatever is in its sandbox (see the module docstring)."""

    line_bytes: int = MAX_CONTROL_LINE_BYTES
    """The longest request line read (a call record with long bodies; the proxy keeps its
    records shorter, see ``proxy_addons.record.MAX_RECORD_BYTES``)."""
    held_bytes: int = 2 * MAX_CONTROL_LINE_BYTES
    """Bytes of request lines being read or handled, all connections together."""
    connections: int = 32
    """Connections served at once (the proxy holds one; each ``sclate-wait`` and ``are`` one more)."""
    in_flight: int = 256
    """Requests whose handler runs, all connections together (a ``wait`` runs until it wakes
    or its connection closes)."""
    queued: int = 256
    """Requests of one connection read and not yet answered: past it the connection is not read."""


_READ_CHUNK = 64 * 1024
"""What a connection's reader buffers before a line is taken off it."""
_LEADING_ID = re.compile(rb'\s*\{\s*"id"\s*:\s*(-?\d{1,18})\s*[,}]')


@dataclass(slots=True)
class _Refused:
    """A line that was not kept: what to answer, and to which id."""

    error: SclateError
    head: bytes


class ControlConnection:
    """One client of the control socket (the capture proxy, a ``sclate-wait``, ``are``)."""

    _ids = itertools.count(1)

    def __init__(self) -> None:
        self.id = next(self._ids)
        self.kinds: set[str] = set()
        """The request types it sent (the proxy sends call_start, call_end, record)."""

    def __repr__(self) -> str:
        return f"ControlConnection({self.id}, {sorted(self.kinds)})"


_CONNECTION: contextvars.ContextVar[ControlConnection | None] = contextvars.ContextVar(
    "sclate_control_connection", default=None
)


def current_connection() -> ControlConnection | None:
    """The client whose request a handler is serving (None outside a control request)."""
    return _CONNECTION.get()


@dataclass(slots=True)
class _Connection:
    writer: asyncio.StreamWriter
    client: ControlConnection = field(default_factory=ControlConnection)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    answered: asyncio.Event = field(default_factory=asyncio.Event)

    def done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.answered.set()


class ControlServer:
    def __init__(
        self,
        path: Path,
        handlers: Mapping[str, Handler],
        limits: ControlLimits | None = None,
        *,
        on_disconnect: Callable[[ControlConnection], None] | None = None,
    ) -> None:
        self.path = path
        self.limits = limits or ControlLimits()
        self._handlers = dict(handlers)
        self._on_disconnect = on_disconnect
        self._closing = False
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._held = 0
        self._handling = 0

    @property
    def held_bytes(self) -> int:
        """Bytes of request lines held right now (at most ``limits.held_bytes``)."""
        return self._held

    async def start(self) -> None:
        await asyncio.to_thread(self._unlink)
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=_READ_CHUNK)
        # Processes in the sandbox run as root but outside our user namespace
        # assumptions: let any local user of the sandbox connect.
        await asyncio.to_thread(self.path.chmod, 0o666)

    def _unlink(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def close(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                w.close()
            for t in list(self._tasks):
                t.cancel()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        await asyncio.to_thread(self._unlink)

    # -- connections -----------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._writers) >= self.limits.connections:
            await self._refuse_connection(writer)
            return
        self._writers.add(writer)
        conn = _Connection(writer)
        _CONNECTION.set(conn.client)  # this connection's request tasks copy the context: they see it
        try:
            while True:
                while len(conn.tasks) >= self.limits.queued:
                    # Replies wait on a reader that does not read them: so does this one.
                    conn.answered.clear()
                    await conn.answered.wait()
                try:
                    line = await self._read_line(reader)
                except ConnectionError:
                    break
                if line is None:
                    break
                task = asyncio.get_running_loop().create_task(self._one(line, conn))
                self._tasks.add(task)
                conn.tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                task.add_done_callback(conn.done)
        finally:
            self._writers.discard(writer)
            writer.close()
            # Its requests still in flight have nobody to answer to (a wait whose caller
            # was killed): they end here, not when they would have.
            for task in list(conn.tasks):
                task.cancel()
            if self._on_disconnect is not None and not self._closing:
                try:
                    self._on_disconnect(conn.client)
                except Exception:
                    log.exception("control: handling a closed connection failed")

    async def _refuse_connection(self, writer: asyncio.StreamWriter) -> None:
        reply = _error_reply(
            None,
            ResourceExhausted(
                f"this control socket already serves {self.limits.connections} connections; try again later"
            ),
        )
        with contextlib.suppress(ConnectionError):
            writer.write(reply)
            await asyncio.wait_for(writer.drain(), 1.0)
        with contextlib.suppress(Exception):
            writer.close()

    async def _read_line(self, reader: asyncio.StreamReader) -> bytes | _Refused | None:
        """The next line (its bytes counted in :attr:`held_bytes` until its request is
        answered), a refusal (the line was read past, not kept), or None at the end."""
        parts: list[bytes] = []
        size = 0
        refused: SclateError | None = None
        lim = self.limits
        head = b""
        while True:
            ended = True
            try:
                chunk = await reader.readuntil(b"\n")
            except asyncio.LimitOverrunError as exc:
                chunk = await reader.readexactly(exc.consumed)
                ended = False
            except asyncio.IncompleteReadError:
                self._held -= size  # the connection ended mid-line: nothing to answer
                return None
            if not head:
                head = chunk[:64]
            if refused is None:
                if size + len(chunk) > lim.line_bytes:
                    refused = InvalidArgument(f"request line longer than {lim.line_bytes} bytes: refused", field="line")
                elif self._held + len(chunk) > lim.held_bytes:
                    refused = ResourceExhausted(
                        f"the control socket holds {self._held} bytes of requests already "
                        f"(at most {lim.held_bytes}): send it again later"
                    )
                else:
                    parts.append(chunk)
                    size += len(chunk)
                    self._held += len(chunk)
                if refused is not None:
                    parts.clear()
                    self._held -= size
                    size = 0
            if ended:
                if refused is not None:
                    return _Refused(refused, head)
                return b"".join(parts)

    async def _one(self, line: bytes | _Refused, conn: _Connection) -> None:
        held = len(line) if isinstance(line, bytes) else 0
        try:
            reply = await self._answer(line)
        finally:
            self._held -= held
        async with conn.lock:
            with contextlib.suppress(ConnectionError):
                conn.writer.write(reply)
                await conn.writer.drain()

    async def _answer(self, line: bytes | _Refused) -> bytes:
        if isinstance(line, _Refused):
            m = _LEADING_ID.match(line.head)
            return _error_reply(int(m.group(1)) if m else None, line.error)
        try:
            req = json.loads(line)
        except RecursionError:
            return _error_reply(None, InvalidArgument("not JSON: nested too deeply"))
        except ValueError as exc:  # not JSON, not UTF-8, or an integer past Python's digit limit
            return _error_reply(None, InvalidArgument(f"not JSON: {exc}"))
        req_id: Any = None
        try:
            if not isinstance(req, dict):
                raise InvalidArgument("a request must be a JSON object")
            req_id = req.get("id")
            if not _valid_id(req_id):
                req_id = None
                raise InvalidArgument(
                    f"id must be an integer or a string of at most {MAX_ID_CHARS} characters", field="id"
                )
            kind = req.get("type")
            handler = self._handlers.get(kind) if isinstance(kind, str) else None
            if handler is None:
                raise InvalidArgument(f"unknown request type {_short(kind)}", field="type")
            client = _CONNECTION.get()
            if client is not None:
                client.kinds.add(str(kind))
            if self._handling >= self.limits.in_flight:
                raise ResourceExhausted(
                    f"this control socket has {self.limits.in_flight} requests in progress already; "
                    "wait for their replies"
                )
            self._handling += 1
            try:
                result = await handler(req)
            finally:
                self._handling -= 1
            return (json.dumps({"id": req_id, "ok": True, **result}) + "\n").encode()
        except SclateError as exc:
            return _error_reply(req_id, exc)
        except Exception as exc:  # a handler bug must not kill the connection
            log.exception("control request failed")
            return _error_reply(req_id, SclateError(f"internal error: {exc}", reason="INTERNAL"))


def _valid_id(value: Any) -> bool:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return True
    return isinstance(value, str) and len(value) <= MAX_ID_CHARS


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _error_reply(req_id: Any, exc: SclateError) -> bytes:
    return (json.dumps({"id": req_id, "ok": False, "error": exc.message, "reason": exc.reason}) + "\n").encode()
