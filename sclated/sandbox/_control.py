"""The host side of a sandbox's control socket (``/run/sclate/sclate.sock``).

Newline-delimited JSON, one request per line ``{"id", "type", ...}``, one
reply per request ``{"id", "ok": true, ...}`` or ``{"id", "ok": false,
"error", "reason"}``. Requests on one connection are served concurrently (a
``wait`` may block for a long time while the same connection reports calls).

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
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from sclated.errors import InvalidArgument, SclateError

__all__ = ["ControlConnection", "ControlServer", "Handler", "current_connection"]

log = logging.getLogger("sclated.control")

Handler = Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]
_MAX_LINE = 16 * 1024 * 1024  # a call record with long bodies


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


class ControlServer:
    def __init__(
        self,
        path: Path,
        handlers: Mapping[str, Handler],
        *,
        on_disconnect: Callable[[ControlConnection], None] | None = None,
    ) -> None:
        self.path = path
        self._handlers = dict(handlers)
        self._on_disconnect = on_disconnect
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._closing = False

    async def start(self) -> None:
        await asyncio.to_thread(self._unlink)
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=_MAX_LINE)
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

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        lock = asyncio.Lock()
        conn = ControlConnection()
        _CONNECTION.set(conn)  # this connection's request tasks copy the context: they see it
        pending: set[asyncio.Task[None]] = set()
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, ConnectionError):
                    break  # an over-long line or a reset: drop this connection only
                if not line:
                    break
                task = asyncio.get_running_loop().create_task(self._one(line, writer, lock))
                for tasks in (self._tasks, pending):
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
        finally:
            self._writers.discard(writer)
            writer.close()
            # Its requests still in flight have nobody to answer to (a wait whose caller
            # was killed): they end here, not when they would have.
            for task in list(pending):
                task.cancel()
            if self._on_disconnect is not None and not self._closing:
                try:
                    self._on_disconnect(conn)
                except Exception:
                    log.exception("control: handling a closed connection failed")

    async def _one(self, line: bytes, writer: asyncio.StreamWriter, lock: asyncio.Lock) -> None:
        req_id: Any = None
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise InvalidArgument("a request must be a JSON object")
            req_id = req.get("id")
            kind = req.get("type")
            conn = _CONNECTION.get()
            if conn is not None and isinstance(kind, str) and kind in self._handlers:
                conn.kinds.add(kind)
            handler = self._handlers.get(str(kind))
            if handler is None:
                raise InvalidArgument(f"unknown request type {kind!r}", field="type")
            reply: dict[str, Any] = {"id": req_id, "ok": True, **(await handler(req))}
        except SclateError as exc:
            reply = {"id": req_id, "ok": False, "error": exc.message, "reason": exc.reason}
        except json.JSONDecodeError as exc:
            reply = {"id": None, "ok": False, "error": f"not JSON: {exc}", "reason": "INVALID_ARGUMENT"}
        except Exception as exc:  # a handler bug must not kill the connection
            log.exception("control request failed")
            reply = {"id": req_id, "ok": False, "error": f"internal error: {exc}", "reason": "INTERNAL"}
        data = (json.dumps(reply) + "\n").encode()
        async with lock:
            with contextlib.suppress(ConnectionError):
                writer.write(data)
                await writer.drain()
