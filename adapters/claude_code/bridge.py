#!/usr/bin/env python3
"""sclate's bridge to an unmodified Claude Code inside its sandbox (stdlib only).

Claude Code is driven the way its own headless mode allows: one ``claude -p``
(print mode) process per message, ``--output-format stream-json --verbose``,
``--session-id UUID`` for a session's first message and ``--resume UUID`` for
the next ones; the turn ends when the process exits. This bridge does no model
call and changes no Claude Code file it does not own (but for Mem0's hooks in
its settings, below); it only

* ``setup``: makes ``$CLAUDE_CONFIG_DIR`` (the memory volume) and reports the
  program's version; with the run's memory system Mem0 (settings ``memory``)
  it attaches Mem0 the way a Claude Code user would: hooks in Claude Code's
  user settings (``$CLAUDE_CONFIG_DIR/settings.json``: ``UserPromptSubmit`` ->
  ``sclate-mem0 recall-hook``, ``Stop`` -> ``sclate-mem0 store-hook``; any other
  setting and hook is kept) and an MCP server config
  (``$CLAUDE_CONFIG_DIR/sclate-mcp.json``: ``sclate-mem0 mcp``), passed to each
  run with ``--mcp-config`` and its tools allowed with ``--allowedTools``;
* ``serve``: speaks sclate's JSON-lines harness protocol on stdin/stdout
  (``start_session`` / ``message`` / ``stop_session``), runs one Claude Code
  process per message and keeps which Claude Code session continues which of
  the run's sessions in ``$CLAUDE_CONFIG_DIR/sclate-sessions.json`` (in the
  memory volume: snapshots, branches and daemon restarts keep it).

A session id is kept only once Claude Code wrote that session's transcript
(``projects/<cwd>/<id>.jsonl``): a first message that failed before then is
started afresh next time instead of resuming a session that does not exist.

With Mem0, each ``turn_end`` carries ``memory``: what the hooks (and the MCP
tools, if the model called them) did during the turn, read from the new lines
of ``$SCLATE_MEMORY_SYSTEM_DIR/hook-log.jsonl`` (``system``, ``recalled``,
``recall_ms``, ``stored``, ``store_ms``, ``recall_error``, ``store_error``: the
reference harness's shape).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CLAUDE = os.environ.get("SCLATE_CLAUDE_BIN", "claude")
WORKDIR = os.environ.get("SCLATE_CLAUDE_WORKDIR", "/workspace")
SESSIONS_FILE = "sclate-sessions.json"
SETTINGS_FILE = "settings.json"
MCP_FILE = "sclate-mcp.json"
MEM0 = os.environ.get("SCLATE_MEM0_BIN", "sclate-mem0")
MEM0_TOOLS = ("mcp__mem0__search_memories", "mcp__mem0__add_memory")
HOOK_LOG = "hook-log.jsonl"
_TAIL = 4000


def home() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR", "/memory/claude-code"))


def hook_log() -> Path:
    return Path(os.environ.get("SCLATE_MEMORY_SYSTEM_DIR") or "/memory/mem0") / HOOK_LOG


def _write_atomic(path: Path, text: str) -> None:
    """Written whole or not at all: a crash mid-write leaves the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _run(argv: list[str], *, timeout_s: float) -> dict[str, Any]:
    """Run Claude Code to its end, or end it past ``timeout_s``.

    Its own process group is ended either way: a command its Bash tool left
    running in the background would otherwise outlive the turn (and a timed-out
    Claude Code would keep streaming from the model and writing its transcript
    while the next message resumes it)."""
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=WORKDIR if os.path.isdir(WORKDIR) else None,
            env=claude_env(os.environ),
            start_new_session=True,
        )
    except OSError as exc:
        return {"exit_code": -2, "stdout": "", "stderr": f"cannot run {argv[0]}: {exc}"}
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        out, _ = proc.communicate()
        return {"exit_code": -1, "stdout": out.decode(errors="replace"), "stderr": f"timed out after {timeout_s:g} s"}
    finally:
        _end_group(proc)
    return {
        "exit_code": proc.returncode,
        "stdout": out.decode(errors="replace"),
        "stderr": err.decode(errors="replace"),
    }


