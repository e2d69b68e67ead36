#!/usr/bin/env python3
"""sclate's bridge to an unmodified Claude Code inside its sandbox (stdlib only).

Claude Code is driven the way its own headless mode allows: one ``claude -p``
(print mode) process per message, ``--output-format stream-json --verbose``,
``--session-id UUID`` for a session's first message and ``--resume UUID`` for
the next ones; the turn ends when the process exits. This bridge does no model
call and changes no Claude Code file it does not own; it only

* ``setup``: makes ``$CLAUDE_CONFIG_DIR`` (the memory volume) and reports the
  program's version;
* ``serve``: speaks sclate's JSON-lines harness protocol on stdin/stdout
  (``start_session`` / ``message`` / ``stop_session``), runs one Claude Code
  process per message and keeps which Claude Code session continues which of
  the run's sessions in ``$CLAUDE_CONFIG_DIR/sclate-sessions.json`` (in the
  memory volume: snapshots, branches and daemon restarts keep it).

A session id is kept only once Claude Code wrote that session's transcript
(``projects/<cwd>/<id>.jsonl``): a first message that failed before then is
started afresh next time instead of resuming a session that does not exist.
"""

from __future__ import annotations

import contextlib
import json
import os
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
_TAIL = 4000


def home() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR", "/memory/claude-code"))


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


def setup() -> dict[str, Any]:
    """The config directory exists; Claude Code answers ``--version`` (a broken
    install fails the run's start, not its first turn)."""
    home().mkdir(parents=True, exist_ok=True)
    proc = _run([CLAUDE, "--version"], timeout_s=60)
    if proc["exit_code"] != 0:
        why = (proc["stdout"] + proc["stderr"]).strip()[-800:]
        return {"type": "setup", "errors": [f"`claude --version` failed ({proc['exit_code']}): {why}"]}
    return {"type": "setup", "version": proc["stdout"].strip()}


def _sessions() -> dict[str, str]:
    try:
        data = json.loads((home() / SESSIONS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _has_transcript(session_id: str) -> bool:
    return any((home() / "projects").glob(f"*/{session_id}.jsonl"))


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
        report = setup()
        print(json.dumps(report))
        return 1 if report.get("errors") else 0
    return serve(settings)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
