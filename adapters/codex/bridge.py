#!/usr/bin/env python3
"""sclate's bridge to an unmodified Codex CLI inside its sandbox (stdlib only).

Codex is driven the way its own headless mode allows: one ``codex exec --json``
process per message, ``codex exec resume THREAD_ID`` to continue a session,
standard input closed; the turn ends when the process exits, and the reply is
the last ``agent_message`` among its JSON events. This bridge does no model call
and changes no Codex file it does not own; it only

* ``setup``: writes ``$CODEX_HOME/config.toml`` (a model provider pointed at the
  capture proxy, the run's key read from an environment variable, everything
  that would reach another host off, optional tools off), every time the
  harness starts: the endpoints are the run's, the sessions stay;
* ``serve``: speaks sclate's JSON-lines harness protocol on stdin/stdout
  (``start_session`` / ``message`` / ``stop_session``), runs one Codex process
  per message, keeps which Codex thread continues which of the run's sessions in
  ``$CODEX_HOME/sclate-sessions.json`` (the memory volume, so snapshots,
  branches and the next day keep it).
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
from pathlib import Path
from typing import Any

CODEX = os.environ.get("SCLATE_CODEX_BIN", "codex")
WORKDIR = os.environ.get("SCLATE_CODEX_WORKDIR", "/workspace")
SESSIONS_FILE = "sclate-sessions.json"
KEY_ENV = "SCLATE_API_KEY"
"""The environment variable Codex reads the run's key from (the provider's ``env_key``)."""
PROVIDER = "sclate"
_TAIL = 4000

OPTIONAL_TOOLS = (
    "web_search",
    "view_image",
    "request_user_input",
    "multi_agent",
    "goals",
    "skills",
    "image_generation",
)
"""Codex's optional tools and prompt sections that a run may keep (``keep_tools``); the rest are off."""

DEFAULTS: dict[str, Any] = {
    "turn_timeout_s": 1800,
    "context_window": 16384,
    "auto_compact_token_limit": None,
    "keep_tools": [],
    "show_date": False,
}


def home() -> Path:
    return Path(os.environ.get("CODEX_HOME", "/memory/codex"))


