"""Claude Code with Mem0: ``sclate-mem0`` (adapters/memory/mem0_tools.py), the bridge's
config files and memory report, and the harness that passes the report on.

Mem0 itself is replaced by a test double of the ``mem0`` package (``FAKE_MEM0``:
memories in a JSON file, a word-overlap search), injected through
``sys.modules`` in this process and through ``PYTHONPATH`` for subprocesses;
Claude Code by a test double of the ``claude`` program that runs the hooks of
its settings the way Claude Code 2.1.332 does (``FAKE_CLAUDE_WITH_HOOKS``). The
real Claude Code and Mem0 run in tests/e2e/test_memory_claude_code.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib.util
import io
import json
import os
import sys
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from adapters import ProxyEndpoints, TurnResult
from adapters.claude_code import DECLARATION, ClaudeCodeHarness
from adapters.claude_code.image import BRIDGE_PY, IMAGE_NAME
from adapters.memory import HINDSIGHT, MEM0, mem0_tools, memory_system, register_memory_image
from sclated.errors import InvalidArgument
from sclated.runtime import recipes
from sclated.scheduler import DeliverPrompt
from tests.adapters.test_claude_code import _LocalAccess

IMAGES = Path(__file__).resolve().parents[2] / "images"
MEM0_TOOLS_PY = Path(mem0_tools.__file__).resolve()

FAKE_MEM0 = r'''
"""Test double of the mem0 package (mem0ai), not Mem0 itself.

``Memory.from_config(config)`` keeps its memories in ``<history_db_path>.fake.json``;
``search`` finds those sharing a word with the query; ``add`` remembers each user
message as "remembered: <text>". FAKE_MEM0_FAIL=1 makes search and add raise.
Every instance is kept in ``Memory.opened`` and each call in ``CALLS``
(its LLM's calls too, as ("llm", messages, response_format)).
"""
import json, os, pathlib, re

CALLS = []


def _words(text):
    return set(re.findall(r"[a-z]+", text.lower()))


class _Client:
    closed = False

    def close(self):
        self.closed = True


class _VectorStore:
    def __init__(self):
        self.client = _Client()


class _Llm:
    """Mem0's LLM wrapper: ``generate_response`` records its arguments and answers "{}"."""

    def generate_response(self, messages, response_format=None, tools=None, tool_choice="auto"):
        CALLS.append(("llm", messages, response_format))
        return "{}"


class Memory:
    opened = []

    def __init__(self, config):
        self.config = config
        self.path = pathlib.Path(config["history_db_path"] + ".fake.json")
        self.vector_store = _VectorStore()
        self.llm = _Llm()
        self.closed = False
        Memory.opened.append(self)

    @classmethod
    def from_config(cls, config):
        return cls(config)

    def _load(self):
        return json.loads(self.path.read_text()) if self.path.exists() else []

    def _fail(self):
        if os.environ.get("FAKE_MEM0_FAIL"):
            raise ConnectionError("the embedding endpoint is unreachable")

    def search(self, query, *, top_k, filters):
        self._fail()
        CALLS.append(("search", query, top_k, filters))
        mine = [m for m in self._load() if m["user_id"] == filters["user_id"]]
        return {"results": [m for m in mine if _words(query) & _words(m["memory"])][:top_k]}

    def add(self, messages, *, user_id, metadata):
        self._fail()
        CALLS.append(("add", messages, user_id, metadata))
        items = self._load()
        new = [
            {"id": str(len(items) + i), "memory": "remembered: " + m["content"], "event": "ADD",
             "user_id": user_id, "metadata": metadata, "given": messages}
            for i, m in enumerate(x for x in messages if x["role"] == "user")
        ]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(items + new))
        return {"results": new}

    def get_all(self, *, filters, top_k):
        CALLS.append(("get_all", filters, top_k))
        return {"results": [m for m in self._load() if m["user_id"] == filters["user_id"]][:top_k]}

    def close(self):
        self.closed = True
'''

FAKE_CLAUDE_WITH_HOOKS = r'''#!/usr/bin/env python3
"""Test double of the claude CLI (Claude Code) that runs its settings' hooks, not the program itself.

`claude --version`, and `claude -p ... (--session-id ID | --resume ID) -- TEXT`: records
its argv in $CLAUDE_CONFIG_DIR/fake-argv.jsonl, writes the session's transcript in
Claude Code 2.1.332's shape (the user line, the hooks' context as an attachment line,
the assistant line), runs the UserPromptSubmit hooks of $CLAUDE_CONFIG_DIR/settings.json
with Claude Code's hook input on stdin (their additionalContext is echoed in the reply)
and then its Stop hooks, and prints stream-json events.
"""
import json, os, pathlib, subprocess, sys
home = pathlib.Path(os.environ["CLAUDE_CONFIG_DIR"])
args = sys.argv[1:]
if args == ["--version"]:
    print("2.1.332 (Claude Code)")
    sys.exit(0)
