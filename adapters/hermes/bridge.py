#!/usr/bin/env python3
"""sclate's bridge to an unmodified Hermes Agent inside its sandbox (stdlib only).

Hermes is driven the way its own headless mode allows: one ``hermes chat -q``
process per message, ``--resume`` to continue a session, ``hermes cron tick``
to run its due cron jobs once. This bridge does no model call and changes no
Hermes file it does not own; it only

* ``setup``: writes ``$HERMES_HOME/config.yaml`` (every model slot pointed at
  the capture proxy through ``${SCLATE_*}`` variables), an update-check cache
  and the cron jobs a run asked for, when ``$HERMES_HOME`` is new;
* ``serve``: speaks sclate's JSON-lines harness protocol on stdin/stdout
  (``start_session`` / ``message`` / ``stop_session`` / ``schedule``), runs one
  Hermes process per message, keeps which Hermes session continues which of
  the run's sessions in ``$HERMES_HOME/sclate-sessions.json``;
* ``tick``: runs ``hermes cron tick`` and prints the schedule after it.

Every answer carries ``schedule``: each enabled cron job's ``next_run_at`` read
from Hermes's own ``cron/jobs.json``, in nanoseconds of the (simulated) clock.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERMES = os.environ.get("SCLATE_HERMES_BIN", "/opt/hermes/venv/bin/hermes")
WORKDIR = os.environ.get("SCLATE_HERMES_WORKDIR", "/workspace")
SESSIONS_FILE = "sclate-sessions.json"
_TAIL = 4000


def home() -> Path:
    return Path(os.environ.get("HERMES_HOME", "/memory/hermes"))


def _write_atomic(path: Path, text: str) -> None:
    """Written whole or not at all: a crash mid-write leaves the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _yaml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def config_yaml(settings: dict[str, Any]) -> str:
    """Hermes's config: the main model on the agent listener, its auxiliary tasks on
    the aux listener, its memory review on the memory listener (``${VAR}`` is
    expanded by Hermes from each process's environment, so a cron job run as a
    memory job reaches the memory listener with the same file)."""
    aux_tasks = ("compression", "title_generation", "approval", "vision", "web_extract", "session_search")
    lines = [
        "# Written by sclate (adapters/hermes/bridge.py setup) for a run; Hermes's own format.",
        "model:",
        "  provider: custom",
        "  base_url: ${SCLATE_AGENT_BASE_URL}",
        "  api_key: ${SCLATE_API_KEY}",
        "  default: ${SCLATE_MODEL}",
        # Hermes refuses a window under 64k; the server's real context still applies
        # (a longer prompt gets context_length_exceeded, which the run counts).
        f"  context_length: {int(settings['context_length'])}",
        f"  max_tokens: {int(settings['max_tokens'])}",
        "agent:",
        "  environment_probe: false",
        f"  api_max_retries: {int(settings['api_max_retries'])}",
        "security:",
        "  tirith_enabled: false",
        "  allow_lazy_installs: false",
        "model_catalog:",
        "  enabled: false",
        "platform_toolsets:",
        f"  cli: {_yaml_list(settings['toolsets'])}",
        f"  cron: {_yaml_list(settings['cron_toolsets'])}",
        "memory:",
        "  nudge_interval: 0",
        "skills:",
        "  creation_nudge_interval: 0",
        "approvals:",
        '  mode: "off"',
        "timezone: UTC",
    ]
    plugins = [str(name) for name in settings.get("plugins", [])]
    if plugins:
        # Plugins installed with pip load only when named here (Hermes's opt-in).
        lines += ["plugins:", f"  enabled: {_yaml_list(plugins)}"]
    lines += ["auxiliary:"]
    for task in aux_tasks:
        lines += [
            f"  {task}:",
            "    base_url: ${SCLATE_AUX_BASE_URL}",
            "    api_key: ${SCLATE_API_KEY}",
            "    model: ${SCLATE_MODEL}",
        ]
    lines += [
        "  background_review:",
        "    base_url: ${SCLATE_MEMORY_BASE_URL}",
        "    api_key: ${SCLATE_API_KEY}",
        "    model: ${SCLATE_MODEL}",
    ]
    return "\n".join(lines) + "\n"


