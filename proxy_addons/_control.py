"""The client of the daemon's control socket: newline-delimited JSON requests
(``call_start``, ``call_end``, ``record``) over one Unix connection."""

import asyncio
import contextlib
import itertools
import json
from typing import Any

DEFAULT_SOCKET = "/run/sclate/sclate.sock"


class ControlError(Exception):
    """The daemon answered ``ok: false``; ``reason`` is its machine-readable cause."""

    def __init__(self, error: str, reason: str):
        super().__init__(f"{reason}: {error}")
        self.error = error
        self.reason = reason


class ControlClient:
    """One persistent connection to the daemon's control socket.

    Requests are multiplexed by id; a reader task resolves replies. Any
    connection failure fails the pending requests and the next request
    reconnects, so a daemon restart costs one failed send, not a dead addon.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    async def _ensure(self) -> asyncio.StreamWriter:
        async with self._lock:
            if self._writer is None or self._writer.is_closing():
                reader, writer = await asyncio.open_unix_connection(self.path, limit=2**26)
                self._reader, self._writer = reader, writer
                self._reader_task = asyncio.create_task(self._read_loop(reader))
            return self._writer

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(msg, dict):
                    continue
                fut = self._pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except (OSError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            self._drop(ConnectionError("control socket closed"))

    def _drop(self, exc: Exception) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)

    async def request(self, type_: str, payload: dict[str, Any], wait_s: float, *, raw: str = "") -> dict[str, Any]:
        """Send one request and wait for its reply; raises ControlError on
        ``ok: false`` and OSError/ConnectionError/TimeoutError when the daemon
        is away. ``raw``: members already serialised (``"record": {...}``),
        appended as they are."""
        async with asyncio.timeout(wait_s):
            writer = await self._ensure()
            rid = next(self._ids)
            fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            self._pending[rid] = fut
            try:
                line = json.dumps({"id": rid, "type": type_, **payload})
                if raw:
                    line = f"{line[:-1]}, {raw}}}"
                writer.write((line + "\n").encode())
                await writer.drain()
                reply = await fut
            finally:
                self._pending.pop(rid, None)
        if not reply.get("ok"):
            raise ControlError(str(reply.get("error", "")), str(reply.get("reason", "UNKNOWN")))
        return reply

    async def close(self) -> None:
        self._drop(ConnectionError("control client closed"))
        task, self._reader_task = self._reader_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