def _write_atomic(path: Path, text: str) -> None:
    """Written whole or not at all: a crash mid-write leaves the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(str(value))  # a JSON string is a TOML basic string


def config_toml(settings: dict[str, Any], env: dict[str, str]) -> str:
    """Codex's ``config.toml`` for this run (its own format, its own keys)."""
    keep = set(settings.get("keep_tools") or [])
    top: dict[str, Any] = {
        "model": env.get("SCLATE_MODEL", ""),
        "model_provider": PROVIDER,
        # The container is the sandbox: Codex runs commands without its own
        # sandbox and never stops to ask for an approval (nobody would answer).
        "approval_policy": "never",
        "sandbox_mode": "danger-full-access",
        "check_for_update_on_startup": False,
        "model_context_window": int(settings["context_window"]),
        "model_reasoning_summary": "none",
        # Codex's own process reads the wall clock (a static binary); without this
        # its environment context would show the model the wall date, not the run's.
        "include_environment_context_time": bool(settings.get("show_date")),
        "include_apps_instructions": False,
        "include_collaboration_mode_instructions": False,
        "web_search": "live" if "web_search" in keep else "disabled",
    }
    if settings.get("auto_compact_token_limit"):
        top["model_auto_compact_token_limit"] = int(settings["auto_compact_token_limit"])
    lines = ["# Written by sclate (adapters/codex/bridge.py setup) for this run; Codex's own format."]
    lines += [f"{k} = {_toml(v)}" for k, v in top.items()]
    tables: list[tuple[str, dict[str, Any]]] = [
        (
            f"model_providers.{PROVIDER}",
            {
                "name": "sclate capture proxy",
                "base_url": env.get("SCLATE_AGENT_BASE_URL", ""),
                "env_key": KEY_ENV,
                "wire_api": "responses",
                # One attempt: a failed call is the run's record, not something to hide by retrying.
                "request_max_retries": 0,
                "stream_max_retries": 0,
                "supports_websockets": False,
            },
        ),
        ("analytics", {"enabled": False}),
        ("feedback", {"enabled": False}),
        ("history", {"persistence": "save-all"}),
        (
            "features",
            {
                "goals": "goals" in keep,
                "view_image": "view_image" in keep,
                "image_generation": "image_generation" in keep,
                # Apps, plugins and their marketplaces are remote services.
                "apps": False,
                "plugins": False,
            },
        ),
        # Subagents (its deprecated features.multi_agent is only their fallback switch).
        ("agents", {"enabled": "multi_agent" in keep}),
        ("tools", {"web_search": "web_search" in keep}),
        ("tools.experimental_request_user_input", {"enabled": "request_user_input" in keep}),
        ("skills", {"include_instructions": "skills" in keep}),
        ("skills.bundled", {"enabled": "skills" in keep}),
    ]
    for name, table in tables:
        lines += ["", f"[{name}]"] + [f"{k} = {_toml(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def setup(settings: dict[str, Any]) -> dict[str, Any]:
    """(Re)write the config; a CODEX_HOME that has sessions keeps them (adopted, restored, branched)."""
    h = home()
    h.mkdir(parents=True, exist_ok=True)
    created = not (h / SESSIONS_FILE).exists()
    _write_atomic(h / "config.toml", config_toml(settings, dict(os.environ)))
    if created:
        _write_atomic(h / SESSIONS_FILE, "{}\n")
    return {"type": "setup", "created": created, "codex_home": str(h)}


def _sessions() -> dict[str, str]:
    try:
        data = json.loads((home() / SESSIONS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def read_events(stdout: str) -> dict[str, Any]:
    """What Codex's ``--json`` events say of one turn: its thread, the last agent
    message, the usage, why a turn failed (``turn.failed``) and notices (``error`` events)."""
    thread_id, reply, usage, items = None, "", None, 0
    errors: list[str] = []
    notices: list[str] = []
    failed = False
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
        kind = event.get("type")
        if kind == "thread.started" and event.get("thread_id"):
            thread_id = str(event["thread_id"])
        elif kind == "item.completed" and isinstance(event.get("item"), dict):
            item = event["item"]
            items += 1
            if item.get("type") == "agent_message":
                reply = str(item.get("text") or "")
        elif kind == "turn.completed":
            usage = event.get("usage")
        elif kind == "turn.failed":
            failed = True
            err = event.get("error")
            errors.append(str(err.get("message") if isinstance(err, dict) else err))
        elif kind == "error":
            # A notice, not the end: Codex also says so while it reconnects
            # ("Reconnecting... waiting for network"); a turn that fails says turn.failed.
            notices.append(str(event.get("message") or event))
    return {
        "thread_id": thread_id,
        "reply": reply,
        "usage": usage,
        "errors": errors,
        "notices": notices,
        "failed": failed,
        "items": items,
    }


def _run(argv: list[str], *, timeout_s: float) -> dict[str, Any]:
    """Run Codex to its end, or end it past ``timeout_s``.

    ``codex`` is a Node launcher that runs the native binary as its child: the
    whole process group is ended, or the binary would live on, still streaming
    from the model and holding its thread's writer lock (the next ``resume``
    of that thread would be refused)."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=WORKDIR if os.path.isdir(WORKDIR) else None,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        out, _ = proc.communicate()
        return {"exit_code": -1, "stdout": out.decode(errors="replace"), "stderr": f"timed out after {timeout_s:g} s"}
    finally:
        _end_group(proc)  # anything Codex left running in its group (a command it started)
    return {
        "exit_code": proc.returncode,
        "stdout": out.decode(errors="replace"),
        "stderr": err.decode(errors="replace"),
    }


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def exec_argv(text: str, thread: str | None) -> list[str]:
    """``codex exec`` for a new thread, ``codex exec resume THREAD`` for a known one.
    ``--`` ends the options: a message that starts with ``-`` is still the prompt."""
    common = ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
    if thread:
        return [CODEX, "exec", "resume", *common, "--", thread, text]
    return [CODEX, "exec", *common, "--", text]


def turn(text: str, session: str, *, timeout_s: float) -> dict[str, Any]:
    """One message into the run's ``session``: a new Codex thread the first time,
    ``resume`` of the same one after."""
    known = _sessions()
    resumed = known.get(session)
    proc = _run(exec_argv(text, resumed), timeout_s=timeout_s)
    events = read_events(proc["stdout"])
    thread = events["thread_id"]
    if thread and thread != resumed:
        known[session] = thread
        _write_atomic(home() / SESSIONS_FILE, json.dumps(known, indent=1, sort_keys=True))
    out: dict[str, Any] = {
        "reply": events["reply"],
        "exit_code": proc["exit_code"],
        "codex_thread": thread or resumed or "",
        "resumed": bool(resumed),
        "usage": events["usage"],
    }
    if proc["exit_code"] != 0 or events["failed"]:
        why = (
            "; ".join(events["errors"] or events["notices"][-3:])
            or proc["stderr"].strip()[-_TAIL:]
            or proc["stdout"].strip()[-_TAIL:]
        )
        out["error"] = why or f"codex exited with {proc['exit_code']}"
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
            # The receipt, on this sandbox's (simulated) clock, before Codex starts.
            say({"type": "received", "seq": seq, "wall_ns": time.time_ns(), "mono_ns": time.monotonic_ns()})
            result = turn(
                str(req.get("text", "")),
                str(req.get("session") or session),
                timeout_s=float(settings["turn_timeout_s"]),
            )
            say({"type": "turn_end", "round_id": req.get("round_id"), **result})
        else:
            say({"type": "error", "error": f"unknown request type {kind!r}"})
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("setup", "serve"):
        print("usage: bridge.py setup|serve  (settings JSON in SCLATE_CODEX_SETTINGS)", file=sys.stderr)
        return 2
    settings = {**DEFAULTS, **json.loads(os.environ.get("SCLATE_CODEX_SETTINGS") or "{}")}
    if argv[1] == "setup":
        print(json.dumps(setup(settings)))
        return 0
    return serve(settings)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
