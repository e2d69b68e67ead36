#!/usr/bin/env python3
"""sclate-mem0: Mem0 (the mem0ai library) for a harness's own memory hooks and MCP tools.

Runs inside the sandbox on the interpreter Mem0 is installed in
(``/opt/mem0/venv/bin/python``, through the wrapper ``/usr/local/bin/sclate-mem0``
of the image ``<harness image>-mem0``). It imports only the standard library,
``mem0`` and ``mcp`` (nothing of sclate).

    sclate-mem0 mcp           an MCP server on stdio: tools search_memories(query, limit)
                              and add_memory(text)
    sclate-mem0 recall-hook   a Claude Code ``UserPromptSubmit`` hook: the memories about
                              the prompt, added to the model's context
    sclate-mem0 store-hook    a Claude Code ``Stop`` hook: the exchange (the last user
                              message and the last reply) added to Mem0
    sclate-mem0 dump          every memory in the store, as JSON

Why a program of our own: Mem0's official MCP server (``mem0-mcp-server``) talks
only to Mem0's hosted platform, and a sandbox reaches nothing but the capture
proxy. This one is the same library the reference harness uses in-process, with
the same configuration (:func:`mem0_config`): Qdrant embedded on local disk and a
SQLite history under ``SCLATE_MEMORY_SYSTEM_DIR`` (``/memory/mem0``: snapshots and
branches keep it), its LLM and embedding calls to ``SCLATE_MEMORY_SYSTEM_BASE_URL`` (the
capture proxy's listener for memory systems) with ``SCLATE_MEMORY_SYSTEM_API_KEY`` and
``SCLATE_MEMORY_SYSTEM_MODEL``; memories belong to ``SCLATE_MEMORY_SYSTEM_USER`` (``user``).

The hooks never fail the user's turn: whatever goes wrong is logged and they exit
0. Each appends one JSON line to ``<SCLATE_MEMORY_SYSTEM_DIR>/hook-log.jsonl``
(``{"hook": "recall"|"store", "recalled": [...], "stored": n, "ms": ..., "error": ...}``;
a tool call of the MCP server appends ``{"hook": "mcp", "tool": ...}``), which is
how the harness's bridge learns what the memory system did in a turn.

One process at a time: embedded Qdrant locks its folder for as long as a client
is open, and a Claude Code process keeps its MCP server alive while its hooks run
as processes of their own. So every use opens the store under an exclusive file
lock and closes it afterwards: the hooks and the MCP server take turns.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

RECALL_HEADING = "What you remember about this (Mem0):"
HOOK_LOG = "hook-log.jsonl"
LOCK_FILE = ".sclate-mem0.lock"
_ERROR_CHARS = 500
_process_lock = threading.Lock()


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        return default


def data_dir() -> Path:
    return Path(os.environ.get("SCLATE_MEMORY_SYSTEM_DIR") or os.environ.get("MEM0_DIR") or "/memory/mem0")


def user_id() -> str:
    return os.environ.get("SCLATE_MEMORY_SYSTEM_USER") or "user"


def mem0_config(root: Path) -> dict[str, Any]:
    """``Memory.from_config``'s argument, read from sclate's memory-system environment.

    The one configuration of Mem0 in sclate: the hooks, the MCP server and the
    reference harness (adapters/reference_harness/agent.py, ``Mem0Memory``) all use it."""
    base = os.environ.get("SCLATE_MEMORY_SYSTEM_BASE_URL", "")
    key = os.environ.get("SCLATE_MEMORY_SYSTEM_API_KEY") or "sclate"
    dims = _env_int("SCLATE_EMBEDDING_DIMS", 384)
    return {
        "llm": {
            "provider": "openai",
            "config": {
                "model": os.environ.get("SCLATE_MEMORY_SYSTEM_MODEL") or "default",
                "openai_base_url": base,
                "api_key": key,
                "max_tokens": _env_int("SCLATE_MEMORY_MAX_TOKENS", 256),
                "temperature": 0.1,
            },
        },
        "embedder": {
            "provider": "openai",
            "config": {
                "model": os.environ.get("SCLATE_EMBEDDING_MODEL") or "text-embedding",
                "openai_base_url": base,
                "api_key": key,
                "embedding_dims": dims,
            },
        },
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "collection_name": "memories",
                "path": str(root / "qdrant"),
                "on_disk": True,
                "embedding_model_dims": dims,
            },
        },
        "history_db_path": str(root / "history.db"),
    }


@contextlib.contextmanager
def _exclusive(root: Path) -> Iterator[None]:
    """This process's and every other's turn at the store (a file lock, waited for)."""
    root.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + _env_int("SCLATE_MEMORY_LOCK_TIMEOUT_S", 600)
    with _process_lock, open(root / LOCK_FILE, "a+") as f:
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the Mem0 store {root} stayed locked by another process") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _close(memory: Any) -> None:
    """Release what ``Memory`` holds: its SQLite history and Qdrant's folder lock."""
    with contextlib.suppress(Exception):
        memory.close()
    client = getattr(getattr(memory, "vector_store", None), "client", None)
    if client is not None:
        with contextlib.suppress(Exception):
            client.close()