def setup(settings: dict[str, Any]) -> dict[str, Any]:
    """A new HERMES_HOME gets its config and the run's cron jobs; one that finished
    setup (adopted, restored, branched) is left as Hermes left it. Setup is safe to
    run again after a crash half-way: the config is rewritten whole, a job whose
    name Hermes already has is not created twice."""
    h = home()
    done = h / ".sclate-setup"
    if done.exists():
        return {"type": "setup", "created": False, "schedule": schedule()}
    h.mkdir(parents=True, exist_ok=True)
    # Its update check has no switch; a far-future cache keeps it from asking.
    _write_atomic(h / ".update_check", json.dumps({"ts": 99999999999, "behind": 0, "rev": None, "ver": "pinned"}))
    # The config first: jobs created below take their model from it.
    _write_atomic(h / "config.yaml", config_yaml(settings))
    have = {str(j.get("name")) for j in _jobs()}
    errors: list[str] = []
    for job in settings.get("cron_jobs", []):
        if str(job["name"]) in have:
            continue
        argv = [HERMES, "cron", "create", str(job["schedule"]), str(job["prompt"]), "--name", str(job["name"])]
        proc = _run(argv, timeout_s=120)
        if proc["exit_code"] != 0:
            errors.append(f"hermes cron create {job['schedule']!r}: {proc['stdout'][-400:]} {proc['stderr'][-400:]}")
    if errors:
        return {"type": "setup", "created": False, "errors": errors, "schedule": schedule()}
    _write_atomic(done, "1\n")
    return {"type": "setup", "created": True, "schedule": schedule()}


def _run(argv: list[str], *, timeout_s: float) -> dict[str, Any]:
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            cwd=WORKDIR if os.path.isdir(WORKDIR) else None,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return {
            "exit_code": -1,
            "stdout": (exc.stdout or b"").decode(errors="replace"),
            "stderr": f"timed out after {timeout_s:g} s",
        }
    return {
        "exit_code": proc.returncode,
        "stdout": proc.stdout.decode(errors="replace"),
        "stderr": proc.stderr.decode(errors="replace"),
    }


def _ns(iso: str) -> int | None:
    try:
        when = dt.datetime.fromisoformat(iso)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000


