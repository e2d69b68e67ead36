"""The host side of a sandbox's control socket (``/run/sclate/sclate.sock``).

Newline-delimited JSON, one request per line ``{"id", "type", ...}``, one
reply per request ``{"id", "ok": true, ...}`` or ``{"id", "ok": false,
"error", "reason"}``. Requests on one connection are served concurrently (a
``wait`` may block for a long time while the same connection reports calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from sclated.errors import InvalidArgument, SclateError

__all__ = ["ControlServer", "Handler"]

log = logging.getLogger("sclated.control")

Handler = Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]
_MAX_LINE = 16 * 1024 * 1024  # a call record with long bodies


class ControlServer:
    def __init__(self, path: Path, handlers: Mapping[str, Handler]) -> None:
        self.path = path
        self._handlers = dict(handlers)
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

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
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, ConnectionError):
                    break  # an over-long line or a reset: drop this connection only
                if not line:
                    break
                task = asyncio.get_running_loop().create_task(self._one(line, writer, lock))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _one(self, line: bytes, writer: asyncio.StreamWriter, lock: asyncio.Lock) -> None:
        req_id: Any = None
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise InvalidArgument("a request must be a JSON object")
            req_id = req.get("id")
            kind = req.get("type")
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
