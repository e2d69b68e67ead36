"""A real Unix-socket control server for tests, speaking the documented
newline-delimited JSON protocol and dispatching to a real CaptureSink."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from sclated.capture import MAX_CONTROL_LINE_BYTES, CaptureSink, MemoryRecordStore
from sclated.errors import SclateError


class FakeLeases:
    """Records acquire/release; stands in for sclated.clock.LeaseTable."""

    def __init__(self) -> None:
        self.acquired: list[tuple[str, str, int | None]] = []
        self.released: list[str] = []
        self.held: set[str] = set()

    def acquire(self, name: str, holder: str, *, ttl_ns: int | None = None) -> str:
        self.acquired.append((name, holder, ttl_ns))
        self.held.add(name)
        return name

    def release(self, lease: Any) -> bool:
        self.released.append(lease)
        was = lease in self.held
        self.held.discard(lease)
        return was


class FakeDaemon:
    def __init__(self, path: Path, run: str) -> None:
        self.path = path
        self.run = run
        self.store = MemoryRecordStore()
        self.leases = FakeLeases()
        self.sink = CaptureSink(self.store, self.leases)
        self.messages: list[dict[str, Any]] = []
        self.stored_flags: list[bool] = []
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        # As long a line as the daemon reads (a record with long bodies).
        self._server = await asyncio.start_unix_server(self._handle, str(self.path), limit=MAX_CONTROL_LINE_BYTES)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._conns):
                w.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        try:
            while line := await reader.readline():
                msg = json.loads(line)
                self.messages.append(msg)
                reply: dict[str, Any] = {"id": msg["id"]}
                try:
                    t = msg["type"]
                    if t == "hello":
                        out: dict[str, Any] = {"run": self.run}
                    elif t == "call_start":
                        out = await self.sink.on_call_start(self.run, msg)
                    elif t == "call_end":
                        out = await self.sink.on_call_end(self.run, msg)
                    elif t == "record":
                        out = await self.sink.on_record(self.run, msg)
                        self.stored_flags.append(out["stored"])
                    else:
                        raise SclateError(f"unknown type {t}", reason="UNKNOWN_TYPE")
                    reply.update(ok=True, **out)
                except SclateError as e:
                    reply.update(ok=False, error=e.message, reason=e.reason)
                writer.write((json.dumps(reply) + "\n").encode())
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._conns.discard(writer)
            writer.close()

    def of_type(self, t: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == t]

    async def records(self) -> list[Any]:
        return await self.store.list(self.run)