def _jobs() -> list[dict[str, Any]]:
    try:
        jobs = json.loads((home() / "cron" / "jobs.json").read_text()).get("jobs", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [j for j in jobs if isinstance(j, dict)] if isinstance(jobs, list) else []


def schedule() -> dict[str, int]:
    """Each enabled job's next due time (ns), from Hermes's own cron/jobs.json."""
    out: dict[str, int] = {}
    for job in _jobs():
        if job.get("enabled") is False or job.get("paused_at"):
            continue
        due = _ns(str(job.get("next_run_at") or ""))
        if due is not None and job.get("id"):
            out[str(job["id"])] = due
    return out


def _sessions() -> dict[str, str]:
    try:
        data = json.loads((home() / SESSIONS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _session_id(stderr: str) -> str | None:
    for line in reversed(stderr.splitlines()):
        line = line.strip()
        if line.startswith("session_id:"):
            return line.partition(":")[2].strip() or None
    return None


# hindsight-hermes logs only its failures (as warnings, which Hermes also writes to
# logs/errors.log); what it recalled reaches the model inside the message.
_PLUGIN_FAILURES = {
    "recall_error": "Hindsight pre_llm_call recall failed",
    "store_error": "Hindsight post_llm_call retain failed",
}


def _errors_log() -> Path:
    return home() / "logs" / "errors.log"


def _log_size() -> int:
    try:
        return _errors_log().stat().st_size
    except OSError:
        return 0


def memory_report(system: str, since: int) -> dict[str, Any]:
    """The turn's report of the memory plugin: its failures logged after ``since``
    (a size of errors.log; a rotated log is read from its start)."""
    report: dict[str, Any] = {"system": system}
    try:
        with open(_errors_log(), "rb") as f:
            if f.seek(0, os.SEEK_END) >= since:
                f.seek(since)
            else:
                f.seek(0)
            logged = f.read().decode("utf-8", "replace")
    except OSError:
        return report
    for key, marker in _PLUGIN_FAILURES.items():
        lines = [line.strip() for line in logged.splitlines() if marker in line]
        if lines:
            report[key] = lines[-1][-_TAIL // 8 :]
    return report


def turn(text: str, session: str, *, timeout_s: float, max_turns: int, memory_system: str = "") -> dict[str, Any]:
    """One message into the run's ``session``: a new Hermes session the first time,
    ``--resume`` of the same one after."""
    since = _log_size()
    known = _sessions()
    argv = [HERMES, "chat", "-q", text, "-Q", "--yolo", "--no-restore-cwd", "--max-turns", str(max_turns)]
    resumed = known.get(session)
    if resumed:
        argv += ["--resume", resumed]
    proc = _run(argv, timeout_s=timeout_s)
    sid = _session_id(proc["stderr"])
    if sid and sid != resumed:
        known[session] = sid
        _write_atomic(home() / SESSIONS_FILE, json.dumps(known, indent=1, sort_keys=True))
    out: dict[str, Any] = {
        "reply": proc["stdout"].rstrip("\n") if proc["exit_code"] == 0 else "",
        "exit_code": proc["exit_code"],
        "hermes_session": sid or resumed or "",
        "resumed": bool(resumed),
    }
    if memory_system:
        out["memory"] = memory_report(memory_system, since)
    if proc["exit_code"] != 0:
        # In quiet mode Hermes prints its error on stdout.
        out["error"] = (proc["stdout"] + "\n" + proc["stderr"]).strip()[-_TAIL:]
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
        elif kind == "schedule":
            say({"type": "schedule", "schedule": schedule()})
        elif kind == "message":
            seq += 1
            # The receipt, on this sandbox's (simulated) clock, before Hermes starts.
            say({"type": "received", "seq": seq, "wall_ns": time.time_ns(), "mono_ns": time.monotonic_ns()})
            result = turn(
                str(req.get("text", "")),
                str(req.get("session") or session),
                timeout_s=float(settings["turn_timeout_s"]),
                max_turns=int(settings["max_turns"]),
                memory_system="hindsight" if "hindsight" in settings.get("plugins", []) else "",
            )
            say({"type": "turn_end", "round_id": req.get("round_id"), "schedule": schedule(), **result})
        else:
            say({"type": "error", "error": f"unknown request type {kind!r}"})
    return 0


def tick(settings: dict[str, Any]) -> int:
    proc = _run([HERMES, "cron", "tick"], timeout_s=float(settings["turn_timeout_s"]))
    out: dict[str, Any] = {"type": "tick", "exit_code": proc["exit_code"], "schedule": schedule()}
    if proc["exit_code"] != 0:
        out["error"] = (proc["stdout"] + "\n" + proc["stderr"]).strip()[-_TAIL:]
    print(json.dumps(out))
    return 0 if proc["exit_code"] == 0 else 1


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("setup", "serve", "tick", "schedule"):
        print("usage: bridge.py setup|serve|tick|schedule  (settings JSON in SCLATE_HERMES_SETTINGS)", file=sys.stderr)
        return 2
    settings = json.loads(os.environ.get("SCLATE_HERMES_SETTINGS") or "{}")
    defaults = {
        "context_length": 65536,
        "max_tokens": 256,
        "api_max_retries": 1,
        "toolsets": ["memory"],
        "cron_toolsets": ["todo"],
        "turn_timeout_s": 1800,
        "max_turns": 8,
        "cron_jobs": [],
    }
    settings = {**defaults, **settings}
    if argv[1] == "setup":
        print(json.dumps(setup(settings)))
        return 0
    if argv[1] == "schedule":
        print(json.dumps({"type": "schedule", "schedule": schedule()}))
        return 0
    if argv[1] == "tick":
        return tick(settings)
    return serve(settings)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
