"""The control socket's server against what a hostile sandbox sends: every bad request
gets a clean refusal, nothing it sends is buffered without bound, and the socket
serves on. Real Unix sockets, no container."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sclated.sandbox import ControlLimits, ControlServer


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def reply(self, timeout_s: float = 5.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout_s):
            line = await self.reader.readline()
        assert line, "the server closed the connection"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        self.writer.close()


class Served:
    def __init__(self, path: Path, server: ControlServer, gate: asyncio.Event) -> None:
        self.path = path
        self.server = server
        self.gate = gate

    async def connect(self) -> Conn:
        return Conn(*await asyncio.open_unix_connection(str(self.path), limit=2**26))


async def _serve(tmp_path: Path, limits: ControlLimits | None = None) -> Served:
    gate = asyncio.Event()

    async def hello(msg: Mapping[str, Any]) -> dict[str, Any]:
        return {"run": "r1"}

    async def block(msg: Mapping[str, Any]) -> dict[str, Any]:
        await gate.wait()
        return {"released": True}

    server = ControlServer(tmp_path / "s.sock", {"hello": hello, "block": block}, limits)
    await server.start()
    return Served(tmp_path / "s.sock", server, gate)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    s = await _serve(tmp_path)
    try:
        yield s
    finally:
        s.gate.set()
        await s.server.close()


@pytest.fixture
async def small(tmp_path: Path) -> AsyncIterator[Served]:
    limits = ControlLimits(line_bytes=256 * 1024, held_bytes=512 * 1024, connections=4, in_flight=3, queued=8)
    s = await _serve(tmp_path, limits)
    try:
        yield s
    finally:
        s.gate.set()
        await s.server.close()


def line(obj: Any) -> bytes:
    return (json.dumps(obj) + "\n").encode()


async def test_an_over_long_line_is_refused_with_its_id_and_the_connection_serves_on(small: Served) -> None:
    # Before: the server dropped the connection without a word, so the proxy's
    # record was never refused and was sent again every two seconds, forever.
    c = await small.connect()
    await c.send(
        b'{"id": 42, "type": "record", "record": "' + b"x" * 600_000 + b'"}\n' + line({"id": 43, "type": "hello"})
    )
    refused = await c.reply()
    assert refused["id"] == 42 and not refused["ok"] and refused["reason"] == "INVALID_ARGUMENT"
    assert "longer than 262144 bytes" in refused["error"]
    assert await c.reply() == {"id": 43, "ok": True, "run": "r1"}
    assert small.server.held_bytes == 0
    c.close()


@pytest.mark.parametrize(
    "data",
    [
        b'{"id": 1, "type": "\xff\xfe"}\n',  # not UTF-8
        b"[" * 100_000 + b"]" * 100_000 + b"\n",  # nested past the recursion limit
        b'{"id": 1, "type": "hello", "n": ' + b"9" * 5000 + b"}\n",  # past Python's integer digit limit
        b"\x89PNG\r\x1a\x00\n",
    ],
    ids=["not-utf8", "deep-nesting", "huge-integer", "binary"],
)
async def test_undecodable_lines_are_refused_as_bad_input_without_a_traceback(
    served: Served, data: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: each of these escaped the JSON error handler and was answered
    # "internal error" (reason INTERNAL) with a traceback in the daemon's log.
    c = await served.connect()
    with caplog.at_level(logging.ERROR, logger="sclated.control"):
        await c.send(data)
        reply = await c.reply()
    assert reply["ok"] is False and reply["reason"] == "INVALID_ARGUMENT" and reply["error"].startswith("not JSON")
    assert not [r for r in caplog.records if r.exc_info]
    await c.send(line({"id": 2, "type": "hello"}))
    assert (await c.reply())["ok"]
    c.close()


@pytest.mark.parametrize("bad_id", [{"a": 1}, [1], True, 1.5, "x" * 200])
async def test_an_id_that_is_not_an_integer_or_short_string_is_refused_and_not_echoed(
    served: Served, bad_id: Any
) -> None:
    c = await served.connect()
    await c.send(line({"id": bad_id, "type": "hello"}))
    reply = await c.reply()
    assert reply["id"] is None and not reply["ok"] and reply["reason"] == "INVALID_ARGUMENT"
    c.close()


async def test_unknown_and_non_string_types_are_refused_with_the_request_s_id(served: Served) -> None:
    c = await served.connect()
    for i, kind in enumerate(["nope", 3, ["hello"], None]):
        await c.send(line({"id": i, "type": kind}))
        reply = await c.reply()
        assert reply["id"] == i and not reply["ok"] and reply["reason"] == "INVALID_ARGUMENT"
    c.close()


async def test_connections_past_the_limit_are_refused_and_the_socket_serves_on(small: Served) -> None:
    held = [await small.connect() for _ in range(4)]
    extra = await small.connect()
    refused = await extra.reply()
    assert refused["reason"] == "RESOURCE_EXHAUSTED" and "4 connections" in refused["error"]
    assert await extra.reader.read() == b""  # and closed
    for c in held:
        c.close()
    await asyncio.sleep(0.05)
    c = await small.connect()
    await c.send(line({"id": 1, "type": "hello"}))
    assert (await c.reply())["ok"]
    c.close()


async def test_requests_past_the_in_flight_limit_are_refused_at_once(small: Served) -> None:
    # Before: a flood of `wait`s (each blocking) held a task and its line each, without bound.
    c = await small.connect()
    await c.send(b"".join(line({"id": i, "type": "block"}) for i in range(5)))
    refused = [await c.reply(), await c.reply()]
    assert {r["id"] for r in refused} == {3, 4} and all(r["reason"] == "RESOURCE_EXHAUSTED" for r in refused)
    other = await small.connect()  # the limit is the socket's, whatever the connection
    await other.send(line({"id": 9, "type": "block"}))
    assert (await other.reply())["reason"] == "RESOURCE_EXHAUSTED"
    small.gate.set()
    assert sorted([(await c.reply())["id"] for _ in range(3)]) == [0, 1, 2]
    c.close()
    other.close()


async def test_unfinished_lines_of_all_connections_hold_at_most_held_bytes(small: Served) -> None:
    # Before: every connection could hold 16 MiB (and twice that in its reader's
    # buffer) of a line that never ends: 40 connections grew the daemon by 600 MB.
    conns = [await small.connect() for _ in range(3)]
    for c in conns:
        await c.send(b'{"id": 7, "type": "hello", "pad": "' + b"p" * 200_000)
    await asyncio.sleep(0.2)
    assert small.server.held_bytes <= small.server.limits.held_bytes
    for c in conns:
        await c.send(b'"}\n')
    replies = [await c.reply() for c in conns]
    assert sorted(r["ok"] for r in replies) == [False, True, True]
    (refused,) = [r for r in replies if not r["ok"]]
    assert refused["reason"] == "RESOURCE_EXHAUSTED" and refused["id"] == 7
    await asyncio.sleep(0.05)
    assert small.server.held_bytes == 0
    for c in conns:
        c.close()


async def test_a_connection_is_not_read_past_its_queue_of_unanswered_requests(tmp_path: Path) -> None:
    s = await _serve(tmp_path, ControlLimits(in_flight=100, queued=4))
    try:
        c = await s.connect()
        await c.send(b"".join(line({"id": i, "type": "block"}) for i in range(6)))
        await asyncio.sleep(0.2)
        assert s.server._handling == 4  # the last two are not read yet
        s.gate.set()
        assert sorted([(await c.reply())["id"] for _ in range(6)]) == list(range(6))
        c.close()
    finally:
        s.gate.set()
        await s.server.close()