EXTRACTION_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "mem0_extracted_memories",
        "strict": False,
        "schema": {
            "type": "object",
            "properties": {
                "memory": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "text": {"type": "string"},
                            "attributed_to": {"type": "string"},
                            "linked_memory_ids": {"type": "array", "items": {"type": "string"}},
                        },
                        "required": ["id", "text"],
                    },
                }
            },
            "required": ["memory"],
        },
    },
}
"""The answer Mem0 2.2.1's extraction prompt asks for (``{"memory": [{"id", "text", ...}]}``),
as a JSON schema.

Mem0 asks for it with ``response_format={"type": "json_object"}`` only: any JSON
object is allowed, and Mem0 then calls ``.get("text")`` on each item. A small
model often answers ``{"memory": ["a fact", ...]}``, and Mem0 fails the whole
``add`` with ``AttributeError: 'str' object has no attribute 'get'`` (seen with the
embedded 135M model). With this schema the model server's grammar allows only the
shape Mem0 parses; a hosted model that follows the prompt answers the same.
"""


def _ask_for_the_extraction_shape(llm: Any) -> None:
    """Make ``llm`` (Mem0's OpenAI client wrapper) send :data:`EXTRACTION_FORMAT`
    wherever Mem0 asks for a bare JSON object: in 2.2.1 only the memory extraction
    does (``Memory._add_to_vector_store``, sync and async). Mem0 itself is unchanged."""
    generate = llm.generate_response

    def generate_response(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("response_format") == {"type": "json_object"}:
            kwargs["response_format"] = EXTRACTION_FORMAT
        return generate(*args, **kwargs)

    llm.generate_response = generate_response


def new_memory(root: Path) -> Any:
    """A Mem0 ``Memory`` on the store at ``root`` (:func:`mem0_config`), its extraction
    answers shaped (:data:`EXTRACTION_FORMAT`). The reference harness keeps one for its
    whole life; the hooks and the MCP server take one per use (:func:`open_memory`)."""
    # Mem0 reads MEM0_TELEMETRY once, when it is imported (and phones home unless it is False).
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("MEM0_DIR", str(root))
    mem0 = importlib.import_module("mem0")  # only in an image with Mem0 installed
    memory = mem0.Memory.from_config(mem0_config(root))
    _ask_for_the_extraction_shape(memory.llm)
    return memory


@contextlib.contextmanager
def open_memory() -> Iterator[Any]:
    """A Mem0 ``Memory`` on the store, for one use, then closed (see the module's docstring).

    Anything Mem0 prints goes to stderr: stdout is the hook's answer or the MCP wire."""
    root = data_dir()
    with _exclusive(root), contextlib.redirect_stdout(sys.stderr):
        memory = new_memory(root)
        try:
            yield memory
        finally:
            _close(memory)


def _results(value: Any) -> list[dict[str, Any]]:
    items = value.get("results", []) if isinstance(value, dict) else value
    return [r for r in items if isinstance(r, dict)] if isinstance(items, list) else []


def search(memory: Any, query: str, limit: int) -> list[str]:
    """The memories Mem0 finds for ``query``, best first (at most ``limit``)."""
    found = memory.search(query, top_k=limit, filters={"user_id": user_id()})
    return [str(r["memory"]) for r in _results(found) if r.get("memory")]


def add(memory: Any, messages: list[dict[str, str]], metadata: dict[str, Any]) -> int:
    """Mem0 extracts what is worth keeping; returns how many memories it added or changed."""
    return len(_results(memory.add(messages, user_id=user_id(), metadata=metadata)))


def everything(memory: Any) -> list[dict[str, Any]]:
    return _results(memory.get_all(filters={"user_id": user_id()}, top_k=100_000))


def log_entry(entry: dict[str, Any]) -> None:
    """One line of the hook log (best effort: a log that cannot be written is no failure)."""
    root = data_dir()
    with contextlib.suppress(Exception):
        root.mkdir(parents=True, exist_ok=True)
        with open(root / HOOK_LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]


def recall_context(recalled: list[str]) -> str:
    return RECALL_HEADING + "\n" + "\n".join(f"- {m}" for m in recalled)


# -- the transcript -------------------------------------------------------------------------


def _texts(content: Any) -> list[str]:
    """A message's own text (tool calls, tool results and thinking left out)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text"]


def _said(entry: dict[str, Any], role: str) -> str:
    """What ``entry`` (a transcript line) says as ``role``: "" for anything else.

    A line that is not the conversation's own is skipped: a sub-agent's
    (``isSidechain``), Claude Code's meta lines, a compaction summary, tool
    calls and results, its ``<...>`` blocks (system reminders, local command
    output), and the error it writes as the assistant's when a turn fails. Hook
    context and other attachments are lines of their own type."""
    if (
        entry.get("type") != role
        or entry.get("isSidechain")
        or entry.get("isMeta")
        or entry.get("isCompactSummary")
        or entry.get("isApiErrorMessage")
    ):
        return ""
    message = entry.get("message")
    if not isinstance(message, dict) or message.get("role", role) != role:
        return ""
    texts = [t.strip() for t in _texts(message.get("content"))]
    if role == "user":
        texts = [t for t in texts if not t.startswith("<")]
    return "\n".join(t for t in texts if t)


def last_exchange(lines: Iterable[str]) -> tuple[str, str]:
    """The last user message of a Claude Code transcript (JSONL) and the last reply
    after it (the text of the last assistant line that has any)."""
    user, reply = "", ""
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        said = _said(entry, "user")
        if said:
            user, reply = said, ""
            continue
        said = _said(entry, "assistant")
        if said:
            reply = said
    return user, reply


def _hook_input(stdin: IO[str]) -> dict[str, Any]:
    data = json.loads(stdin.read() or "{}")
    if not isinstance(data, dict):
        raise ValueError("the hook's input is not a JSON object")
    return data


# -- the commands -----------------------------------------------------------------------------


def recall_hook(stdin: IO[str], stdout: IO[str]) -> int:
    """``UserPromptSubmit``: the memories about the prompt, as context for the model
    (``hookSpecificOutput.additionalContext``). Always exits 0."""
    started = time.monotonic()
    entry: dict[str, Any] = {"hook": "recall", "recalled": [], "stored": 0}
    answer = ""
    try:
        data = _hook_input(stdin)
        entry["session"] = str(data.get("session_id") or "")
        prompt = str(data.get("prompt") or "").strip()
        if prompt:
            with open_memory() as memory:
                entry["recalled"] = search(memory, prompt, _env_int("SCLATE_MEMORY_TOP_K", 5))
        if entry["recalled"]:
            context = recall_context(entry["recalled"])
            answer = json.dumps(
                {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": context}}
            )
    except Exception as exc:  # the turn goes on without memories
        entry["error"] = _error(exc)
    entry["ms"] = 1000 * (time.monotonic() - started)
    log_entry(entry)
    if answer:
        with contextlib.suppress(Exception):
            stdout.write(answer + "\n")
            stdout.flush()
    return 0


def store_hook(stdin: IO[str]) -> int:
    """``Stop``: the turn's exchange (the last user message and the reply) added to Mem0.
    With ``StopFailure``'s input (the turn ended by an API error, its reply cut off or
    missing; the bridge runs it so): what was said is added all the same, the user's
    message alone if there was no reply.
    Always exits 0 (it never asks Claude Code to go on)."""
    started = time.monotonic()
    entry: dict[str, Any] = {"hook": "store", "recalled": [], "stored": 0}
    try:
        data = _hook_input(stdin)
        session = str(data.get("session_id") or "")
        entry["session"] = session
        path = str(data.get("transcript_path") or "")
        user, reply = "", ""
        if path:
            with open(path, errors="replace") as f:
                user, reply = last_exchange(f)
        # Claude Code hands the final reply over itself (newer versions): it wins over a
        # transcript that may not have it written yet.
        last = data.get("last_assistant_message")
        if isinstance(last, str) and last.strip():
            reply = last.strip()
        failed = data.get("hook_event_name") == "StopFailure"
        if user and (reply or failed):
            messages = [{"role": "user", "content": user}]
            if reply:
                messages.append({"role": "assistant", "content": reply})
            with open_memory() as memory:
                entry["stored"] = add(memory, messages, {"session": session, "source": "claude-code"})
        else:
            entry["skipped"] = "no user message" if not user else "no reply"
    except Exception as exc:  # the turn is over either way
        entry["error"] = _error(exc)
    entry["ms"] = 1000 * (time.monotonic() - started)
    log_entry(entry)
    return 0


def search_memories(query: str, limit: int = 5) -> str:
    """The MCP tool: memories relevant to ``query`` (JSON list of texts)."""
    started = time.monotonic()
    entry: dict[str, Any] = {"hook": "mcp", "tool": "search_memories", "recalled": [], "stored": 0}
    try:
        with open_memory() as memory:
            entry["recalled"] = search(memory, query, max(1, min(int(limit), 50)))
    except Exception as exc:
        entry["error"] = _error(exc)
        raise
    finally:
        entry["ms"] = 1000 * (time.monotonic() - started)
        log_entry(entry)
    return json.dumps(entry["recalled"])


def add_memory(text: str) -> str:
    """The MCP tool: ``text`` added to Mem0 (it extracts the facts worth keeping)."""
    started = time.monotonic()
    entry: dict[str, Any] = {"hook": "mcp", "tool": "add_memory", "recalled": [], "stored": 0}
    try:
        with open_memory() as memory:
            entry["stored"] = add(memory, [{"role": "user", "content": text}], {"source": "claude-code-mcp"})
    except Exception as exc:
        entry["error"] = _error(exc)
        raise
    finally:
        entry["ms"] = 1000 * (time.monotonic() - started)
        log_entry(entry)
    return json.dumps({"stored": entry["stored"]})


def build_server() -> Any:
    """The MCP server (the SDK's ``MCPServer``, called ``FastMCP`` before mcp 2)."""
    try:
        server_class = importlib.import_module("mcp.server.mcpserver").MCPServer
    except ImportError:  # mcp 1.x
        server_class = importlib.import_module("mcp.server.fastmcp").FastMCP
    server = server_class(
        "mem0",
        instructions="Long-term memory (Mem0): search_memories before answering from what you may "
        "have been told before; add_memory to keep a fact for later conversations.",
    )

    server.tool(
        name="search_memories",
        structured_output=False,
        description="Search your long-term memory (Mem0) for what you know about `query`. "
        "Returns a JSON list of remembered facts, most relevant first (at most `limit`).",
    )(search_memories)
    server.tool(
        name="add_memory",
        structured_output=False,
        description="Remember `text` in your long-term memory (Mem0) for later conversations.",
    )(add_memory)
    return server


def dump(stdout: IO[str]) -> int:
    with open_memory() as memory:
        items = everything(memory)
    stdout.write(json.dumps(items, indent=1, default=str) + "\n")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="sclate-mem0", description="Mem0 (mem0ai) as Claude Code hooks and an MCP server, offline."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("mcp", help="an MCP server on stdio: search_memories, add_memory")
    sub.add_parser("recall-hook", help="Claude Code UserPromptSubmit hook (hook JSON on stdin)")
    sub.add_parser("store-hook", help="Claude Code Stop hook (hook JSON on stdin)")
    sub.add_parser("dump", help="print every memory in the store as JSON")
    args = parser.parse_args(argv)
    if args.command == "recall-hook":
        return recall_hook(sys.stdin, sys.stdout)
    if args.command == "store-hook":
        return store_hook(sys.stdin)
    if args.command == "dump":
        return dump(sys.stdout)
    build_server().run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