with (home / "fake-argv.jsonl").open("a") as f:
    f.write(json.dumps({"argv": args}) + "\n")
sep = args.index("--")
opts, text = args[:sep], args[sep + 1]
resume = "--resume" in opts
sid = opts[opts.index("--resume" if resume else "--session-id") + 1]
transcript = home / "projects" / "-workspace" / (sid + ".jsonl")
transcript.parent.mkdir(parents=True, exist_ok=True)
settings_file = home / "settings.json"
settings = json.loads(settings_file.read_text()) if settings_file.exists() else {}


def run_hooks(event, payload):
    said = []
    for group in settings.get("hooks", {}).get(event, []):
        for hook in group["hooks"]:
            data = {"session_id": sid, "transcript_path": str(transcript), "cwd": os.getcwd(),
                    "permission_mode": "bypassPermissions", "hook_event_name": event, **payload}
            proc = subprocess.run(hook["command"], shell=True, input=json.dumps(data), capture_output=True,
                                  text=True, timeout=hook["timeout"])
            assert proc.returncode == 0, proc.stderr
            if proc.stdout.strip():
                said.append(json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"])
    return said


def line(entry):
    with transcript.open("a") as f:
        f.write(json.dumps({"isSidechain": False, "sessionId": sid, **entry}) + "\n")


line({"type": "user", "message": {"role": "user", "content": text}})
context = run_hooks("UserPromptSubmit", {"prompt": text})
if context:
    line({"type": "attachment", "attachment": {"type": "hook_additional_context", "content": context,
                                               "hookName": "UserPromptSubmit"}})
reply = "echo: " + text + "".join(" | " + c for c in context)
line({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": reply}]}})
if text.startswith("overlong"):
    # As Claude Code 2.1.332 ends a turn whose reply stayed past the output bound: its
    # error as an assistant line, an error result, and no Stop hook.
    error = "API Error: Claude's response exceeded the 96 output token maximum."
    line({"type": "assistant", "isApiErrorMessage": True, "error": "max_output_tokens",
          "message": {"role": "assistant", "content": [{"type": "text", "text": error}]}})
    print(json.dumps({"type": "result", "subtype": "success", "is_error": True, "result": error, "session_id": sid}))
    sys.exit(1)
run_hooks("Stop", {"stop_hook_active": False, "last_assistant_message": reply})
print(json.dumps({"type": "system", "subtype": "init", "session_id": sid}))
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": reply, "session_id": sid,
                  "num_turns": 1, "stop_reason": "end_turn"}))
