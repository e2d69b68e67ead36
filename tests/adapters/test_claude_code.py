"""The Claude Code harness's pieces in memory and as real subprocesses.

``bridge.py`` runs here against a test double of the ``claude`` program
(``FAKE_CLAUDE``: records its argv and environment, prints stream-json events
like ``claude -p --output-format stream-json --verbose`` does and writes the
session's transcript). The real Claude Code runs in tests/e2e/test_claude_code.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from adapters import ExecOutput, LineChannel, ProxyEndpoints
from adapters.claude_code import DECLARATION, DEFAULT_TOOLS, ClaudeCodeHarness
from adapters.claude_code.image import BRIDGE_PY, CLAUDE_CODE_VERSION, IMAGE_NAME
from adapters.harnesses import HARNESSES
from adapters.reference_harness import SubprocessTransport
from sclated.errors import InvalidArgument
from sclated.scheduler import DeliverPrompt, EventSpec

IMAGES = Path(__file__).resolve().parents[2] / "images"

FAKE_CLAUDE = r'''#!/usr/bin/env python3
"""Test double of the claude CLI (Claude Code), not the program itself.

Only `claude --version` and
`claude -p --output-format stream-json --verbose ... (--session-id ID | --resume ID) -- TEXT`:
records its argv and environment to $CLAUDE_CONFIG_DIR/fake-argv.jsonl, prints
stream-json events and keeps the session's transcript in
$CLAUDE_CONFIG_DIR/projects/-workspace/ID.jsonl, refusing (as Claude Code does)
to resume a session without one or to start one that exists. Special prompts:
"fail" (an error result, exit 1), "nofile" (exit 1 before any transcript or
result), "apierror" (a "success" result marked is_error, exit 0), "sleep" (a
child that sleeps 60 s, then itself 30 s) and "background" (leaves a child
running in its process group, then answers).
"""
import json, os, sys, pathlib, subprocess, time
home = pathlib.Path(os.environ["CLAUDE_CONFIG_DIR"])
args = sys.argv[1:]
if args == ["--version"]:
    print("2.1.332 (Claude Code)")
    sys.exit(0)
ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
       "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL",
       "CLAUDE_CODE_SUBAGENT_MODEL", "CLAUDE_CODE_MAX_OUTPUT_TOKENS")
with (home / "fake-argv.jsonl").open("a") as f:
    f.write(json.dumps({
        "argv": args,
        "env": {k: os.environ.get(k) for k in ENV},
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "stdin_devnull": os.path.samestat(os.fstat(0), os.stat(os.devnull)),
        "own_group": os.getpgid(0) == os.getpid(),
    }) + "\n")
sep = args.index("--")
opts, rest = args[:sep], args[sep + 1:]
assert len(rest) == 1, rest
text = rest[0]
resume = "--resume" in opts
sid = opts[opts.index("--resume" if resume else "--session-id") + 1]
transcript = home / "projects" / "-workspace" / (sid + ".jsonl")
if resume and not transcript.exists():
    print("No conversation found with session ID: " + sid, file=sys.stderr)
    sys.exit(1)
if not resume and transcript.exists():
    print("Error: Session ID " + sid + " is already in use.", file=sys.stderr)
    sys.exit(1)
def say(event):
    print(json.dumps(event), flush=True)
say({"type": "system", "subtype": "init", "session_id": sid, "cwd": os.getcwd(),
     "tools": opts[opts.index("--tools") + 1].split(","), "model": os.environ.get("ANTHROPIC_MODEL"),
     "permissionMode": "bypassPermissions"})
print("", flush=True)
if text == "nofile":
    print("API Error: Connection refused", file=sys.stderr)
    sys.exit(1)
transcript.parent.mkdir(parents=True, exist_ok=True)
with transcript.open("a") as f:
    f.write(json.dumps({"type": "user", "sessionId": sid, "message": {"role": "user", "content": text}}) + "\n")
if text == "sleep":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (home / "child.pid").write_text(str(child.pid))
    time.sleep(30)
if text == "background":
    # Like a command Claude Code's Bash tool left running (not holding the output open).
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (home / "child.pid").write_text(str(child.pid))
say({"type": "assistant", "session_id": sid,
     "message": {"role": "assistant", "content": [{"type": "text", "text": "echo: " + text}]}})
if text == "fail":
    print("request failed", file=sys.stderr)
    say({"type": "result", "subtype": "error_during_execution", "is_error": True, "session_id": sid,
         "num_turns": 1, "stop_reason": None, "errors": ["API Error: 400 bad input"]})
    sys.exit(1)
if text == "apierror":
    say({"type": "result", "subtype": "success", "is_error": True, "result": "API Error: 500 overloaded",
         "session_id": sid, "num_turns": 1, "stop_reason": "stop_sequence"})
    sys.exit(0)
say({"type": "result", "subtype": "success", "is_error": False, "result": "echo: " + text,
     "session_id": sid, "num_turns": 1, "stop_reason": "end_turn"})
'''


@pytest.fixture
def fake_env(tmp_path: Path) -> dict[str, str]:
    claude = tmp_path / "claude"
    claude.write_text(FAKE_CLAUDE.replace("/usr/bin/env python3", sys.executable))
    claude.chmod(0o755)
    work = tmp_path / "workspace"
    work.mkdir()
    config = tmp_path / "config"
    config.mkdir()
    return {
        **os.environ,
        "CLAUDE_CONFIG_DIR": str(config),
        "SCLATE_CLAUDE_BIN": str(claude),
        "SCLATE_CLAUDE_WORKDIR": str(work),
        "ANTHROPIC_API_KEY": "sk-sclate-run-secret",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:4001",
        "ANTHROPIC_MODEL": "the-model",
        "SCLATE_CLAUDE_CODE_SETTINGS": json.dumps({"max_turns": 3}),
    }


def _runs(env: Mapping[str, str]) -> list[dict[str, Any]]:
    path = Path(env["CLAUDE_CONFIG_DIR"]) / "fake-argv.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _kept(env: Mapping[str, str]) -> dict[str, str]:
    path = Path(env["CLAUDE_CONFIG_DIR"]) / "sclate-sessions.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _opt(argv: list[str], flag: str) -> str | None:
    """The value after ``flag`` among the options (before ``--``), or None."""
    opts = argv[: argv.index("--")]
    return opts[opts.index(flag) + 1] if flag in opts else None


def _gone(pid: int) -> bool:
    """The process ended (absent, or a zombie no one reaped yet)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def _bridge_module() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("claude_code_bridge_under_test", BRIDGE_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Serve:
    """``bridge.py serve`` as a real subprocess, asked one message at a time."""

    def __init__(self, transport: SubprocessTransport) -> None:
        self.t = transport

    @classmethod
    async def start(cls, env: Mapping[str, str]) -> _Serve:
        return cls(await SubprocessTransport.start([sys.executable, str(BRIDGE_PY), "serve"], env=env))

    async def ask(self, text: str, session: str) -> tuple[dict[str, Any], dict[str, Any]]:
        await self.t.send(json.dumps({"type": "message", "text": text, "session": session, "round_id": "r"}))
        received = json.loads(await self.t.readline())
        end = json.loads(await self.t.readline())
        assert received["type"] == "received" and end["type"] == "turn_end" and end["round_id"] == "r"
        return received, end

    async def close(self) -> None:
        await self.t.close()


# -- declaration and options -------------------------------------------------------------


def test_declaration_and_pinned_version() -> None:
    package = json.loads((IMAGES / "claude-code" / "npm" / "package.json").read_text())
    assert package["dependencies"] == {"@anthropic-ai/claude-code": CLAUDE_CODE_VERSION}
    assert DECLARATION.version == CLAUDE_CODE_VERSION
    assert DECLARATION.name == "claude-code" and DECLARATION.image == IMAGE_NAME == "sclate-claude-code"
    assert DECLARATION.wire_apis == {"anthropic_messages"} and DECLARATION.process_clock == "simulated"
    assert _bridge_module().DEFAULTS["tools"] == list(DEFAULT_TOOLS)
    entries = {e.declaration.name: e for e in HARNESSES}
    assert entries["claude-code"].declaration is DECLARATION and entries["claude-code"].make is ClaudeCodeHarness


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"session_scope": "forever"}, "session_scope"),
        ({"tools": ["Bash", "rm -rf /"]}, "tools"),
        ({"tools": [1, 2]}, "tools"),
        ({"tools": 5}, "tools"),
        ({"tools": []}, "tools"),
        ({"tools": ""}, "tools"),
        ({"tools": ["default", "Bash"]}, "tools"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_turns": 0}, "max_turns"),
        ({"turn_timeout_s": True}, "turn_timeout_s"),
        ({"context_window": 100}, "context_window"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        ClaudeCodeHarness(options)
    assert err.value.field == f"run.agent.options.{field}"


def _settings(h: ClaudeCodeHarness) -> dict[str, Any]:
    ep = ProxyEndpoints("http://a", "http://m", "http://x", "k", "m")
    settings: dict[str, Any] = json.loads(h.environment(ep)["SCLATE_CLAUDE_CODE_SETTINGS"])
    return settings


def test_tools_are_a_list_a_comma_text_or_default() -> None:
    assert _settings(ClaudeCodeHarness({}))["tools"] == ["Bash", "Read", "Write", "Edit"]
    assert _settings(ClaudeCodeHarness({"tools": " Bash, Read ,Read"}))["tools"] == ["Bash", "Read"]
    assert _settings(ClaudeCodeHarness({"tools": ["Grep", "mcp__x_y"]}))["tools"] == ["Grep", "mcp__x_y"]
    assert _settings(ClaudeCodeHarness({"tools": "default"}))["tools"] == ["default"]


def test_environment_points_claude_code_at_the_agent_listener() -> None:
    h = ClaudeCodeHarness({"max_tokens": 777, "max_turns": 5, "turn_timeout_s": 90, "context_window": 32768})
    ep = ProxyEndpoints(
        "http://127.0.0.1:4001", "http://127.0.0.1:4002", "http://127.0.0.1:4003", "sk-sclate-x", "the-model"
    )
    env = h.environment(ep)
    # Claude Code appends /v1/messages itself: the base URL is the listener, no /v1.
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:4001"
    assert env["ANTHROPIC_API_KEY"] == "sk-sclate-x"
    for key in (
        "ANTHROPIC_MODEL",
        "ANTHROPIC_DEFAULT_OPUS_MODEL",
        "ANTHROPIC_DEFAULT_SONNET_MODEL",
        "CLAUDE_CODE_SUBAGENT_MODEL",
    ):
        assert env[key] == "the-model", key
    assert ProxyEndpoints.role_model("aux") == "sclate-role-aux"
    assert env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == env["ANTHROPIC_SMALL_FAST_MODEL"] == "sclate-role-aux"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "777"
    assert env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "32768"
    assert "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE" not in env
    forced = ClaudeCodeHarness({"autocompact_pct": 3}).environment(ep)
    assert forced["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"] == "3"
    with pytest.raises(InvalidArgument) as err:
        ClaudeCodeHarness({"autocompact_pct": 0})
    assert err.value.field == "run.agent.options.autocompact_pct"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    settings = json.loads(env["SCLATE_CLAUDE_CODE_SETTINGS"])
    assert settings == {"max_turns": 5, "tools": ["Bash", "Read", "Write", "Edit"], "turn_timeout_s": 90}
    # The defaults.
    default = ClaudeCodeHarness({}).environment(ep)
    assert default["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "1024"
    assert json.loads(default["SCLATE_CLAUDE_CODE_SETTINGS"])["max_turns"] == 8


def test_parse_stream_takes_the_result_and_counts_events() -> None:
    bridge = _bridge_module()
    lines = [
        "not json",
        json.dumps({"type": "system", "subtype": "init", "session_id": "s-1"}),
        "[1, 2]",
        json.dumps({"type": "assistant", "message": {}}),
        json.dumps({"type": "assistant", "message": {}}),
        json.dumps({"type": "result", "subtype": "success", "result": "done", "session_id": "s-2"}),
    ]
    out = bridge.parse_stream("\n".join(lines))
    assert out["result"]["result"] == "done" and out["session_id"] == "s-2"
    assert out["events"] == {"system": 1, "assistant": 2, "result": 1}
    assert bridge.parse_stream("") == {"result": None, "session_id": "", "events": {}}


def test_claude_code_runs_as_the_creator_of_its_own_libfaketime_state() -> None:
    # Claude Code exits before main when handed libfaketime's inherited semaphore:
    # everything else of the environment (the preload and the clock file) reaches it.
    bridge = _bridge_module()
    environ = {
        "LD_PRELOAD": "/usr/local/lib/faketime/libfaketime.so.1",
        "FAKETIME_TIMESTAMP_FILE": "/run/sclate/time/faketime.rc",
        "FAKETIME_SHARED": "/faketime_sem_7 /faketime_shm_7",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:4001",
    }
    env = bridge.claude_env(environ)
    assert "FAKETIME_SHARED" not in env
    assert env == {k: v for k, v in environ.items() if k != "FAKETIME_SHARED"}
    assert "FAKETIME_SHARED" in environ  # the bridge's own environment is left as it was


# -- the bridge against a test double of claude ---------------------------------------------


async def test_setup_reports_the_version_or_a_broken_install(fake_env: dict[str, str], tmp_path: Path) -> None:
    env = {**fake_env, "CLAUDE_CONFIG_DIR": str(tmp_path / "fresh" / "claude-code")}
    # The fake writes its log in the config dir, which setup makes; --version logs nothing.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(BRIDGE_PY), "setup", env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0 and json.loads(out) == {"type": "setup", "version": "2.1.332 (Claude Code)"}
    assert (tmp_path / "fresh" / "claude-code").is_dir()
    broken = {**env, "SCLATE_CLAUDE_BIN": str(tmp_path / "no-such-claude")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(BRIDGE_PY), "setup", env=broken, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    report = json.loads(out)
    assert proc.returncode == 1 and "`claude --version` failed (-2)" in report["errors"][0]


async def test_serve_starts_then_resumes_each_session(fake_env: dict[str, str]) -> None:
    bridge = await _Serve.start(fake_env)
    try:
        r1, e1 = await bridge.ask("hello", "day01")
        assert r1["seq"] == 1 and isinstance(r1["wall_ns"], int) and isinstance(r1["mono_ns"], int)
        assert e1["reply"] == "echo: hello" and e1["exit_code"] == 0 and e1["resumed"] is False
        assert e1["num_turns"] == 1 and e1["stop_reason"] == "end_turn" and "error" not in e1
        assert e1["events"] == {"system": 1, "assistant": 1, "result": 1}
        sid1 = e1["claude_session"]
        assert uuid.UUID(sid1).version == 4
        # The second message of the session resumes it; a prompt starting with "-" stays a prompt.
        r2, e2 = await bridge.ask("-p --help", "day01")
        assert r2["seq"] == 2 and e2["reply"] == "echo: -p --help"
        assert e2["resumed"] is True and e2["claude_session"] == sid1
        _, e3 = await bridge.ask("other day", "day02")
        assert e3["resumed"] is False and e3["claude_session"] not in ("", sid1)
    finally:
        await bridge.close()
    runs = _runs(fake_env)
    assert len(runs) == 3
    first, second, third = (r["argv"] for r in runs)
    assert _opt(first, "--session-id") == sid1 and _opt(first, "--resume") is None
    assert _opt(second, "--resume") == sid1 and _opt(second, "--session-id") is None
    assert _opt(third, "--session-id") == e3["claude_session"]
    assert first[-2:] == ["--", "hello"] and second[-2:] == ["--", "-p --help"]
    for argv in (first, second, third):
        assert argv[0] == "-p" and "--verbose" in argv and "--dangerously-skip-permissions" in argv
        assert _opt(argv, "--output-format") == "stream-json"
        assert _opt(argv, "--max-turns") == "3"
        assert _opt(argv, "--tools") == "Bash,Read,Write,Edit"
    # Standard input is /dev/null, each run is its own process group in the workspace,
    # and the endpoint reaches Claude Code through its environment.
    for run in runs:
        assert run["stdin_devnull"] is True and run["own_group"] is True
        assert run["cwd"] == fake_env["SCLATE_CLAUDE_WORKDIR"]
        assert run["env"]["ANTHROPIC_API_KEY"] == "sk-sclate-run-secret"
        assert run["env"]["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:4001"
    assert _kept(fake_env) == {"day01": sid1, "day02": e3["claude_session"]}

    # A new bridge (a daemon restart, a restored branch) resumes from the kept map.
    again = await _Serve.start(fake_env)
    try:
        r4, e4 = await again.ask("back again", "day01")
    finally:
        await again.close()
    assert r4["seq"] == 1 and e4["resumed"] is True and e4["claude_session"] == sid1
    assert e4["reply"] == "echo: back again"
    assert _opt(_runs(fake_env)[-1]["argv"], "--resume") == sid1


async def test_a_failed_turn_is_reported_and_a_session_never_written_starts_afresh(
    fake_env: dict[str, str],
) -> None:
    bridge = await _Serve.start(fake_env)
    try:
        _, bad = await bridge.ask("fail", "s1")
        assert bad["exit_code"] == 1 and bad["reply"] == "" and bad["resumed"] is False
        assert bad["error"].startswith("error_during_execution: API Error: 400 bad input")
        assert "request failed" in bad["error"]
        # Claude Code wrote that session's transcript: it is kept, the next message resumes it.
        assert _kept(fake_env) == {"s1": bad["claude_session"]}
        # A "success" result marked is_error (the API's error as the text) is no reply.
        _, api = await bridge.ask("apierror", "s1")
        assert api["exit_code"] == 0 and api["reply"] == "" and api["resumed"] is True
        assert api["error"] == "success: API Error: 500 overloaded"

        _, nofile = await bridge.ask("nofile", "s2")
        assert nofile["exit_code"] == 1 and nofile["reply"] == ""
        assert "Connection refused" in nofile["error"] and "no result" not in nofile["error"]
        assert "s2" not in _kept(fake_env)
        _, fresh = await bridge.ask("hello", "s2")
        assert fresh["resumed"] is False and fresh["reply"] == "echo: hello"
        assert fresh["claude_session"] != nofile["claude_session"]
        argv = _runs(fake_env)[-1]["argv"]
        assert _opt(argv, "--session-id") == fresh["claude_session"] and _opt(argv, "--resume") is None

        # A kept id whose transcript is gone (a run that crashed first) is not resumed.
        stale = str(uuid.uuid4())
        kept = {**_kept(fake_env), "s3": stale}
        (Path(fake_env["CLAUDE_CONFIG_DIR"]) / "sclate-sessions.json").write_text(json.dumps(kept))
        _, e3 = await bridge.ask("hi", "s3")
        assert e3["resumed"] is False and e3["reply"] == "echo: hi" and e3["claude_session"] != stale
        assert _kept(fake_env)["s3"] == e3["claude_session"]
    finally:
        await bridge.close()


async def test_a_turn_past_its_timeout_ends_the_process_group(fake_env: dict[str, str]) -> None:
    env = {**fake_env, "SCLATE_CLAUDE_CODE_SETTINGS": json.dumps({"turn_timeout_s": 1})}
    bridge = await _Serve.start(env)
    try:
        started = time.monotonic()
        _, end = await bridge.ask("sleep", "s")
        took = time.monotonic() - started
        assert 1 <= took < 10, took
        assert end["exit_code"] == -1 and end["reply"] == "" and "timed out after 1 s" in end["error"]
        # Claude Code and the child it started are both gone.
        child = int((Path(fake_env["CLAUDE_CONFIG_DIR"]) / "child.pid").read_text())
        assert _gone(child), f"claude's child {child} outlived the timeout"
        assert _gone(_runs(fake_env)[-1]["pid"])
        # The session it had written is kept: the next message resumes it.
        assert _kept(fake_env) == {"s": end["claude_session"]}
        _, after = await bridge.ask("hello", "s")
        assert after["resumed"] is True and after["claude_session"] == end["claude_session"]
    finally:
        await bridge.close()


async def test_what_a_turn_left_running_ends_with_it(fake_env: dict[str, str]) -> None:
    bridge = await _Serve.start(fake_env)
    try:
        _, end = await bridge.ask("background", "s")
    finally:
        await bridge.close()
    assert end["exit_code"] == 0 and end["reply"] == "echo: background"
    child = int((Path(fake_env["CLAUDE_CONFIG_DIR"]) / "child.pid").read_text())
    assert _gone(child), f"a process claude left running ({child}) outlived the turn"


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
        assert list(argv) == ["python3", "/opt/sclate-claude-code/bridge.py", "serve"]
        argv = [sys.executable, str(BRIDGE_PY), "serve"]
        return _Channel(await SubprocessTransport.start(argv, env={**self.env, **(env or {})}))

    def schedule(self, specs: Sequence[EventSpec]) -> None:
        raise AssertionError("Claude Code schedules nothing")


def _access(h: ClaudeCodeHarness, fake_env: Mapping[str, str]) -> _LocalAccess:
    ep = ProxyEndpoints("http://127.0.0.1:4001", "http://m", "http://x", "sk-sclate-run-secret", "the-model")
    return _LocalAccess({**fake_env, **h.environment(ep)})


async def test_the_driver_delivers_and_resumes_each_session(fake_env: dict[str, str]) -> None:
    h = ClaudeCodeHarness({"max_turns": 4, "tools": "Bash,Read", "max_tokens": 512})
    await h.start(_access(h, fake_env))
    try:
        await h.start_session("day01")
        first = await h.deliver(DeliverPrompt("hi", session="day01", round_id="r1"))
        second = await h.deliver(DeliverPrompt("more", session="day01", round_id="r2"))
        await h.stop_session()
        await h.start_session("day02")
        other = await h.deliver(DeliverPrompt("new day", round_id="r3"))
        failed = await h.deliver(DeliverPrompt("fail", round_id="r4"))
        await h.stop_session()
    finally:
        await h.stop()
    assert first.reply == "echo: hi" and second.reply == "echo: more"
    assert first.received_seq == 1 and second.received_seq == 2 and first.received_sim_ns is not None
    assert first.details["resumed"] is False and second.details["resumed"] is True
    assert first.details["claude_session"] == second.details["claude_session"] != ""
    assert first.details["exit_code"] == 0 and first.details["num_turns"] == 1
    assert first.details["stop_reason"] == "end_turn" and "error" not in first.details
    # A prompt without a session goes to the one started last: a new Claude Code session.
    assert other.reply == "echo: new day" and other.details["resumed"] is False
    assert other.details["claude_session"] != first.details["claude_session"]
    # A failed turn is the harness's business: it is reported, the run goes on.
    assert failed.reply == "" and failed.details["exit_code"] == 1
    assert failed.details["error"].startswith("error_during_execution:")
    assert failed.details["claude_session"] == other.details["claude_session"]
    assert _kept(fake_env) == {"day01": first.details["claude_session"], "day02": other.details["claude_session"]}
    # The options and the endpoint reach Claude Code.
    run = _runs(fake_env)[0]
    assert _opt(run["argv"], "--max-turns") == "4" and _opt(run["argv"], "--tools") == "Bash,Read"
    assert run["env"] == {
        "ANTHROPIC_API_KEY": "sk-sclate-run-secret",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:4001",
        "ANTHROPIC_MODEL": "the-model",
        "ANTHROPIC_DEFAULT_OPUS_MODEL": "the-model",
        "ANTHROPIC_DEFAULT_SONNET_MODEL": "the-model",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "sclate-role-aux",
        "ANTHROPIC_SMALL_FAST_MODEL": "sclate-role-aux",
        "CLAUDE_CODE_SUBAGENT_MODEL": "the-model",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "512",
    }


async def test_session_scope_run_keeps_one_claude_code_session(fake_env: dict[str, str]) -> None:
    h = ClaudeCodeHarness({"session_scope": "run"})
    await h.start(_access(h, fake_env))
    try:
        await h.start_session("day01")
        first = await h.deliver(DeliverPrompt("hi", session="day01", round_id="r1"))
        await h.stop_session()
        await h.start_session("day02")
        second = await h.deliver(DeliverPrompt("later", session="day02", round_id="r2"))
        await h.stop_session()
    finally:
        await h.stop()
    assert first.reply == "echo: hi" and second.reply == "echo: later"
    assert first.details["resumed"] is False and second.details["resumed"] is True
    assert second.details["claude_session"] == first.details["claude_session"]
    assert _kept(fake_env) == {"run": first.details["claude_session"]}
    argvs = [r["argv"] for r in _runs(fake_env)]
    assert _opt(argvs[0], "--session-id") == _opt(argvs[1], "--resume") == first.details["claude_session"]
