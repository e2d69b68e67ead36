#!/usr/bin/env python3
"""sclate's reference harness: a small tool-using agent with file-based memory.

Standard library only: it runs on the sandbox's system python3.

    agent.py serve              JSON lines on stdin -> JSON lines on stdout (for sclate)
    agent.py once "message"     one turn, the reply on stdout (manual use)
    agent.py consolidate        fold past days' notes into MEMORY.md (one model call)

Serve protocol (one JSON object per line each way):

    in  {"type": "message", "text": ..., "session": ..., "round_id": ...}
    out {"type": "received", "wall_ns": ..., "mono_ns": ..., "seq": n, "round_id": ...}   at once
    out {"type": "turn_end", "round_id": ..., "reply": ..., "steps": n, "error": ...}
    in  {"type": "start_session", "session": ...}  out {"type": "session_started", ...}
    in  {"type": "stop_session"}                   out {"type": "session_stopped", ...}
    in  {"type": "dump_state"}                     out {"type": "state", "state": {...}}
    in  {"type": "load_state", "state": {...}}     out {"type": "state_loaded"}
    in  {"type": "ping"}                           out {"type": "pong"}
    bad input                                      out {"type": "error", "error": ...}

The model is reached through the OpenAI-compatible chat completions API at
OPENAI_BASE_URL with OPENAI_API_KEY; every call carries ``x-sclate-thread``
(the session) and ``x-sclate-turn`` (the round) so sclate's capture proxy can
attribute it. Memory lives in AGENT_MEMORY_DIR (default /memory): MEMORY.md and
notes/YYYY-MM-DD.md, dated by the system clock, which in a sandbox is the
simulated clock (libfaketime). Environment: AGENT_MODEL, AGENT_WORKSPACE,
AGENT_MEMORY_DIR, AGENT_MAX_STEPS, AGENT_SHELL_TIMEOUT, AGENT_OUTPUT_CAP,
AGENT_HISTORY_CHARS, AGENT_MAX_TOKENS, AGENT_TEMPERATURE, AGENT_HTTP_TIMEOUT.

A memory system besides the notes (AGENT_MEMORY_SYSTEM): ``mem0`` (the mem0ai
library in this process; run the agent with the python that has it) or
``hindsight`` (a Hindsight API server at AGENT_HINDSIGHT_URL, bank
AGENT_HINDSIGHT_BANK). Used the way their documentation shows: before each turn
the memories relevant to the message are recalled into that message, after it
the exchange is stored. Their own model and embedding calls go to sclate's
memory listener (SCLATE_MEMORY_SYSTEM_BASE_URL, set for the memory system).
What a turn recalled and stored is reported in its ``turn_end`` (``memory``).

A session's calls extend one another, so that the model's tokens of one call
are the start of the next (token-faithful rollouts, see docs/rollouts.md): the
system prompt (persona files, MEMORY.md, the notes of yesterday and today, the
session's start time) is written once when the session's first message comes,
and stays; what changes every turn (the current time, recalled memories) goes
into the turn's user message; the tools are offered on every call; the
history keeps a turn's tool calls and results and the replies as the model
sent them; and it is trimmed by whole turns, oldest first.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PERSONA_FILES = ("AGENTS.md", "SOUL.md", "IDENTITY.md", "USER.md", "TOOLS.md")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file (path relative to the workspace).",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Create or overwrite a text file (parent folders are created).",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_dir",
            "description": "List a folder (default: the workspace root).",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "shell",
            "description": "Run a shell command in the workspace and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "wait",
            "description": "Wait for a duration like 90s, 15m or 2h (simulated time).",
            "parameters": {
                "type": "object",
                "properties": {"duration": {"type": "string"}},
                "required": ["duration"],
            },
        },
    },
]
_REQUIRED: dict[str, tuple[str, ...]] = {
    "read_file": ("path",),
    "write_file": ("path", "content"),
    "list_dir": (),
    "shell": ("command",),
    "wait": ("duration",),
}
_SLEEP = re.compile(r"^\s*sleep\s+(\d+(?:\.\d+)?)([smhd]?)\s*$")


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass
class Config:
    base_url: str = field(default_factory=lambda: os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:18080/v1"))
    api_key: str = field(default_factory=lambda: os.environ.get("OPENAI_API_KEY", "sclate"))
    model: str = field(default_factory=lambda: os.environ.get("AGENT_MODEL", os.environ.get("OPENAI_MODEL", "default")))
    workspace: Path = field(default_factory=lambda: Path(os.environ.get("AGENT_WORKSPACE", "/workspace")))
    memory: Path = field(default_factory=lambda: Path(os.environ.get("AGENT_MEMORY_DIR", "/memory")))
    max_steps: int = field(default_factory=lambda: max(0, _env_int("AGENT_MAX_STEPS", 6)))
    shell_timeout: float = field(default_factory=lambda: _env_float("AGENT_SHELL_TIMEOUT", 60.0))
    output_cap: int = field(default_factory=lambda: max(200, _env_int("AGENT_OUTPUT_CAP", 4000)))
    history_chars: int = field(default_factory=lambda: _env_int("AGENT_HISTORY_CHARS", 12000))
    max_tokens: int = field(default_factory=lambda: _env_int("AGENT_MAX_TOKENS", 512))
    temperature: float = field(default_factory=lambda: _env_float("AGENT_TEMPERATURE", 0.2))
    http_timeout: float = field(default_factory=lambda: _env_float("AGENT_HTTP_TIMEOUT", 600.0))


class ModelError(Exception):
    pass


def _log(msg: str) -> None:
    # stdout is the protocol channel; diagnostics go to stderr.
    print(f"agent: {msg}", file=sys.stderr, flush=True)


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


def _now() -> dt.datetime:
    # The system clock: simulated inside a sclate sandbox (libfaketime).
    return dt.datetime.now(dt.UTC)


# -- the model --------------------------------------------------------------------------


class Model:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._tools_supported = True

    def chat(self, messages: list[dict[str, Any]], *, thread: str, turn: str, tools: bool) -> dict[str, Any]:
        """One chat completion; returns the choice's message."""
        body: dict[str, Any] = {
            "model": self.cfg.model,
            "messages": messages,
            "max_tokens": self.cfg.max_tokens,
            "temperature": self.cfg.temperature,
        }
        if tools and self._tools_supported:
            body["tools"] = TOOLS
        try:
            return self._post(body, thread, turn)
        except ModelError as exc:
            # Some servers reject `tools`; the JSON-in-content convention still works.
            if "tools" in body and "HTTP 400" in str(exc):
                self._tools_supported = False
                del body["tools"]
                return self._post(body, thread, turn)
            raise

    def _post(self, body: dict[str, Any], thread: str, turn: str) -> dict[str, Any]:
        url = self.cfg.base_url.rstrip("/") + "/chat/completions"
        req = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {self.cfg.api_key}",
                "x-sclate-thread": thread,
                "x-sclate-turn": turn,
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=self.cfg.http_timeout) as resp:
                payload = json.loads(resp.read().decode("utf-8", errors="replace"))
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")[:500]
            raise ModelError(f"HTTP {exc.code} from {url}: {detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ModelError(f"model call to {url} failed: {exc}") from None
        try:
            message = payload["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise ModelError(f"unexpected response from {url}: {str(payload)[:300]}") from None
        if not isinstance(message, dict):
            raise ModelError(f"unexpected message from {url}: {message!r}")
        return message


# -- tool calls ---------------------------------------------------------------------------


@dataclass
class ToolCall:
    name: str
    args: dict[str, Any]
    call_id: str | None = None


def _json_objects(text: str) -> list[Any]:
    """JSON values embedded in text (fenced blocks, or any ``{...}``)."""
    found: list[Any] = []
    stripped = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip())
    try:
        found.append(json.loads(stripped))
        return found
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        found.append(value)
        break
    return found


def _as_args(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return {}
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    return raw if isinstance(raw, dict) else None


def parse_tool_calls(message: dict[str, Any]) -> tuple[list[ToolCall], str]:
    """The calls a model message asks for, or ``([], why)`` when it is a plain answer.

    A malformed call (bad JSON, unknown tool, missing argument) makes the whole
    message a plain answer: a weak model's broken call must end the turn
    gracefully rather than loop or crash.
    """
    calls: list[ToolCall] = []
    api_calls = message.get("tool_calls") or []
    if isinstance(api_calls, list) and api_calls:
        for raw in api_calls:
            fn = raw.get("function") if isinstance(raw, dict) else None
            if not isinstance(fn, dict):
                return [], "malformed tool call"
            args = _as_args(fn.get("arguments"))
            if args is None:
                return [], f"bad JSON arguments for {fn.get('name')!r}"
            calls.append(ToolCall(str(fn.get("name")), args, raw.get("id")))
    else:
        content = message.get("content")
        if not isinstance(content, str) or "{" not in content:
            return [], "no tool call"
        for obj in _json_objects(content):
            if not isinstance(obj, dict):
                continue
            if "tool" in obj:
                name, raw_args = obj.get("tool"), obj.get("args", obj.get("arguments", {}))
            elif "name" in obj and any(k in obj for k in ("arguments", "args", "parameters")):
                name = obj.get("name")
                raw_args = obj.get("arguments", obj.get("args", obj.get("parameters")))
            else:
                continue
            args = _as_args(raw_args)
            if args is None:
                return [], f"bad JSON arguments for {name!r}"
            calls.append(ToolCall(str(name), args))
        if not calls:
            return [], "no tool call"
    for call in calls:
        if call.name not in _REQUIRED:
            return [], f"unknown tool {call.name!r}"
        missing = [a for a in _REQUIRED[call.name] if not isinstance(call.args.get(a), str)]
        if missing:
            return [], f"{call.name} lacks {', '.join(missing)}"
    return calls, ""


class Tools:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.written: list[str] = []

    def _path(self, raw: str) -> Path:
        path = Path(raw)
        return path if path.is_absolute() else self.cfg.workspace / path

    def run(self, call: ToolCall) -> str:
        try:
            handler: Callable[[dict[str, Any]], str] = getattr(self, f"_t_{call.name}")
            return _cap(handler(call.args), self.cfg.output_cap)
        except Exception as exc:  # a failing tool is a result for the model, not a crash
            return f"error: {type(exc).__name__}: {exc}"

    def _t_read_file(self, args: dict[str, Any]) -> str:
        return self._path(args["path"]).read_text(encoding="utf-8", errors="replace")

    def _t_write_file(self, args: dict[str, Any]) -> str:
        path = self._path(args["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(args["content"], encoding="utf-8")
        self.written.append(args["path"])
        return f"wrote {len(args['content'])} characters to {args['path']}"

    def _t_list_dir(self, args: dict[str, Any]) -> str:
        path = self._path(str(args.get("path") or "."))
        entries = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
        return "\n".join(entries) if entries else "(empty)"

    def _t_shell(self, args: dict[str, Any]) -> str:
        command = args["command"]
        sleep = _SLEEP.match(command)
        if sleep:
            # A real sleep would hold the simulated clock still; wait in simulated time.
            return self._t_wait({"duration": f"{sleep.group(1)}{sleep.group(2) or 's'}"})
        return self._exec(["/bin/sh", "-c", command], self.cfg.shell_timeout)

    def _t_wait(self, args: dict[str, Any]) -> str:
        duration = str(args["duration"]).strip()
        try:
            return self._exec(["sclate-wait", "--for", duration], None) or f"waited {duration}"
        except FileNotFoundError:
            return "error: sclate-wait is not available here"

    def _exec(self, argv: list[str], timeout: float | None) -> str:
        self.cfg.workspace.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            argv,
            cwd=self.cfg.workspace,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # so a timeout kills the command's children too
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            text = out.decode("utf-8", errors="replace")
            return f"{text}\n[timed out after {timeout:g}s; killed]"
        text = out.decode("utf-8", errors="replace")
        return f"{text}\n[exit code {proc.returncode}]" if proc.returncode else text


# -- memory -------------------------------------------------------------------------------


class Memory:
    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def main(self) -> Path:
        return self.root / "MEMORY.md"

    def notes_for(self, day: dt.date) -> Path:
        return self.root / "notes" / f"{day.isoformat()}.md"

    def read(self, path: Path, limit: int) -> str:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        # Keep the end of long notes: the latest entries matter most.
        return text if len(text) <= limit else "[...]\n" + text[-limit:]

    def add_note(self, when: dt.datetime, text: str) -> None:
        path = self.notes_for(when.date())
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(f"- {when.strftime('%H:%M')} {text}\n")

    def pending_days(self, today: dt.date) -> list[Path]:
        """Notes of past days not yet folded into MEMORY.md."""
        done = set(self._done())
        notes = sorted((self.root / "notes").glob("*.md"))
        out = []
        for path in notes:
            try:
                day = dt.date.fromisoformat(path.stem)
            except ValueError:
                continue
            if day < today and path.stem not in done:
                out.append(path)
        return out

    def _done(self) -> list[str]:
        try:
            data = json.loads((self.root / ".consolidated.json").read_text())
        except (OSError, ValueError):
            return []
        return [str(x) for x in data.get("days", [])] if isinstance(data, dict) else []

    def mark_done(self, days: list[str]) -> None:
        merged = sorted(set(self._done()) | set(days))
        _atomic_write(self.root / ".consolidated.json", json.dumps({"days": merged}) + "\n")


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# -- memory systems ---------------------------------------------------------------------------


class MemorySystemError(Exception):
    pass


class Mem0Memory:
    """Mem0 as a library: ``search`` before answering, ``add`` after (Mem0's own quickstart).

    Configured by ``sclate-mem0``'s module (``mem0_tools``, in every image with
    Mem0, at SCLATE_MEM0_TOOLS): the one configuration of Mem0 in sclate, read from
    the SCLATE_MEMORY_SYSTEM_* environment. Qdrant in embedded mode on local disk
    and the history in SQLite under SCLATE_MEMORY_SYSTEM_DIR (in the memory volume:
    snapshots keep them); its model and embedding calls to sclate's memory listener.
    """

    name = "mem0"

    def __init__(self) -> None:
        sys.path.insert(0, os.environ.get("SCLATE_MEM0_TOOLS", "/opt/sclate-mem0"))
        import mem0_tools  # type: ignore[import-not-found]  # only in an image with Mem0

        self.tools = mem0_tools
        self.top_k = _env_int("AGENT_MEMORY_TOP_K", 5)
        self.memory = mem0_tools.new_memory(mem0_tools.data_dir())

    def recall(self, query: str) -> list[str]:
        return list(self.tools.search(self.memory, query, self.top_k))

    def retain(self, text: str, reply: str, session: str) -> int:
        messages = [{"role": "user", "content": text}, {"role": "assistant", "content": reply}]
        return int(self.tools.add(self.memory, messages, {"session": session}))


class HindsightMemory:
    """A Hindsight API server over its REST API: ``recall`` before answering, ``retain`` after."""

    name = "hindsight"

    def __init__(self, url: str, bank: str, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.bank = bank
        self.timeout = timeout
        self.max_tokens = _env_int("AGENT_MEMORY_RECALL_TOKENS", 512)

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        url = f"{self.url}/v1/default/banks/{self.bank}/{path}"
        req = urllib.request.Request(
            url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read().decode("utf-8", errors="replace") or "null")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")[:300]
            raise MemorySystemError(f"HTTP {exc.code} from {url}: {detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise MemorySystemError(f"{url}: {exc}") from None

    def recall(self, query: str) -> list[str]:
        # Facts, experiences and consolidated observations alike: what it holds before
        # consolidation has run is facts (or raw chunks) only.
        body = {"query": query, "max_tokens": self.max_tokens, "types": ["world", "experience", "observation"]}
        found = self._post("memories/recall", body)
        items = found.get("results", []) if isinstance(found, dict) else []
        return [str(r.get("text", "")) for r in items if isinstance(r, dict) and r.get("text")]

    def retain(self, text: str, reply: str, session: str) -> int:
        content = f"user: {text}\nassistant: {reply}"
        item = {"content": content, "context": f"conversation {session}", "timestamp": _now().isoformat()}
        self._post("memories", {"items": [item], "async": False})
        return 1


def _memory_system(cfg: Config) -> Mem0Memory | HindsightMemory | None:
    name = os.environ.get("AGENT_MEMORY_SYSTEM", "").strip()
    if name in ("", "native"):
        return None
    if name == "mem0":
        return Mem0Memory()
    if name == "hindsight":
        url = os.environ.get("AGENT_HINDSIGHT_URL", "http://127.0.0.1:8888")
        return HindsightMemory(url, os.environ.get("AGENT_HINDSIGHT_BANK", "agent"), cfg.http_timeout)
    raise SystemExit(f"agent: unknown AGENT_MEMORY_SYSTEM {name!r}; use mem0 or hindsight")


# -- the agent ------------------------------------------------------------------------------


class Agent:
    def __init__(
        self, cfg: Config, model: Model | None = None, system: Mem0Memory | HindsightMemory | None = None
    ) -> None:
        self.cfg = cfg
        self.model = model or Model(cfg)
        self.memory = Memory(cfg.memory)
        self.system = system
        self.session = "default"
        self.history: list[dict[str, Any]] = []
        self.turn_starts: list[int] = []
        """Where each turn of ``history`` begins (trimmed by whole turns)."""
        self.system_text: str | None = None
        """The session's system prompt, written at its first message."""
        self.turns = 0

    def start_session(self, session: str | None) -> None:
        self.session = session or "default"
        self._reset()

    def stop_session(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.history = []
        self.turn_starts = []
        self.system_text = None

    def system_prompt(self) -> str:
        now = _now()
        parts = [
            f"You are a helpful assistant working in the folder {self.cfg.workspace}.",
            f"This session started {now.strftime('%A, %Y-%m-%d %H:%M')} UTC; each message "
            "begins with the time it was sent.",
            "Tools: read_file(path), write_file(path, content), list_dir(path), shell(command), "
            "wait(duration). Paths are relative to the workspace. To use a tool, call it, or "
            'reply with only a JSON object like {"tool": "write_file", "args": {"path": '
            '"notes/todo.md", "content": "..."}}. To wait, use the wait tool (or the '
            "`sclate-wait --for 10m` command), never sleep. When the task is done, answer in "
            "plain text.",
        ]
        for name in PERSONA_FILES:
            text = self.memory.read(self.cfg.workspace / name, 1500).strip()
            if text:
                parts.append(f"## {name}\n{text}")
        long_term = self.memory.read(self.memory.main, 3000).strip()
        if long_term:
            parts.append(f"## Your memory (MEMORY.md)\n{long_term}")
        for day in (now.date() - dt.timedelta(days=1), now.date()):
            notes = self.memory.read(self.memory.notes_for(day), 1500).strip()
            if notes:
                parts.append(f"## Your notes of {day.isoformat()}\n{notes}")
        return "\n\n".join(parts)

    @staticmethod
    def user_message(text: str, recalled: list[str]) -> str:
        """A turn's message as the model sees it: the time it was sent, what the memory
        system recalled for it (if any), then the text."""
        parts = [f"[{_now().strftime('%A, %Y-%m-%d %H:%M')} UTC]"]
        if recalled:
            lines = "\n".join(f"- {_cap(' '.join(m.split()), 500)}" for m in recalled)
            parts.append(f"## What you remember about this (your memory system)\n{lines}\n")
        parts.append(text)
        return "\n".join(parts)

    def _trim_history(self) -> None:
        # Whole turns, oldest first, and never the last one: a cut inside a turn would
        # leave tool results without their call.
        def size() -> int:
            return sum(
                len(str(m.get("content") or "")) + len(json.dumps(m.get("tool_calls") or "")) for m in self.history
            )

        while len(self.turn_starts) > 1 and size() > self.cfg.history_chars:
            cut = self.turn_starts[1]
            del self.history[:cut]
            self.turn_starts = [i - cut for i in self.turn_starts[1:]]

    def turn(self, text: str, round_id: str | None = None) -> dict[str, Any]:
        """One user message to the final reply; never raises."""
        self.turns += 1
        turn_id = round_id or f"{self.session}:{self.turns}"
        tools = Tools(self.cfg)
        memory_report: dict[str, Any] = {}
        recalled = self._recall(text, memory_report)
        if self.system_text is None:
            self.system_text = self.system_prompt()
        start = len(self.history)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.system_text},
            *self.history,
            {"role": "user", "content": self.user_message(text, recalled)},
        ]
        steps = 0
        reply = ""
        error: str | None = None
        try:
            while True:
                allow_tools = steps < self.cfg.max_steps
                if not allow_tools and steps:
                    messages.append(
                        {
                            "role": "user",
                            "content": "You have used all your tool steps. Answer now in plain text.",
                        }
                    )
                # The tools are offered on every call (the tool list is part of the prompt
                # the next call extends); past the last step a call is taken as the answer.
                message = self.model.chat(messages, thread=self.session, turn=turn_id, tools=True)
                content = message.get("content")
                content_text = content if isinstance(content, str) else ""
                calls, why = parse_tool_calls(message) if allow_tools else ([], "no tools left")
                if not calls:
                    reply = content_text or _describe_calls(message)
                    if why not in ("no tool call", "no tools left"):
                        _log(f"turn {turn_id}: {why}; taken as the answer")
                    messages.extend(_as_sent(message, content_text))
                    break
                steps += 1
                if message.get("tool_calls"):
                    messages.append(
                        {
                            "role": "assistant",
                            "content": content,
                            "tool_calls": message["tool_calls"],
                        }
                    )
                    for call in calls:
                        messages.append(
                            {
                                "role": "tool",
                                "tool_call_id": call.call_id or "",
                                "content": tools.run(call),
                            }
                        )
                else:
                    messages.append({"role": "assistant", "content": content_text})
                    results = "\n\n".join(f"Result of {c.name}:\n{tools.run(c)}" for c in calls)
                    messages.append({"role": "user", "content": results})
        except ModelError as exc:
            error = str(exc)
            _log(f"turn {turn_id}: {error}")
            messages.append({"role": "assistant", "content": ""})
        # The turn as the model saw it and answered: its next call extends it.
        self.turn_starts.append(start)
        self.history = messages[1:]
        self._trim_history()
        self._note(text, reply, tools.written, error)
        if error is None:
            self._retain(text, reply, memory_report)
        result: dict[str, Any] = {"reply": reply, "steps": steps, "error": error, "written": tools.written}
        if self.system is not None:
            result["memory"] = memory_report
        return result

    def _recall(self, text: str, report: dict[str, Any]) -> list[str]:
        if self.system is None:
            return []
        report["system"] = self.system.name
        started = time.monotonic()
        try:
            recalled = self.system.recall(text)
        except Exception as exc:  # a memory system's failure is reported, the turn goes on
            report["recall_error"] = f"{type(exc).__name__}: {exc}"[:500]
            _log(f"{self.system.name} recall failed: {report['recall_error']}")
            return []
        report.update(recalled=recalled, recall_ms=1000 * (time.monotonic() - started))
        return recalled

    def _retain(self, text: str, reply: str, report: dict[str, Any]) -> None:
        if self.system is None:
            return
        started = time.monotonic()
        try:
            report["stored"] = self.system.retain(text, reply, self.session)
        except Exception as exc:
            report["store_error"] = f"{type(exc).__name__}: {exc}"[:500]
            _log(f"{self.system.name} store failed: {report['store_error']}")
            return
        report["store_ms"] = 1000 * (time.monotonic() - started)

    def _note(self, text: str, reply: str, written: list[str], error: str | None) -> None:
        def short(s: str) -> str:
            s = " ".join(s.split())
            return s if len(s) <= 200 else s[:200] + "..."

        line = f"[{self.session}] asked: {short(text)} | replied: {short(reply) or '(nothing)'}"
        if written:
            line += f" | wrote: {', '.join(sorted(set(written)))}"
        if error:
            line += f" | model error: {short(error)}"
        try:
            self.memory.add_note(_now(), line)
        except OSError as exc:
            _log(f"could not write a note: {exc}")

    def consolidate(self) -> tuple[int, str]:
        """Fold past days' notes into MEMORY.md; (exit code, message)."""
        pending = self.memory.pending_days(_now().date())
        if not pending:
            return 0, "nothing to consolidate"
        notes = "\n\n".join(f"### {p.stem}\n{self.memory.read(p, 4000)}" for p in pending)
        current = self.memory.read(self.memory.main, 6000) or "(empty)"
        prompt = (
            "You keep a long-term memory file for an assistant. Merge the new notes into it. "
            "Keep facts about the user, their preferences, feedback received, and files created. "
            "Use short bullet points, at most 40 lines. Reply with the complete new file only.\n\n"
            f"## Current MEMORY.md\n{current}\n\n## New notes\n{notes}"
        )
        try:
            message = self.model.chat(
                [{"role": "user", "content": prompt}],
                # A thread of its own each night: it continues no earlier call.
                thread=f"consolidate-{_now().date().isoformat()}",
                turn=_now().date().isoformat(),
                tools=False,
            )
        except ModelError as exc:
            return 1, f"consolidation failed, memory unchanged: {exc}"
        content = message.get("content")
        text = re.sub(r"^```(?:markdown|md)?\s*|\s*```$", "", content.strip()) if isinstance(content, str) else ""
        if not text:
            return 1, "the model returned an empty memory; memory unchanged"
        _atomic_write(self.memory.main, text + "\n")
        self.memory.mark_done([p.stem for p in pending])
        return 0, f"consolidated {len(pending)} day(s) of notes into {self.memory.main}"

    def dump_state(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "history": self.history,
            "turn_starts": self.turn_starts,
            "system": self.system_text,
            "turns": self.turns,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.session = str(state.get("session", "default"))
        history = state.get("history", [])
        self.history = [m for m in history if isinstance(m, dict)] if isinstance(history, list) else []
        starts = state.get("turn_starts")
        if isinstance(starts, list) and all(isinstance(i, int) and 0 <= i < len(self.history) for i in starts):
            self.turn_starts = sorted(set(starts))
        else:
            # A state from before turns were kept whole: each user message starts one.
            self.turn_starts = [i for i, m in enumerate(self.history) if m.get("role") == "user"]
        if self.turn_starts[:1] != [0] and self.history:
            self.turn_starts.insert(0, 0)
        system = state.get("system")
        self.system_text = system if isinstance(system, str) else None
        self.turns = int(state.get("turns", 0))


def _as_sent(message: dict[str, Any], content_text: str) -> list[dict[str, Any]]:
    """A turn's last model message for the history, as the model sent it: with its tool
    calls, if it made any past its last step (each then answered as not run, so that
    the conversation stays well formed)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return [{"role": "assistant", "content": content_text}]
    out: list[dict[str, Any]] = [{"role": "assistant", "content": message.get("content"), "tool_calls": calls}]
    for call in calls:
        call_id = call.get("id") if isinstance(call, dict) else None
        out.append({"role": "tool", "tool_call_id": call_id or "", "content": "not run: the turn ended here"})
    return out


def _describe_calls(message: dict[str, Any]) -> str:
    """Text for a message that held only (broken) tool calls and no content."""
    calls = message.get("tool_calls")
    return json.dumps(calls)[:2000] if calls else ""


# -- entry points ----------------------------------------------------------------------------


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve(agent: Agent) -> int:
    received = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            _emit({"type": "error", "error": f"bad request: {exc}"})
            continue
        kind = req.get("type")
        if kind == "message":
            round_id = req.get("round_id")
            received += 1
            # Read before anything else: this is the receipt as the harness's own
            # (simulated) clock saw it, which sclate checks for order and earliness.
            _emit(
                {
                    "type": "received",
                    "wall_ns": time.time_ns(),
                    "mono_ns": time.monotonic_ns(),
                    "seq": received,
                    "round_id": round_id,
                }
            )
            if req.get("session") and req["session"] != agent.session:
                agent.start_session(str(req["session"]))
            result = agent.turn(str(req.get("text", "")), round_id if isinstance(round_id, str) else None)
            _emit({"type": "turn_end", "round_id": round_id, "wall_ns": time.time_ns(), **result})
        elif kind == "start_session":
            agent.start_session(req.get("session"))
            _emit({"type": "session_started", "session": agent.session})
        elif kind == "stop_session":
            agent.stop_session()
            _emit({"type": "session_stopped", "session": agent.session})
        elif kind == "dump_state":
            _emit({"type": "state", "state": agent.dump_state()})
        elif kind == "load_state":
            state = req.get("state")
            agent.load_state(state if isinstance(state, dict) else {})
            _emit({"type": "state_loaded"})
        elif kind == "ping":
            _emit({"type": "pong"})
        else:
            _emit({"type": "error", "error": f"unknown request type {kind!r}"})
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    cfg = Config()
    agent = Agent(cfg, system=_memory_system(cfg) if args[0] in ("serve", "once") else None)
    command = args[0]
    if command == "serve":
        return serve(agent)
    if command == "once":
        if len(args) < 2:
            print('usage: agent.py once "message"', file=sys.stderr)
            return 2
        result = agent.turn(" ".join(args[1:]))
        print(result["reply"])
        return 1 if result["error"] else 0
    if command == "consolidate":
        code, message = agent.consolidate()
        print(message, file=sys.stderr if code else sys.stdout)
        return code
    print(f"unknown command {command!r}; use serve, once or consolidate", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