'''

# A Claude Code 2.1.332 transcript (lines of a real one, fields trimmed): the prompt, the
# recall hook's context, a call of the MCP search tool and its result, the reply.
TRANSCRIPT = [
    {"type": "queue-operation", "operation": "enqueue", "content": "What is my cat called?"},
    {"type": "user", "isSidechain": False, "message": {"role": "user", "content": "My cat is called Biscuit."}},
    {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]}},
    {"type": "queue-operation", "operation": "dequeue"},
    {"type": "user", "isSidechain": False, "message": {"role": "user", "content": "What is my cat called?"}},
    {
        "type": "attachment",
        "attachment": {
            "type": "hook_additional_context",
            "content": ["What you remember about this (Mem0):\n- remembered: My cat is called Biscuit."],
            "hookName": "UserPromptSubmit",
        },
    },
    {
        "type": "user",
        "isMeta": True,
        "message": {"role": "user", "content": [{"type": "text", "text": "Caveat: the messages below..."}]},
    },
    {
        "type": "assistant",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "look it up"},
                {"type": "tool_use", "id": "toolu_01", "name": "mcp__mem0__search_memories", "input": {"query": "cat"}},
            ],
        },
    },
    {
        "type": "user",
        "message": {
            "role": "user",
            "content": [
                {"tool_use_id": "toolu_01", "type": "tool_result", "content": [{"type": "text", "text": "[]"}]}
            ],
        },
    },
    {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"}]},
    },
    {
        "type": "assistant",
        "isSidechain": True,
        "message": {"role": "assistant", "content": [{"type": "text", "text": "a sub-agent's words"}]},
    },
    {
        "type": "assistant",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "Your cat is Biscuit."}]},
    },
    {"type": "last-prompt", "lastPrompt": "What is my cat called?"},
    {"type": "system", "subtype": "stop_hook_summary", "hookCount": 1},
]


def _bridge() -> Any:
    spec = importlib.util.spec_from_file_location("claude_code_bridge_mem0_under_test", BRIDGE_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fake_mem0(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """The test double of ``mem0`` in ``sys.modules``, the store in a temporary folder."""
    module = types.ModuleType("mem0")
    exec(compile(FAKE_MEM0, "fake_mem0", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "mem0", module)
    monkeypatch.setenv("SCLATE_MEMORY_SYSTEM_DIR", str(tmp_path / "mem0"))
    monkeypatch.setenv("MEM0_DIR", str(tmp_path / "mem0"))
    monkeypatch.setenv("SCLATE_MEMORY_SYSTEM_BASE_URL", "http://127.0.0.1:4004/v1")
    monkeypatch.setenv("SCLATE_MEMORY_SYSTEM_API_KEY", "sk-sclate-run")
    monkeypatch.setenv("SCLATE_MEMORY_SYSTEM_MODEL", "the-model")
    monkeypatch.delenv("SCLATE_MEMORY_SYSTEM_USER", raising=False)
    monkeypatch.delenv("FAKE_MEM0_FAIL", raising=False)
    monkeypatch.setenv("MEM0_TELEMETRY", "True")
    yield module


def _log(root: Path) -> list[dict[str, Any]]:
    path = root / "hook-log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _memory_dir() -> Path:
    return Path(os.environ["SCLATE_MEMORY_SYSTEM_DIR"])


# -- the declaration, the harness's settings and the pair's image ---------------------------


def test_claude_code_offers_mem0_and_no_other_system() -> None:
    assert DECLARATION.memory_systems == ("native", "mem0")
    assert memory_system("mem0", DECLARATION.memory_systems, DECLARATION.name) is MEM0
    with pytest.raises(InvalidArgument) as err:
        memory_system("hindsight", DECLARATION.memory_systems, DECLARATION.name)
    assert err.value.field == "run.agent.memory"
    with pytest.raises(InvalidArgument) as err:
        ClaudeCodeHarness({}, HINDSIGHT)
    assert err.value.field == "run.agent.memory"

    ep = ProxyEndpoints("http://a", "http://m", "http://x", "k", "m")
    env = ClaudeCodeHarness({"turn_timeout_s": 90}, MEM0).environment(ep)
    assert json.loads(env["SCLATE_CLAUDE_CODE_SETTINGS"])["memory"] == "mem0"
    assert env["MCP_TIMEOUT"] == "120000" and env["MCP_TOOL_TIMEOUT"] == "90000"
    own = ClaudeCodeHarness({}).environment(ep)
    assert "memory" not in json.loads(own["SCLATE_CLAUDE_CODE_SETTINGS"]) and "MCP_TIMEOUT" not in own


def test_the_pair_image_carries_sclate_mem0() -> None:
    name = register_memory_image(IMAGE_NAME, MEM0)
    assert name == "sclate-claude-code-mem0"
    recipe = next(r for r in recipes() if r.name == name)
    assert recipe.parent == IMAGE_NAME and recipe.folder == "memory-mem0"
    assert [(h.dest, h.locate()) for h in recipe.host_files] == [("mem0_tools.py", MEM0_TOOLS_PY)]
    pins = (IMAGES / "memory-mem0" / "requirements.txt").read_text().split()
    assert "mem0ai==2.2.1" in pins and any(p.startswith("mcp==") for p in pins)
    dockerfile = (IMAGES / "memory-mem0" / "Dockerfile").read_text()
    assert "COPY mem0_tools.py /opt/sclate-mem0/mem0_tools.py" in dockerfile
    assert "exec /opt/mem0/venv/bin/python /opt/sclate-mem0/mem0_tools.py" in dockerfile
    assert "sclate-mem0 --help" in dockerfile
    # Standalone in the sandbox: nothing of sclate is imported.
    source = MEM0_TOOLS_PY.read_text()
    assert "import sclated" not in source and "from sclated" not in source and "from adapters" not in source


# -- the bridge: Claude Code's settings, the MCP config, the hook log -------------------------


def test_settings_get_the_hooks_and_keep_everything_else() -> None:
    bridge = _bridge()
    theirs: dict[str, Any] = {"hooks": [{"type": "command", "command": "notify-send done"}]}
    current: dict[str, Any] = {"model": "x", "hooks": {"Stop": [theirs], "PreToolUse": [{"matcher": "Bash", **theirs}]}}
    settings = bridge.mem0_settings(current, 300)
    assert settings["model"] == "x"
    assert settings["hooks"]["PreToolUse"] == current["hooks"]["PreToolUse"]
    assert settings["hooks"]["UserPromptSubmit"] == [
        {"hooks": [{"type": "command", "command": "sclate-mem0 recall-hook", "timeout": 300}]}
    ]
    assert settings["hooks"]["Stop"] == [
        theirs,
        {"hooks": [{"type": "command", "command": "sclate-mem0 store-hook", "timeout": 300}]},
    ]
    # Set up again (a restored sandbox, a new timeout): replaced, never repeated.
    again = bridge.mem0_settings(settings, 60)
    assert again["hooks"]["Stop"] == [
        theirs,
        {"hooks": [{"type": "command", "command": "sclate-mem0 store-hook", "timeout": 60}]},
    ]
    assert len(again["hooks"]["UserPromptSubmit"]) == 1
    assert current["hooks"]["Stop"] == [theirs]  # the settings given are left as they were
    assert bridge.mcp_config() == {"mcpServers": {"mem0": {"command": "sclate-mem0", "args": ["mcp"]}}}


def _fake_claude_env(tmp_path: Path) -> dict[str, str]:
    claude = tmp_path / "claude"
    claude.write_text(FAKE_CLAUDE_WITH_HOOKS.replace("/usr/bin/env python3", sys.executable))
    claude.chmod(0o755)
    packages = tmp_path / "packages" / "mem0"
    packages.mkdir(parents=True)
    (packages / "__init__.py").write_text(FAKE_MEM0)
    (tmp_path / "workspace").mkdir()
    (tmp_path / "config").mkdir()
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SCLATE_", "MEM0_", "FAKE_MEM0"))},
        "CLAUDE_CONFIG_DIR": str(tmp_path / "config"),
        "SCLATE_CLAUDE_BIN": str(claude),
        "SCLATE_CLAUDE_WORKDIR": str(tmp_path / "workspace"),
        "SCLATE_MEM0_BIN": f"{sys.executable} {MEM0_TOOLS_PY}",
        "SCLATE_MEMORY_SYSTEM_DIR": str(tmp_path / "mem0"),
        "PYTHONPATH": str(tmp_path / "packages"),
    }


async def _setup(env: Mapping[str, str]) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(BRIDGE_PY), "setup", env=dict(env), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    report: dict[str, Any] = json.loads(out)
    assert proc.returncode == (1 if report.get("errors") else 0)
    return report


async def test_setup_attaches_mem0_to_claude_codes_settings(tmp_path: Path) -> None:
    env = _fake_claude_env(tmp_path)
    env["SCLATE_CLAUDE_CODE_SETTINGS"] = json.dumps({"memory": "mem0", "turn_timeout_s": 150})
    config = Path(env["CLAUDE_CONFIG_DIR"])
    (config / "settings.json").write_text(json.dumps({"theme": "dark"}))
    for _ in range(2):  # every start (fresh, adopted, restored) sets up again
        assert await _setup(env) == {"type": "setup", "version": "2.1.332 (Claude Code)", "memory": "mem0"}
    settings = json.loads((config / "settings.json").read_text())
    mem0 = f"{sys.executable} {MEM0_TOOLS_PY}"
    assert settings == {
        "theme": "dark",
        "hooks": {
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": f"{mem0} recall-hook", "timeout": 150}]}],
            "Stop": [{"hooks": [{"type": "command", "command": f"{mem0} store-hook", "timeout": 150}]}],
        },
    }
    assert json.loads((config / "sclate-mcp.json").read_text()) == {
        "mcpServers": {"mem0": {"command": mem0, "args": ["mcp"]}}
    }
    # Settings that are not a JSON object are not overwritten: the start fails, saying why.
    (config / "settings.json").write_text("[1]")
    report = await _setup(env)
    assert "cannot attach Mem0 to Claude Code" in report["errors"][0]
    assert (config / "settings.json").read_text() == "[1]"
    # Without Mem0 the settings are Claude Code's own business.
    (config / "settings.json").unlink()
    env["SCLATE_CLAUDE_CODE_SETTINGS"] = "{}"
    assert await _setup(env) == {"type": "setup", "version": "2.1.332 (Claude Code)"}
    assert not (config / "settings.json").exists()


def test_claude_code_gets_the_mcp_server_and_its_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    bridge = _bridge()
    settings = {**bridge.DEFAULTS, "memory": "mem0"}
    argv = bridge._argv("hi", settings)
    assert argv[argv.index("--mcp-config") + 1] == str(tmp_path / "sclate-mcp.json")
    assert argv[argv.index("--allowedTools") + 1] == "mcp__mem0__search_memories,mcp__mem0__add_memory"
    assert argv[argv.index("--tools") + 1] == "Bash,Read,Write,Edit"  # the built-in tools, as before
    plain = bridge._argv("hi", bridge.DEFAULTS)
    assert "--mcp-config" not in plain and "--allowedTools" not in plain


def test_the_hook_log_becomes_the_turns_memory_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCLATE_MEMORY_SYSTEM_DIR", str(tmp_path))
    bridge = _bridge()
    assert bridge.log_size() == 0 and bridge.log_since(0) == []
    log = tmp_path / "hook-log.jsonl"
    log.write_text(json.dumps({"hook": "store", "stored": 9, "ms": 1.0}) + "\n")  # an earlier turn's
    offset = bridge.log_size()
    entries = [
        {"hook": "recall", "recalled": ["cat: Biscuit"], "stored": 0, "ms": 120.5},
        {"hook": "mcp", "tool": "search_memories", "recalled": ["moved to Porto"], "stored": 0, "ms": 30.0},
        {"hook": "mcp", "tool": "add_memory", "recalled": [], "stored": 1, "ms": 400.0},
        {"hook": "store", "recalled": [], "stored": 2, "ms": 900.0},
    ]
    with log.open("a") as f:
        f.write("".join(json.dumps(e) + "\n" for e in entries) + "not json\n")
    got = bridge.log_since(offset)
    assert got == entries
    assert bridge.memory_report(got) == {
        "system": "mem0",
        "recalled": ["cat: Biscuit", "moved to Porto"],
        "recall_ms": 150.5,
        "stored": 3,
        "store_ms": 1300.0,
        "tool_calls": 2,
    }
    # Failures are reported, not hidden; a recall that failed recalled nothing.
    failed = [
        {"hook": "recall", "recalled": [], "stored": 0, "ms": 5.0, "error": "ConnectionError: refused"},
        {"hook": "store", "recalled": [], "stored": 0, "ms": 7.0, "error": "TimeoutError: locked"},
    ]
    assert bridge.memory_report(failed) == {
        "system": "mem0",
        "recall_error": "ConnectionError: refused",
        "store_error": "TimeoutError: locked",
    }
    # No hook ran (Claude Code failed to start): the system, nothing else.
    assert bridge.memory_report([]) == {"system": "mem0"}
    # A log that shrank (a restored snapshot's) is read from its start.
    log.write_text(json.dumps({"hook": "store", "stored": 1}) + "\n")
    assert bridge.log_since(offset) == [{"hook": "store", "stored": 1}]


# -- sclate-mem0's hooks and tools, against the test double of mem0 -----------------------------


def test_mem0_is_configured_like_the_reference_harness(fake_mem0: Any, tmp_path: Path) -> None:
    root = tmp_path / "store"
    config = mem0_tools.mem0_config(root)
    assert config == {
        "llm": {
            "provider": "openai",
            "config": {
                "model": "the-model",
                "openai_base_url": "http://127.0.0.1:4004/v1",
                "api_key": "sk-sclate-run",
                "max_tokens": 256,
                "temperature": 0.1,
            },
        },
        "embedder": {
            "provider": "openai",
            "config": {
                "model": "text-embedding",
                "openai_base_url": "http://127.0.0.1:4004/v1",
                "api_key": "sk-sclate-run",
                "embedding_dims": 384,
            },
        },
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "collection_name": "memories",
                "path": str(root / "qdrant"),
                "on_disk": True,
                "embedding_model_dims": 384,
            },
        },
        "history_db_path": str(root / "history.db"),
    }
    # Opened on the store for one use, telemetry off before the import, then closed.
    with mem0_tools.open_memory() as memory:
        assert memory.config == mem0_tools.mem0_config(_memory_dir())
        assert os.environ["MEM0_TELEMETRY"] == "False"
    assert memory.closed and memory.vector_store.client.closed


def test_mem0s_extraction_is_asked_for_the_shape_it_parses(fake_mem0: Any, tmp_path: Path) -> None:
    """Mem0 asks for any JSON object and then crashes on ``{"memory": ["a fact"]}``
    (``'str' object has no attribute 'get'``): its extraction call gets the schema."""
    memory = mem0_tools.new_memory(tmp_path / "store")
    said = [{"role": "user", "content": "hi"}]
    assert memory.llm.generate_response(messages=said, response_format={"type": "json_object"}) == "{}"
    memory.llm.generate_response(messages=said, response_format={"type": "text"})
    memory.llm.generate_response(said)
    formats = [call[2] for call in fake_mem0.CALLS if call[0] == "llm"]
    assert formats == [mem0_tools.EXTRACTION_FORMAT, {"type": "text"}, None]
    schema = mem0_tools.EXTRACTION_FORMAT["json_schema"]["schema"]
    item = schema["properties"]["memory"]["items"]
    # Mem0 2.2.1 reads item["text"] (required) and the optional attributed_to and linked_memory_ids.
    assert item["type"] == "object" and item["required"] == ["id", "text"]
    assert set(item["properties"]) == {"id", "text", "attributed_to", "linked_memory_ids"}
    # The model server turns it into a grammar (a schema it refused would be a 400 on every add).
    from sclated.model import response_format_grammar

    assert response_format_grammar(mem0_tools.EXTRACTION_FORMAT)


def test_the_recall_hook_adds_what_mem0_remembers_as_context(fake_mem0: Any) -> None:
    stdin = io.StringIO(json.dumps({"prompt": "ignored"}))
    with mem0_tools.open_memory() as memory:
        memory.add([{"role": "user", "content": "My cat is called Biscuit."}], user_id="user", metadata={})
    hook_input = {
        "session_id": "c35cb1da",
        "transcript_path": "/memory/claude-code/projects/-workspace/c35cb1da.jsonl",
        "cwd": "/workspace",
        "permission_mode": "bypassPermissions",
        "hook_event_name": "UserPromptSubmit",
        "prompt": "What is my cat called?",
    }
    stdin, stdout = io.StringIO(json.dumps(hook_input)), io.StringIO()
    assert mem0_tools.recall_hook(stdin, stdout) == 0
    assert json.loads(stdout.getvalue()) == {
        "hookSpecificOutput": {
            "hookEventName": "UserPromptSubmit",
            "additionalContext": "What you remember about this (Mem0):\n- remembered: My cat is called Biscuit.",
        }
    }
    assert ("search", "What is my cat called?", 5, {"user_id": "user"}) in fake_mem0.CALLS
    (entry,) = _log(_memory_dir())
    assert entry["hook"] == "recall" and entry["recalled"] == ["remembered: My cat is called Biscuit."]
    assert entry["stored"] == 0 and entry["session"] == "c35cb1da" and entry["ms"] > 0 and "error" not in entry
    # Nothing relevant: no context at all (an empty heading would only cost tokens).
    stdout = io.StringIO()
    assert mem0_tools.recall_hook(io.StringIO(json.dumps({**hook_input, "prompt": "Weather?"})), stdout) == 0
    assert stdout.getvalue() == "" and _log(_memory_dir())[-1]["recalled"] == []


def test_the_transcripts_last_exchange_is_the_prompt_and_the_reply() -> None:
    lines = [json.dumps(e) for e in TRANSCRIPT] + ["", "{broken"]
    assert mem0_tools.last_exchange(lines) == ("What is my cat called?", "Your cat is Biscuit.")
    # The turn's prompt with no reply written yet: no reply (the earlier one is not it).
    assert mem0_tools.last_exchange(lines[:6]) == ("What is my cat called?", "")
    assert mem0_tools.last_exchange([]) == ("", "")


def test_the_store_hook_adds_the_exchange_to_mem0(
    fake_mem0: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    transcript = tmp_path / "s1.jsonl"
    transcript.write_text("".join(json.dumps(e) + "\n" for e in TRANSCRIPT))
    hook_input = {
        "session_id": "s1",
        "transcript_path": str(transcript),
        "cwd": "/workspace",
        "hook_event_name": "Stop",
        "stop_hook_active": False,
    }
    assert mem0_tools.store_hook(io.StringIO(json.dumps(hook_input))) == 0
    exchange = [
        {"role": "user", "content": "What is my cat called?"},
        {"role": "assistant", "content": "Your cat is Biscuit."},
    ]
    assert fake_mem0.CALLS[-1] == ("add", exchange, "user", {"session": "s1", "source": "claude-code"})
    # Claude Code 2.1.332 hands the final reply over itself: it wins over the transcript.
    monkeypatch.setenv("SCLATE_MEMORY_SYSTEM_USER", "alice")
    last = {**hook_input, "last_assistant_message": "It is Biscuit."}
    assert mem0_tools.store_hook(io.StringIO(json.dumps(last))) == 0
    assert fake_mem0.CALLS[-1][1][1] == {"role": "assistant", "content": "It is Biscuit."}
    assert fake_mem0.CALLS[-1][2] == "alice"
    log = _log(_memory_dir())
    assert [(e["hook"], e["stored"], e.get("error")) for e in log] == [("store", 1, None), ("store", 1, None)]
    # A turn without a prompt in its transcript stores nothing, and says why.
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    calls = len(fake_mem0.CALLS)
    assert mem0_tools.store_hook(io.StringIO(json.dumps({**hook_input, "transcript_path": str(empty)}))) == 0
    entry = _log(_memory_dir())[-1]
    assert entry["stored"] == 0 and entry["skipped"] == "no user message" and "error" not in entry
    assert len(fake_mem0.CALLS) == calls
    # A turn an API error ended (StopFailure) was still said: what the user said is kept,
    # with no reply (a Stop without a reply keeps nothing: the turn is not over).
    prompt_only = tmp_path / "prompt-only.jsonl"
    prompt_only.write_text("".join(json.dumps(e) + "\n" for e in TRANSCRIPT[:5]))
    cut = {**hook_input, "transcript_path": str(prompt_only)}
    assert mem0_tools.store_hook(io.StringIO(json.dumps(cut))) == 0
    assert _log(_memory_dir())[-1]["skipped"] == "no reply" and len(fake_mem0.CALLS) == calls
    failed = {**cut, "hook_event_name": "StopFailure", "error": "max_output_tokens"}
    assert mem0_tools.store_hook(io.StringIO(json.dumps(failed))) == 0
    assert fake_mem0.CALLS[-1][1] == [{"role": "user", "content": "What is my cat called?"}]
    assert _log(_memory_dir())[-1]["stored"] == 1


def test_the_hooks_never_fail_the_users_turn(fake_mem0: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    transcript = tmp_path / "s1.jsonl"
    transcript.write_text("".join(json.dumps(e) + "\n" for e in TRANSCRIPT))
    monkeypatch.setenv("FAKE_MEM0_FAIL", "1")
    stdout = io.StringIO()
    assert mem0_tools.recall_hook(io.StringIO(json.dumps({"prompt": "cat?"})), stdout) == 0
    assert stdout.getvalue() == ""
    assert mem0_tools.store_hook(io.StringIO(json.dumps({"transcript_path": str(transcript)}))) == 0
    monkeypatch.delenv("FAKE_MEM0_FAIL")
    assert mem0_tools.recall_hook(io.StringIO("not json"), io.StringIO()) == 0
    missing = {"transcript_path": str(tmp_path / "gone.jsonl")}
    assert mem0_tools.store_hook(io.StringIO(json.dumps(missing))) == 0
    errors = [(e["hook"], e["error"].split(":")[0]) for e in _log(_memory_dir())]
    assert errors == [
        ("recall", "ConnectionError"),
        ("store", "ConnectionError"),
        ("recall", "JSONDecodeError"),
        ("store", "FileNotFoundError"),
    ]
    # Every Memory opened was closed again, failures or not.
    assert fake_mem0.Memory.opened and all(m.closed for m in fake_mem0.Memory.opened)


def test_the_store_is_used_by_one_process_at_a_time(fake_mem0: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Another process (the MCP server, a hook) has the store: a hook waits, then gives up.
    root = _memory_dir()
    root.mkdir(parents=True)
    monkeypatch.setenv("SCLATE_MEMORY_LOCK_TIMEOUT_S", "0")
    with open(root / mem0_tools.LOCK_FILE, "a+") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX)
        assert mem0_tools.recall_hook(io.StringIO(json.dumps({"prompt": "cat?"})), io.StringIO()) == 0
        fcntl.flock(other.fileno(), fcntl.LOCK_UN)
    assert _log(root)[-1]["error"].startswith("TimeoutError: the Mem0 store")
    assert fake_mem0.Memory.opened == []
    assert mem0_tools.recall_hook(io.StringIO(json.dumps({"prompt": "cat?"})), io.StringIO()) == 0
    assert "error" not in _log(root)[-1]


def test_the_mcp_tools_and_dump(fake_mem0: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert json.loads(mem0_tools.add_memory("My cat is called Biscuit.")) == {"stored": 1}
    assert json.loads(mem0_tools.search_memories("cat", limit=500)) == ["remembered: My cat is called Biscuit."]
    assert fake_mem0.CALLS[-1] == ("search", "cat", 50, {"user_id": "user"})  # the limit is bounded
    log = _log(_memory_dir())
    assert [(e["hook"], e["tool"], e["stored"]) for e in log] == [
        ("mcp", "add_memory", 1),
        ("mcp", "search_memories", 0),
    ]
    out = io.StringIO()
    assert mem0_tools.dump(out) == 0
    (item,) = json.loads(out.getvalue())
    assert item["memory"] == "remembered: My cat is called Biscuit." and item["user_id"] == "user"
    assert fake_mem0.CALLS[-1] == ("get_all", {"user_id": "user"}, 100_000)
    # A failing tool call is an MCP error the model sees, and is logged.
    monkeypatch.setenv("FAKE_MEM0_FAIL", "1")
    with pytest.raises(ConnectionError):
        mem0_tools.search_memories("cat")
    assert _log(_memory_dir())[-1]["error"].startswith("ConnectionError")

    # The server: a test double of the MCP SDK's MCPServer, recording what is registered.
    registered: dict[str, Any] = {}

    class FakeMCPServer:
        def __init__(self, name: str, instructions: str = "") -> None:
            registered["name"] = name

        def tool(self, name: str, structured_output: bool, description: str) -> Any:
            def register(fn: Any) -> Any:
                registered[name] = (fn, structured_output, description)
                return fn

            return register

    sdk = types.ModuleType("mcp.server.mcpserver")
    sdk.MCPServer = FakeMCPServer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", sdk)
    assert isinstance(mem0_tools.build_server(), FakeMCPServer)
    assert registered["name"] == "mem0"
    assert registered["search_memories"][0] is mem0_tools.search_memories
    assert registered["add_memory"][0] is mem0_tools.add_memory
    assert "Mem0" in registered["search_memories"][2] and registered["add_memory"][1] is False


def test_sclate_mem0_answers_help_without_mem0(tmp_path: Path) -> None:
    # The image's build checks `sclate-mem0 --help`: no import of mem0 or mcp for it.
    with contextlib.redirect_stdout(io.StringIO()) as out, pytest.raises(SystemExit) as done:
        mem0_tools.main(["--help"])
    assert done.value.code == 0
    for command in ("mcp", "recall-hook", "store-hook", "dump"):
        assert command in out.getvalue()


# -- the whole chain: harness, bridge, hooks, sclate-mem0, the turn's memory detail ---------------


async def _turns(env: Mapping[str, str], *texts: str) -> list[TurnResult]:
    """Each text in a session of its own, through the harness, the bridge and the fake claude."""
    h = ClaudeCodeHarness({"turn_timeout_s": 60}, MEM0)
    ep = ProxyEndpoints("http://127.0.0.1:4001", "http://m", "http://x", "sk-sclate-run-secret", "the-model")
    await h.start(_LocalAccess({**env, **h.environment(ep)}))
    results = []
    try:
        for i, text in enumerate(texts, 1):
            await h.start_session(f"s{i}")
            results.append(await h.deliver(DeliverPrompt(text, session=f"s{i}", round_id=f"r{i}")))
            await h.stop_session()
    finally:
        await h.stop()
    return results


async def test_the_driver_passes_on_what_mem0_did_in_each_turn(tmp_path: Path) -> None:
    env = _fake_claude_env(tmp_path)
    told, asked = await _turns(env, "My cat is called Biscuit.", "What is my cat called?")
    first = told.details["memory"]
    assert first["system"] == "mem0" and first["recalled"] == [] and first["stored"] == 1
    assert first["recall_ms"] > 0 and first["store_ms"] > 0 and "store_error" not in first
    second = asked.details["memory"]
    assert second["recalled"] == ["remembered: My cat is called Biscuit."] and second["stored"] == 1
    # The recalled memory reached Claude Code as the hook's context (the double echoes it).
    assert asked.reply.endswith("| What you remember about this (Mem0):\n- remembered: My cat is called Biscuit.")
    # Claude Code was given the MCP server and its tools on every run.
    config = Path(env["CLAUDE_CONFIG_DIR"])
    for line in (config / "fake-argv.jsonl").read_text().splitlines():
        argv = json.loads(line)["argv"]
        assert argv[argv.index("--mcp-config") + 1] == str(config / "sclate-mcp.json")
        assert "mcp__mem0__search_memories,mcp__mem0__add_memory" in argv
    # Both exchanges are in the store.
    store = json.loads((tmp_path / "mem0" / "history.db.fake.json").read_text())
    assert [m["memory"] for m in store] == [
        "remembered: My cat is called Biscuit.",
        "remembered: What is my cat called?",
    ]


async def test_a_turn_that_ended_without_stop_is_stored_all_the_same(tmp_path: Path) -> None:
    """Claude Code fires no Stop for a turn an API error ended (the reply past the output
    bound): the bridge runs the store hook itself, and the error is not the reply."""
    (failed,) = await _turns(_fake_claude_env(tmp_path), "overlong: my cat is called Biscuit.")
    assert "output token maximum" in failed.details["error"]
    memory = failed.details["memory"]
    assert memory["stored"] == 1 and memory["store_ms"] > 0 and "store_error" not in memory, memory
    log = _log(tmp_path / "mem0")
    assert [e["hook"] for e in log] == ["recall", "store"]
    (stored,) = json.loads((tmp_path / "mem0" / "history.db.fake.json").read_text())
    assert stored["memory"] == "remembered: overlong: my cat is called Biscuit."
    # What was stored is the user's message and the reply it got, not Claude Code's error.
    assert [m["role"] for m in stored["given"]] == ["user", "assistant"]
    assert stored["given"][1]["content"].startswith("echo: overlong"), stored