def claude_env(environ: Mapping[str, str]) -> dict[str, str]:
    """This process's environment for Claude Code, less libfaketime's shared state.

    libfaketime (``LD_PRELOAD``, the sandbox's simulated clock) hands its
    semaphore to child processes in ``FAKETIME_SHARED``. The Claude Code binary
    cannot open an inherited one (its ``sem_open`` fails, and libfaketime then
    exits the process before ``main``), but it runs fine as the creator of its
    own; the clock itself comes from the timestamp file either way, so nothing
    of simulated time is lost."""
    return {k: v for k, v in environ.items() if k != "FAKETIME_SHARED"}


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def setup(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The config directory exists; Claude Code answers ``--version`` (a broken
    install fails the run's start, not its first turn); the memory system is attached."""
    home().mkdir(parents=True, exist_ok=True)
    proc = _run([CLAUDE, "--version"], timeout_s=60)
    if proc["exit_code"] != 0:
        why = (proc["stdout"] + proc["stderr"]).strip()[-800:]
        return {"type": "setup", "errors": [f"`claude --version` failed ({proc['exit_code']}): {why}"]}
    report: dict[str, Any] = {"type": "setup", "version": proc["stdout"].strip()}
    if settings.get("memory") == "mem0":
        try:
            attach_mem0(float(settings["turn_timeout_s"]))
        except (OSError, ValueError) as exc:
            return {"type": "setup", "errors": [f"cannot attach Mem0 to Claude Code: {exc}"]}
        report["memory"] = "mem0"
    return report


# -- Mem0: hooks in Claude Code's settings, an MCP server, the hook log ----------------------

# Not StopFailure: Claude Code does not wait for it (the process exits, and its process
# group with the hook in it is ended); a turn that ended without Stop is stored by
# ``store_unstopped_turn`` instead.
_HOOKS = {"UserPromptSubmit": "recall-hook", "Stop": "store-hook"}


def _ours(group: Any) -> bool:
    """A settings hook group that is sclate-mem0's (replaced on every setup)."""
    hooks = group.get("hooks") if isinstance(group, dict) else None
    return (
        isinstance(hooks, list)
        and bool(hooks)
        and all(isinstance(h, dict) and str(h.get("command", "")).startswith(MEM0 + " ") for h in hooks)
    )


def mem0_settings(current: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
    """Claude Code's user settings with Mem0's hooks: recall on ``UserPromptSubmit``,
    store on ``Stop``, each allowed the whole turn (a small model's memory calls are
    slow). Every other setting and hook is kept; ours are replaced, not repeated."""
    settings = dict(current)
    hooks = dict(settings.get("hooks") or {}) if isinstance(settings.get("hooks"), dict) else {}
    for event, command in _HOOKS.items():
        groups = hooks.get(event)
        kept = [g for g in groups if not _ours(g)] if isinstance(groups, list) else []
        mine = {"type": "command", "command": f"{MEM0} {command}", "timeout": max(1, int(timeout_s))}
        hooks[event] = [*kept, {"hooks": [mine]}]
    settings["hooks"] = hooks
    return settings


def mcp_config() -> dict[str, Any]:
    """``--mcp-config``: sclate-mem0's MCP server on stdio (tools ``MEM0_TOOLS``)."""
    return {"mcpServers": {"mem0": {"command": MEM0, "args": ["mcp"]}}}


def attach_mem0(timeout_s: float) -> None:
    path = home() / SETTINGS_FILE
    try:
        current = json.loads(path.read_text())
    except FileNotFoundError:
        current = {}
    if not isinstance(current, dict):
        raise ValueError(f"{path} is not a JSON object")
    _write_atomic(path, json.dumps(mem0_settings(current, timeout_s), indent=2) + "\n")
    _write_atomic(home() / MCP_FILE, json.dumps(mcp_config(), indent=2) + "\n")


def log_size() -> int:
    try:
        return hook_log().stat().st_size
    except OSError:
        return 0


def log_since(offset: int) -> list[dict[str, Any]]:
    """The hook log's entries written after ``offset`` (from the start if it shrank)."""
    try:
        with hook_log().open("rb") as f:
            if f.seek(0, os.SEEK_END) < offset:
                offset = 0
            f.seek(offset)
            data = f.read()
    except OSError:
        return []
    out = []
    for line in data.decode(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def memory_report(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """What Mem0 did in a turn, from its hook log entries, in the reference harness's
    shape: ``recalled`` and ``recall_ms`` once a recall succeeded, ``stored`` and
    ``store_ms`` once a store did, ``recall_error``/``store_error`` otherwise. A search or
    an add by the model through the MCP tools counts as a recall or a store too."""
    report: dict[str, Any] = {"system": "mem0"}
    errors: dict[str, list[str]] = {"recall": [], "store": []}
    tools = 0
    for entry in entries:
        kind = entry.get("hook")
        if kind == "mcp":
            tools += 1
            kind = "store" if entry.get("tool") == "add_memory" else "recall"
        if kind not in errors:
            continue
        if entry.get("error"):
            errors[kind].append(str(entry["error"]))
            continue
        ms = entry.get("ms")
        ms = float(ms) if isinstance(ms, int | float) and not isinstance(ms, bool) else 0.0
        if kind == "recall":
            recalled = entry.get("recalled")
            texts = [str(t) for t in recalled] if isinstance(recalled, list) else []
            report["recalled"] = [*report.get("recalled", []), *texts]
            report["recall_ms"] = report.get("recall_ms", 0.0) + ms
        else:
            stored = entry.get("stored")
            report["stored"] = report.get("stored", 0) + (stored if isinstance(stored, int) else 0)
            report["store_ms"] = report.get("store_ms", 0.0) + ms
    for kind, said in errors.items():
        if said:
            report[f"{kind}_error"] = "; ".join(said)[:1000]
    if tools:
        report["tool_calls"] = tools
    return report


def _sessions() -> dict[str, str]:
    try:
        data = json.loads((home() / SESSIONS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _transcript(session_id: str) -> Path | None:
    return next(iter((home() / "projects").glob(f"*/{session_id}.jsonl")), None)


def _has_transcript(session_id: str) -> bool:
    return _transcript(session_id) is not None


def store_unstopped_turn(session_id: str, error: str, timeout_s: float) -> None:
    """The store hook, run by the bridge for a turn that ended without ``Stop``.

    Claude Code fires ``Stop`` only for a turn that ended well; one an API error ended
    (with a small model, mostly a reply past the output bound, even after Claude
    Code's own continuations) fires ``StopFailure``, which it does not wait for. What
    was said in such a turn is still the user's to remember, so the same command runs
    here, with ``StopFailure``'s input, before the turn is reported over. A failure to
    run it is logged like the hook's own failures (the turn's ``store_error``)."""
    transcript = _transcript(session_id)
    if transcript is None:
        return  # nothing was written: nothing was said
    payload = {
        "session_id": session_id,
        "transcript_path": str(transcript),
        "cwd": WORKDIR,
        "hook_event_name": "StopFailure",
        "error": error,
    }
    try:
        subprocess.run(
            [*shlex.split(MEM0), "store-hook"],
            input=json.dumps(payload).encode(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=claude_env(os.environ),
            timeout=timeout_s,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        with contextlib.suppress(OSError), hook_log().open("a") as log:
            log.write(json.dumps({"hook": "store", "session": session_id, "error": f"{MEM0} store-hook: {exc}"}) + "\n")


def parse_stream(stdout: str) -> dict[str, Any]:
    """What one ``--output-format stream-json`` run said: its ``result`` event (the
    reply, success or error), the session id, and how many events of each type."""
    counts: dict[str, int] = {}
    result: dict[str, Any] | None = None
    session_id = ""
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        kind = str(event.get("type"))
        counts[kind] = counts.get(kind, 0) + 1
        if isinstance(event.get("session_id"), str) and event["session_id"]:
            session_id = event["session_id"]
        if kind == "result":
            result = event
    return {"result": result, "session_id": session_id, "events": counts}


def _argv(text: str, settings: dict[str, Any]) -> list[str]:
    argv = [
        CLAUDE,
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        # Permissions are bypassed inside the sandbox only (IS_SANDBOX=1 lets root do it).
        "--dangerously-skip-permissions",
        "--max-turns",
        str(int(settings["max_turns"])),
        "--tools",
        ",".join(settings["tools"]),
    ]
    if settings.get("memory") == "mem0":
        # Hooks come from the settings file; the MCP server is this run's, its tools allowed.
        argv += ["--mcp-config", str(home() / MCP_FILE), "--allowedTools", ",".join(MEM0_TOOLS)]
    return argv


def turn(text: str, session: str, settings: dict[str, Any]) -> dict[str, Any]:
    """One message into the run's ``session``: a new Claude Code session the first
    time (``--session-id``), ``--resume`` of the same one after."""
    known = _sessions()
    resumed = known.get(session)
    if resumed and not _has_transcript(resumed):
        resumed = None  # kept by a run that crashed before Claude Code wrote it
    sid = resumed or str(uuid.uuid4())
    argv = _argv(text, settings) + (["--resume", sid] if resumed else ["--session-id", sid])
    # The prompt goes last, after "--": a message starting with "-" stays a message.
    argv += ["--", text]
    mem0 = settings.get("memory") == "mem0"
    offset = log_size() if mem0 else 0
    proc = _run(argv, timeout_s=float(settings["turn_timeout_s"]))
    stream = parse_stream(proc["stdout"])
    result = stream["result"] or {}
    now_sid = stream["session_id"] or sid
    if _has_transcript(now_sid) and known.get(session) != now_sid:
        known[session] = now_sid
        _write_atomic(home() / SESSIONS_FILE, json.dumps(known, indent=1, sort_keys=True))
    ok = proc["exit_code"] == 0 and result.get("subtype") == "success" and not result.get("is_error")
    out: dict[str, Any] = {
        "reply": str(result.get("result") or "") if ok else "",
        "exit_code": proc["exit_code"],
        "claude_session": now_sid,
        "resumed": bool(resumed),
        "num_turns": result.get("num_turns"),
        "stop_reason": result.get("stop_reason"),
        "events": stream["events"],
    }
    if mem0:
        timed_out = proc["exit_code"] == -1
        if not ok and not timed_out and not any(e.get("hook") == "store" for e in log_since(offset)):
            store_unstopped_turn(now_sid, str(result.get("subtype") or "no result"), float(settings["turn_timeout_s"]))
        out["memory"] = memory_report(log_since(offset))
    if not ok:
        said = str(result.get("result") or "") or "; ".join(map(str, result.get("errors") or []))
        out["error"] = (
            f"{result.get('subtype') or 'no result'}: {said}\n{proc['stderr']}".strip()[-_TAIL:]
            if result
            else (proc["stdout"][-_TAIL // 2 :] + "\n" + proc["stderr"]).strip()[-_TAIL:]
        )
    return out


def serve(settings: dict[str, Any]) -> int:
    seq = 0
    session = "default"

    def say(event: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    for raw in sys.stdin:
        try:
            req = json.loads(raw)
        except ValueError:
            say({"type": "error", "error": f"not JSON: {raw[:200]!r}"})
            continue
        kind = req.get("type") if isinstance(req, dict) else None
        if kind == "start_session":
            session = str(req.get("session") or "default")
            say({"type": "session_started", "session": session})
        elif kind == "stop_session":
            say({"type": "session_stopped"})
        elif kind == "message":
            seq += 1
            # The receipt, on this sandbox's (simulated) clock, before Claude Code starts.
            say({"type": "received", "seq": seq, "wall_ns": time.time_ns(), "mono_ns": time.monotonic_ns()})
            result = turn(str(req.get("text", "")), str(req.get("session") or session), settings)
            say({"type": "turn_end", "round_id": req.get("round_id"), **result})
        else:
            say({"type": "error", "error": f"unknown request type {kind!r}"})
    return 0


DEFAULTS: dict[str, Any] = {"turn_timeout_s": 1800, "max_turns": 8, "tools": ["Bash", "Read", "Write", "Edit"]}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("setup", "serve"):
        print("usage: bridge.py setup|serve  (settings JSON in SCLATE_CLAUDE_CODE_SETTINGS)", file=sys.stderr)
        return 2
    settings = {**DEFAULTS, **json.loads(os.environ.get("SCLATE_CLAUDE_CODE_SETTINGS") or "{}")}
    if argv[1] == "setup":
        report = setup(settings)
        print(json.dumps(report))
        return 1 if report.get("errors") else 0
    return serve(settings)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
