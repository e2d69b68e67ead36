"""`are` (images/sandbox/are), the Gaia2 apps' command inside a sandbox, against the
daemon's real control socket server with a world handler test double."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from sclated.runtime._images import images_dir
from sclated.sandbox._control import ControlServer

SCRIPT = images_dir() / "sandbox" / "are"

TOOLS = [
    {
        "name": "EmailClientV2__send_email",
        "app": "EmailClientV2",
        "function": "send_email",
        "description": "Sends an email.\nMore text.",
        "write": True,
        "args": [
            {"name": "recipients", "type": "list[str] | None", "description": "", "required": False, "default": None},
            {"name": "subject", "type": "str", "description": "", "required": True, "default": None},
        ],
        "returns": "str",
    }
]


class WorldDouble:
    """Test double for the run's world handler: lists TOOLS, answers calls, keeps requests."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        self.requests.append(dict(msg))
        if msg["op"] == "tools":
            return {"tools": TOOLS}
        if msg["function"] == "send_email":
            return {"result": "email-1", "error": None, "sim_ns": 1}
        return {"result": None, "error": f"EmailClientV2 has no tool {msg['function']!r}", "sim_ns": 1}


async def _are(sock: Path, *argv: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SCRIPT),
        "--socket",
        str(sock),
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def served(tmp_path: Path) -> Any:
    world = WorldDouble()
    server = ControlServer(tmp_path / "sclate.sock", {"world": world})
    await server.start()
    try:
        yield tmp_path / "sclate.sock", world
    finally:
        await server.close()


async def test_tools_lists_signatures(served: Any) -> None:
    sock, _ = served
    code, out, _ = await _are(sock, "tools")
    assert code == 0
    signature = "EmailClientV2 send_email(recipients: list[str] | None = null, subject: str)"
    assert out.strip() == f"{signature}  # Sends an email."
    code, out, _ = await _are(sock, "tools", "EmailClientV2", "--json")
    assert code == 0 and json.loads(out) == TOOLS
    code, _, err = await _are(sock, "tools", "Calendar")
    assert code == 1 and "no app 'Calendar'" in err


async def test_call_sends_json_values_and_text(served: Any) -> None:
    sock, world = served
    code, out, _ = await _are(
        sock, "call", "EmailClientV2", "send_email", 'recipients=["bob@example.com"]', "subject=Q3 budget", "n=3"
    )
    assert code == 0 and out.strip() == "email-1"
    assert world.requests[-1] == {
        "id": 1,
        "type": "world",
        "op": "call",
        "app": "EmailClientV2",
        "function": "send_email",
        "args": {"recipients": ["bob@example.com"], "subject": "Q3 budget", "n": 3},
    }
    code, _, _ = await _are(sock, "call", "EmailClientV2", "send_email", "--args", '{"subject": "x"}')
    assert code == 0 and world.requests[-1]["args"] == {"subject": "x"}


async def test_a_tool_error_is_exit_1_and_bad_arguments_exit_2(served: Any) -> None:
    sock, _ = served
    code, _, err = await _are(sock, "call", "EmailClientV2", "send_mail")
    assert code == 1 and "has no tool 'send_mail'" in err
    code, _, err = await _are(sock, "call", "EmailClientV2", "send_email", "subject")
    assert code == 2 and "not key=value" in err


async def test_without_a_daemon_it_says_so(tmp_path: Path) -> None:
    code, _, err = await _are(tmp_path / "missing.sock", "tools")
    assert code == 3 and "only works inside a sandbox" in err


MCP_SCRIPT = images_dir() / "sandbox" / "are-mcp"


async def _mcp(sock: Path, *messages: dict[str, Any]) -> list[dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(MCP_SCRIPT),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={"SCLATE_SOCKET": str(sock), "PATH": "/usr/bin:/bin"},
    )
    data = "".join(json.dumps(m) + "\n" for m in messages).encode() + b"not json\n"
    out, _ = await proc.communicate(data)
    return [json.loads(line) for line in out.decode().splitlines()]


async def test_the_mcp_server_lists_and_calls_the_worlds_tools(served: Any) -> None:
    sock, world = served
    init, listed, called, refused, unknown, bad = await _mcp(
        sock,
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "EmailClientV2__send_email", "arguments": {"subject": "hi"}},
        },
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "EmailClientV2__send_mail"}},
        {"jsonrpc": "2.0", "id": 5, "method": "resources/list"},
    )
    assert init["result"]["capabilities"] == {"tools": {"listChanged": False}}
    (tool,) = listed["result"]["tools"]
    assert tool["name"] == "EmailClientV2__send_email"
    assert tool["inputSchema"] == {
        "type": "object",
        "properties": {
            "recipients": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
            "subject": {"type": "string"},
        },
        "required": ["subject"],
    }
    assert called["result"] == {"content": [{"type": "text", "text": "email-1"}], "isError": False}
    assert world.requests[-2]["args"] == {"subject": "hi"}
    assert refused["result"]["isError"] is True and "send_mail" in refused["result"]["content"][0]["text"]
    assert unknown["error"]["code"] == -32601
    assert bad["error"]["code"] == -32700
