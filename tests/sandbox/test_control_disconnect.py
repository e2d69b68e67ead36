"""The control socket's server: a client that leaves mid-request (found by `sclated bench
faults`: a `sclate-wait` killed mid-wait left its wait running on the host, holding the
turn suspended; a dead proxy's calls kept their leases) has what it waited for called
off, and the server hears which client left."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sclated.sandbox._control import ControlConnection, ControlServer, current_connection


@pytest.fixture
async def socket_path() -> AsyncIterator[Path]:
    with tempfile.TemporaryDirectory(prefix="sc-") as tmp:  # short: unix socket paths are limited
        yield Path(tmp) / "s.sock"


async def test_a_client_that_leaves_mid_wait_has_its_wait_called_off(socket_path: Path) -> None:
    waiting = asyncio.Event()
    called_off = asyncio.Event()
    left: list[ControlConnection] = []
    seen: list[ControlConnection | None] = []

    async def wait(msg: Mapping[str, Any]) -> dict[str, Any]:
        seen.append(current_connection())
        waiting.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            called_off.set()
            raise
        return {"woke_ns": 0}

    async def hello(msg: Mapping[str, Any]) -> dict[str, Any]:
        seen.append(current_connection())
        return {"run": "r"}

    server = ControlServer(socket_path, {"wait": wait, "hello": hello}, on_disconnect=left.append)
    await server.start()
    try:
        # Another client on its own connection is served and told apart.
        other_reader, other_writer = await asyncio.open_unix_connection(str(socket_path))
        other_writer.write(json.dumps({"id": 1, "type": "hello"}).encode() + b"\n")
        assert json.loads(await other_reader.readline())["ok"]

        _, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(json.dumps({"id": 7, "type": "wait", "for_ns": 1}).encode() + b"\n")
        await asyncio.wait_for(waiting.wait(), 5)
        writer.close()  # the waiter is killed: its socket closes with the wait pending
        await asyncio.wait_for(called_off.wait(), 5)
        async with asyncio.timeout(5):
            while not left:
                await asyncio.sleep(0.01)
        assert left[0] is seen[1] and left[0].kinds == {"wait"}
        assert seen[0] is not seen[1] and seen[0] is not None and seen[0].kinds == {"hello"}

        # The other client is untouched and still served.
        other_writer.write(json.dumps({"id": 2, "type": "hello"}).encode() + b"\n")
        assert json.loads(await other_reader.readline())["id"] == 2
        other_writer.close()
    finally:
        await server.close()


async def test_closing_the_server_is_not_reported_as_clients_leaving(socket_path: Path) -> None:
    left: list[ControlConnection] = []

    async def hello(msg: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    server = ControlServer(socket_path, {"hello": hello}, on_disconnect=left.append)
    await server.start()
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(b'{"id": 1, "type": "hello"}\n')
    await reader.readline()
    await server.close()
    await asyncio.sleep(0.05)
    assert left == []
    writer.close()
