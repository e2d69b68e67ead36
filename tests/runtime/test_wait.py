"""sclate-wait (images/sandbox/sclate-wait) against a real Unix socket server."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from sclated.runtime import SandboxManager
from sclated.runtime._images import images_dir

from .conftest import SIM_START_NS

SCRIPT = images_dir() / "sandbox" / "sclate-wait"
_NS = 1_000_000_000
Reply = Callable[[dict[str, Any]], dict[str, Any] | None]


class FakeDaemon:
    """Speaks the control-socket protocol: newline-delimited JSON, replies by id."""

    def __init__(self, path: Path, reply: Reply) -> None:
        self.path = path
        self.reply = reply
        self.requests: list[dict[str, Any]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = await reader.readline()
        request = json.loads(line)
        self.requests.append(request)
        answer = self.reply(request)
        if answer is not None:
            await asyncio.sleep(0.2)  # the wake event fires "later"
            writer.write(b'{"id": 99, "ok": true}\n')  # someone else's reply: ignored
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def daemon(path: Path, reply: Reply) -> AsyncIterator[FakeDaemon]:
    fake = FakeDaemon(path, reply)
    server = await asyncio.start_unix_server(fake.handle, path=str(path))
    os.chmod(path, 0o666)
    try:
        yield fake
    finally:
        server.close()
        await server.wait_closed()


def woke(request: dict[str, Any]) -> dict[str, Any]:
    return {"id": request["id"], "ok": True, "woke_ns": SIM_START_NS + 7200 * _NS}


async def run_wait(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.parametrize(
    ("arg", "field", "value"),
    [
        (["--for", "90s"], "for_ns", 90 * _NS),
        (["--for", "15m"], "for_ns", 900 * _NS),
        (["--for", "2h"], "for_ns", 7200 * _NS),
        (["--for", "3d"], "for_ns", 3 * 86400 * _NS),
        (["--for", "1h30m"], "for_ns", 5400 * _NS),
        (["--for", "0.5d"], "for_ns", 43200 * _NS),
        (["--until", "2031-01-01T02:00:00Z"], "until_ns", SIM_START_NS + 7200 * _NS),
        (["--until", "2031-01-01T02:00:00"], "until_ns", SIM_START_NS + 7200 * _NS),
        (["--until", "2031-01-01T03:00:00+01:00"], "until_ns", SIM_START_NS + 7200 * _NS),
    ],
)
async def test_wait_sends_request_and_blocks_until_reply(
    short_dir: Path, arg: list[str], field: str, value: int
) -> None:
    sock = short_dir / "sclate.sock"
    async with daemon(sock, woke) as fake:
        code, out, err = await run_wait(*arg, "--socket", str(sock))
    assert (code, err) == (0, "")
    assert fake.requests == [{"id": 1, "type": "wait", field: value}]
    stamp = dt.datetime.fromtimestamp(SIM_START_NS / _NS + 7200, dt.UTC).isoformat()
    assert out.strip() == f"woke at {stamp}"


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--for", "90"], "bad duration"),
        (["--for", "soon"], "bad duration"),
        (["--for", "0s"], "greater than zero"),
        (["--until", "next tuesday"], "bad time"),
    ],
)
async def test_wait_bad_arguments(short_dir: Path, args: list[str], match: str) -> None:
    code, out, err = await run_wait(*args, "--socket", str(short_dir / "x.sock"))
    assert code == 2 and match in err and out == ""
    code, _, err = await run_wait("--for", "1m", "--until", "2030-01-01T00:00:00Z")
    assert code == 2 and "not allowed with" in err


async def test_wait_without_daemon(short_dir: Path) -> None:
    code, _, err = await run_wait("--for", "1m", "--socket", str(short_dir / "none.sock"))
    assert code == 3
    assert "cannot reach the sclate daemon" in err and "inside a sandbox" in err


async def test_wait_refused_or_dropped(short_dir: Path) -> None:
    sock = short_dir / "sclate.sock"

    def refuse(req: dict[str, Any]) -> dict[str, Any]:
        return {"id": req["id"], "ok": False, "error": "run is stopping", "reason": "STOPPING"}

    async with daemon(sock, refuse):
        code, _, err = await run_wait("--for", "1m", "--socket", str(sock))
    assert code == 1 and "run is stopping (STOPPING)" in err
    async with daemon(sock, lambda _req: None):
        code, _, err = await run_wait("--for", "1m", "--socket", str(sock))
    assert code == 4 and "closed the connection" in err


@pytest.mark.docker
async def test_wait_inside_a_sandbox(
    manager: SandboxManager, sandbox_image: str, short_dir: Path
) -> None:
    spec = manager.spec_for(image=sandbox_image, run="wait", tenant="acme", run_dir=short_dir)
    sb = await manager.create(spec, short_dir, sim_ns=SIM_START_NS, probe=False)
    async with daemon(sb.paths.control_socket, woke) as fake:
        # As an unprivileged user too: the socket must be reachable by the agent.
        result = await sb.exec(["sclate-wait", "--for", "2h"], user="nobody", timeout_s=30)
    assert result.ok, result
    assert fake.requests == [{"id": 1, "type": "wait", "for_ns": 7200 * _NS}]
    assert result.text.startswith("woke at 2031-01-01T02:00:00")
