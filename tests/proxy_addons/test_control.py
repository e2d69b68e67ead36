"""The control-socket client: one connection, replies matched by id, errors
raised, and a reconnect after the daemon comes back."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from proxy_addons._control import ControlClient, ControlError


class Server:
    """Answers each request in reverse order of arrival, two at a time, to prove replies are matched by id."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[dict[str, object]] = []
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._handle, str(self.path))

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for w in self._writers:
            w.close()
        await self._server.wait_closed()
        self.path.unlink(missing_ok=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        held: list[dict[str, object]] = []
        while line := await reader.readline():
            msg = json.loads(line)
            self.lines.append(msg)
            held.append(msg)
            if len(held) < 2 and msg["type"] != "solo":
                continue
            for m in reversed(held):
                ok = m["type"] != "bad"
                reply = {"id": m["id"], "ok": ok, "echo": m.get("record")}
                if not ok:
                    reply.update(error="no such thing", reason="INVALID_RECORD")
                writer.write((json.dumps(reply) + "\n").encode())
            held.clear()
            await writer.drain()
        writer.close()


async def test_requests_multiplexed_errors_and_reconnect(short_dir: Path) -> None:
    server = Server(short_dir / "c.sock")
    await server.start()
    client = ControlClient(str(server.path))
    try:
        a, b = await asyncio.gather(
            client.request("first", {"n": 1}, 2.0),
            client.request("second", {"n": 2}, 2.0, raw='"record": {"x": [1]}'),
        )
        assert (a["id"], b["id"]) == (1, 2) and b["echo"] == {"x": [1]}
        assert server.lines[1] == {"id": 2, "type": "second", "n": 2, "record": {"x": [1]}}
        with pytest.raises(ControlError) as e:
            await asyncio.gather(client.request("bad", {}, 2.0), client.request("other", {}, 2.0))
        assert e.value.reason == "INVALID_RECORD" and e.value.error == "no such thing"

        await server.stop()
        with pytest.raises((OSError, ConnectionError)):
            await client.request("solo", {}, 2.0)
        await server.start()
        assert (await client.request("solo", {}, 2.0))["ok"] is True
        assert server.connections == 2
    finally:
        await client.close()
        await server.stop()


async def test_no_daemon_is_an_error_within_the_wait(short_dir: Path) -> None:
    client = ControlClient(str(short_dir / "absent.sock"))
    with pytest.raises((OSError, ConnectionError)):
        await client.request("solo", {}, 0.5)
    await client.close()
