#!/usr/bin/env python3
"""sclate's bridge to an unmodified OpenClaw inside its sandbox (stdlib only).

OpenClaw is driven the way MetaClaw-Bench drives it upstream
(``benchmark/src/infer/infer_cmd.py``): one gateway per run, and one
``openclaw agent --session-id SID --message TEXT`` per message. This bridge
makes no model call and edits no OpenClaw file it does not own; it only

* ``setup``: writes the run's ``openclaw.json`` (every provider pointed at the
  capture proxy through ``${SCLATE_*}`` variables, resolved by OpenClaw from
  the gateway's environment) when the state directory is new, and validates it
  with ``openclaw config validate``;
* ``serve``: starts the gateway (loopback, its own scheduler off, see below),
  creates the run's cron jobs, then speaks sclate's JSON-lines harness
  protocol on stdin/stdout: ``seed_session`` (a recorded transcript becomes a
  session's history: written to ``agents/<agent>/sessions/``, registered in
  ``sessions.json`` and imported with ``openclaw doctor --session-sqlite
  import`` while the gateway is stopped, as OpenClaw 2026.8+ keeps sessions in
  SQLite), ``start_session`` / ``message`` / ``stop_session`` / ``schedule``;
* ``tick``: runs the due cron jobs (``openclaw cron run ID --due --wait``) and
  a due heartbeat (``openclaw system event --mode now``), then prints the
  schedule.

Scheduled work: the gateway's own cron scheduler is off (``cron.enabled:
false``). Its timers re-check ``Date.now()`` under libfaketime and would fire
jobs at uncontrolled moments; instead every answer carries ``schedule``: each
enabled job's ``nextRunAtMs`` and the next heartbeat, in nanoseconds of the
(simulated) clock, and sclate runs ``tick`` when the clock gets there.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OPENCLAW = os.environ.get("SCLATE_OPENCLAW_BIN", "/usr/local/bin/openclaw")
WORKDIR = os.environ.get("SCLATE_OPENCLAW_WORKDIR", "/workspace")
HOME = Path(os.environ.get("SCLATE_OPENCLAW_HOME", "/memory/openclaw"))
_TAIL = 4000
_NS = 1_000_000_000
_MS = 1_000_000


def state_dir() -> Path:
    return Path(os.environ.get("OPENCLAW_STATE_DIR", str(HOME / "state")))


def config_path() -> Path:
    return Path(os.environ.get("OPENCLAW_CONFIG_PATH", str(state_dir() / "openclaw.json")))


def port() -> int:
    return int(os.environ.get("OPENCLAW_GATEWAY_PORT", "18789"))


def _write_atomic(path: Path, text: str) -> None:
    """Written whole or not at all: a crash mid-write leaves the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


# -- the config -------------------------------------------------------------------------------


def _provider(url_var: str, settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "baseUrl": "${" + url_var + "}",
        "apiKey": "${SCLATE_API_KEY}",
        "api": "openai-completions",
        "models": [
            {
                "id": "${SCLATE_MODEL}",
                "name": "sclate run model",
                "input": ["text"],
                # OpenClaw clamps max_completion_tokens to 1 when its estimate of the
                # prompt exceeds the declared window; the server's real context applies.
                "contextWindow": int(settings["context_window"]),
                "maxTokens": int(settings["max_tokens"]),
            }
        ],
    }


def build_config(settings: dict[str, Any], base: dict[str, Any] | None) -> dict[str, Any]:
    """The run's ``openclaw.json``: the benchmark's agents and tool policy (``base``,
    upstream's ``openclaw_cfg/openclaw.json``) with sclate's endpoints and offline
    switches. Upstream's plugin paths (its prompt logger) do not exist here and are
    left out; the capture proxy records every call instead."""
    base = base if isinstance(base, dict) else {}
    base_agents: dict[str, Any] = base["agents"] if isinstance(base.get("agents"), dict) else {}
    agents: list[dict[str, Any]] = []
    for entry in base_agents.get("list", []) or []:
        if isinstance(entry, dict) and entry.get("id"):
            kept = {k: entry[k] for k in ("id", "name", "skills") if k in entry}
            kept["workspace"] = WORKDIR
            agents.append(kept)
    if not agents:
        agents = [{"id": str(settings["agent"]), "name": str(settings["agent"]), "workspace": WORKDIR}]
    base_defaults: dict[str, Any] = base_agents["defaults"] if isinstance(base_agents.get("defaults"), dict) else {}
    defaults: dict[str, Any] = {k: base_defaults[k] for k in ("timeoutSeconds", "compaction") if k in base_defaults}
    defaults["model"] = {"primary": "sclate/${SCLATE_MODEL}"}
    defaults["heartbeat"] = {"every": str(settings["heartbeat_every"])}
    tools: dict[str, Any] = (
        base["tools"] if isinstance(base.get("tools"), dict) else {"profile": settings["tools_profile"]}
    )
    if settings.get("tools_profile_override"):
        tools = {**tools, "profile": settings["tools_profile_override"]}
    return {
        "models": {
            "catalogRefresh": {"enabled": False},
            "providers": {
                "sclate": _provider("SCLATE_AGENT_BASE_URL", settings),
                "sclate-memory": _provider("SCLATE_MEMORY_BASE_URL", settings),
                "sclate-aux": _provider("SCLATE_AUX_BASE_URL", settings),
            },
        },
        "agents": {"defaults": defaults, "list": agents},
        "tools": tools,
        "update": {"checkOnStart": False},
        "telemetry": {"enabled": False},
        # Its own scheduler would fire on wall-clock timers: sclate runs due jobs instead.
        "cron": {"enabled": False},
        # Background model calls nobody asked for (a nightly "dreaming" job, weekly skill reviews).
        "plugins": {"entries": {"memory-core": {"config": {"dreaming": {"enabled": False}}}}},
        "skills": {"workshop": {"autonomous": {"mode": "off"}}},
    }


def write_config(settings: dict[str, Any], base: dict[str, Any] | None) -> None:
    _write_atomic(config_path(), json.dumps(build_config(settings, base), indent=1) + "\n")


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


def _failure(proc: dict[str, Any]) -> str:
    return str(proc["stdout"] + "\n" + proc["stderr"]).strip()[-_TAIL:]


def setup(settings: dict[str, Any]) -> dict[str, Any]:
    """A new state directory gets the run's config; one that finished setup (adopted,
    restored, branched) is left as OpenClaw left it. Safe to run again after a crash."""
    done = HOME / ".sclate-setup"
    if done.exists():
        return {"type": "setup", "created": False}
    state_dir().mkdir(parents=True, exist_ok=True)
    write_config(settings, None)
    proc = _run([OPENCLAW, "config", "validate"], timeout_s=120)
    if proc["exit_code"] != 0:
        return {"type": "setup", "created": False, "errors": [f"openclaw config validate: {_failure(proc)}"]}
    _write_atomic(done, "1\n")
    return {"type": "setup", "created": True}


# -- the gateway -------------------------------------------------------------------------------


@contextlib.contextmanager
def gateway_lock(exclusive: bool) -> Iterator[None]:
    """A restart (exclusive) never overlaps a tick's use of the gateway (shared)."""
    HOME.mkdir(parents=True, exist_ok=True)
    with open(HOME / ".gateway.lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def healthy() -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port()}/health", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def release_stale_gateway_lease() -> int:
    """Drop the gateway-owner lease a gateway that is not running here left in the
    state database (``state/openclaw.sqlite``, table ``state_leases``); returns how
    many rows went.

    A snapshot is taken with the gateway running, so a restored or branched state
    directory holds its lease. OpenClaw reclaims a lease only when it can tell its
    process is dead, which it cannot for another host (the snapshot's container),
    and otherwise waits for its expiry on the (simulated) clock: a branch starting
    seconds of simulated time after its snapshot would find "Another Gateway owner
    lease is still active" and never start. Called only when no gateway of this
    sandbox is running (the bridge starts the only one)."""
    db = state_dir() / "state" / "openclaw.sqlite"
    if not db.is_file():
        return 0
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as con:
        if con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'state_leases'").fetchone() is None:
            return 0
        with con:
            return con.execute("DELETE FROM state_leases WHERE scope = 'gateway-owner'").rowcount


class Gateway:
    """The run's one ``openclaw gateway run`` process (its own process group)."""

    LOG = Path("/tmp/sclate-openclaw-gateway.log")

    def __init__(self, start_timeout_s: float) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._start_timeout_s = start_timeout_s

    def start(self) -> None:
        if healthy():
            # A gateway left by an earlier bridge (the daemon restarted): not ours to trust.
            subprocess.run(["pkill", "-f", "openclaw.*gateway"], check=False)
            time.sleep(2)
        release_stale_gateway_lease()
        argv = [OPENCLAW, "gateway", "run", "--port", str(port()), "--bind", "loopback", "--allow-unconfigured"]
        with open(self.LOG, "ab") as log:  # the child keeps its own copy of the descriptor
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=WORKDIR if os.path.isdir(WORKDIR) else None,
                start_new_session=True,
            )
        deadline = time.monotonic() + self._start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the OpenClaw gateway exited with {self._proc.returncode}: {self.log_tail()}")
            if healthy():
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(
            f"the OpenClaw gateway did not answer /health in {self._start_timeout_s:g} s: {self.log_tail()}"
        )

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self) -> str:
        try:
            return self.LOG.read_bytes()[-1500:].decode(errors="replace")
        except OSError:
            return ""


# -- sessions ----------------------------------------------------------------------------------


def session_id(session: str) -> str:
    """OpenClaw's id for one of the run's sessions: the same name when it is already a
    plain id (MetaClaw's ``day01_<uuid>``), made plain otherwise. Deterministic, so a
    restarted bridge continues the same sessions."""
    plain = re.sub(r"[^A-Za-z0-9_-]+", "-", session).strip("-")[:80]
    return str(plain or "sclate-default")


def seed_session(gateway: Gateway, settings: dict[str, Any], req: dict[str, Any]) -> dict[str, Any]:
    sid = session_id(str(req.get("session_id") or ""))
    agent = str(req.get("agent") or settings["agent"])
    seeded_file = HOME / "sclate-seeded.json"
    seeded = _read_json(seeded_file, [])
    if sid in seeded:
        return {"type": "session_seeded", "session_id": sid, "imported": False}
    started = time.monotonic()
    with gateway_lock(exclusive=True):
        gateway.stop()
        try:
            if isinstance(req.get("config"), dict):
                # Upstream copies the benchmark's config afresh each day; its agents and
                # tool policy are kept, the endpoints are sclate's.
                write_config(settings, req["config"])
            transcript = str(req.get("transcript") or "")
            if transcript.strip():
                sessions = state_dir() / "agents" / agent / "sessions"
                _write_atomic(sessions / f"{sid}.jsonl", transcript if transcript.endswith("\n") else transcript + "\n")
                store = sessions / "sessions.json"
                data = _read_json(store, {})
                data = data if isinstance(data, dict) else {}
                data[f"agent:{agent}:explicit:{sid}"] = {"sessionId": sid, "sessionFile": f"{sid}.jsonl"}
                _write_atomic(store, json.dumps(data, indent=2))
                proc = _run(
                    [OPENCLAW, "doctor", "--session-sqlite", "import", "--session-sqlite-all-agents"], timeout_s=300
                )
                if proc["exit_code"] != 0 or " 0 issue(s)" not in proc["stdout"]:
                    return {"type": "error", "error": f"openclaw doctor --session-sqlite import: {_failure(proc)}"}
        finally:
            gateway.start()
    _write_atomic(seeded_file, json.dumps([*seeded, sid]))
    return {
        "type": "session_seeded",
        "session_id": sid,
        "imported": True,
        "seconds": round(time.monotonic() - started, 3),
    }


def turn(text: str, session: str, settings: dict[str, Any]) -> dict[str, Any]:
    sid = session_id(session)
    timeout_s = float(settings["turn_timeout_s"])
    argv = [OPENCLAW, "agent", "--session-id", sid, "--message", text, "--timeout", str(int(timeout_s))]
    if settings.get("thinking"):
        argv += ["--thinking", str(settings["thinking"])]
    proc = _run(argv, timeout_s=timeout_s + 30)
    out: dict[str, Any] = {
        "reply": proc["stdout"].strip() if proc["exit_code"] == 0 else "",
        "exit_code": proc["exit_code"],
        "openclaw_session": sid,
    }
    if proc["exit_code"] != 0:
        out["error"] = _failure(proc)
    return out


# -- scheduled work ----------------------------------------------------------------------------

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def every_ns(text: str) -> int:
    """``30m`` / ``1h`` / ``0m`` (off) as nanoseconds; 0 when off or unreadable."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", str(text))
    return int(float(m.group(1)) * _UNITS[m.group(2)] * _NS) if m else 0


def jobs() -> list[dict[str, Any]]:
    proc = _run([OPENCLAW, "cron", "list", "--json"], timeout_s=120)
    if proc["exit_code"] != 0:
        return []
    try:
        listed = json.loads(proc["stdout"][proc["stdout"].index("{") :])
    except ValueError:
        return []
    found = listed.get("jobs", []) if isinstance(listed, dict) else []
    return [j for j in found if isinstance(j, dict)]


def _next_ms(job: dict[str, Any]) -> int | None:
    state: dict[str, Any] = job["state"] if isinstance(job.get("state"), dict) else {}
    value = job.get("nextRunAtMs", state.get("nextRunAtMs"))
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _heartbeat_config() -> int:
    cfg = _read_json(config_path(), {})
    try:
        return every_ns(cfg["agents"]["defaults"]["heartbeat"]["every"])
    except (KeyError, TypeError):
        return 0


def _heartbeat_due(now_ns: int) -> int | None:
    every = _heartbeat_config()
    if every <= 0:
        return None
    state = _read_json(HOME / "sclate-heartbeat.json", {})
    last = state.get("last_ns") if isinstance(state, dict) else None
    if not isinstance(last, int):
        # The first heartbeat is one interval after the harness first looked.
        last = now_ns
        _write_atomic(HOME / "sclate-heartbeat.json", json.dumps({"last_ns": last}))
    return last + every


def schedule(listed: list[dict[str, Any]] | None = None) -> dict[str, int]:
    """Each enabled cron job's next due time and the next heartbeat (ns, simulated clock)."""
    out: dict[str, int] = {}
    for job in jobs() if listed is None else listed:
        due = _next_ms(job)
        if job.get("enabled") is False or due is None or not job.get("id"):
            continue
        out[str(job["id"])] = due * _MS
    heartbeat = _heartbeat_due(time.time_ns())
    if heartbeat is not None:
        out["heartbeat"] = heartbeat
    return out


def create_jobs(settings: dict[str, Any]) -> list[str]:
    """The run's cron jobs (``cron_jobs`` option), once: a name OpenClaw has is skipped.
    Their calls go to the memory listener (model ``sclate-memory``): background work."""
    have = {str(j.get("name")) for j in jobs()}
    errors: list[str] = []
    model = "sclate-memory/" + os.environ.get("SCLATE_MODEL", "")
    for job in settings.get("cron_jobs", []):
        if str(job["name"]) in have:
            continue
        argv = [OPENCLAW, "cron", "add", str(job["name"]), "--cron", str(job["schedule"]), "--tz", "UTC",
                "--exact", "--message", str(job["message"]), "--no-deliver", "--model", model,
                "--session", "isolated"]  # fmt: skip
        proc = _run(argv, timeout_s=120)
        if proc["exit_code"] != 0:
            errors.append(f"openclaw cron add {job['name']!r}: {_failure(proc)}")
    return errors


def _heartbeat_last_ms() -> int:
    proc = _run([OPENCLAW, "system", "heartbeat", "last", "--json"], timeout_s=60)
    try:
        last = json.loads(proc["stdout"][proc["stdout"].index("{") :])
    except ValueError:
        return 0
    ts = last.get("ts") if isinstance(last, dict) else None
    return int(ts) if isinstance(ts, int | float) else 0


def tick(settings: dict[str, Any]) -> int:
    ran: list[dict[str, Any]] = []
    failed = False
    with gateway_lock(exclusive=False):
        now_ns = time.time_ns()
        listed = jobs()
        for job in listed:
            due = _next_ms(job)
            if job.get("enabled") is False or due is None or due * _MS > now_ns:
                continue
            proc = _run(
                [OPENCLAW, "cron", "run", str(job["id"]), "--due", "--wait", "--wait-timeout", "30m",
                 "--timeout", "1800000"],
                timeout_s=float(settings["turn_timeout_s"]) + 60,
            )  # fmt: skip
            ran.append({"job": job["id"], "name": job.get("name"), "exit_code": proc["exit_code"]})
            failed |= proc["exit_code"] != 0
        heartbeat = _heartbeat_due(now_ns)
        if heartbeat is not None and heartbeat <= now_ns:
            before = _heartbeat_last_ms()
            proc = _run(
                [OPENCLAW, "system", "event", "--text", str(settings["heartbeat_prompt"]), "--mode", "now"],
                timeout_s=120,
            )
            # The event returns at once; the heartbeat's turn runs in the gateway: wait for it.
            deadline = time.monotonic() + float(settings["turn_timeout_s"])
            while proc["exit_code"] == 0 and time.monotonic() < deadline and _heartbeat_last_ms() <= before:
                time.sleep(1.0)
            _write_atomic(HOME / "sclate-heartbeat.json", json.dumps({"last_ns": now_ns}))
            ran.append({"job": "heartbeat", "exit_code": proc["exit_code"]})
            failed |= proc["exit_code"] != 0
        listed = jobs()
    print(json.dumps({"type": "tick", "ran": ran, "schedule": schedule(listed)}))
    return 1 if failed else 0


# -- the protocol ------------------------------------------------------------------------------


def serve(settings: dict[str, Any]) -> int:
    seq = 0
    session = "default"

    def say(event: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    gateway = Gateway(float(settings["gateway_start_timeout_s"]))
    try:
        try:
            with gateway_lock(exclusive=True):
                gateway.start()
        except RuntimeError as exc:
            say({"type": "ready", "errors": [str(exc)]})
            return 1
        errors = create_jobs(settings)
        seeded = _read_json(HOME / "sclate-seeded.json", [])
        say({"type": "ready", "errors": errors, "seeded": seeded, "schedule": schedule()})
        for raw in sys.stdin:
            try:
                req = json.loads(raw)
            except ValueError:
                say({"type": "error", "error": f"not JSON: {raw[:200]!r}"})
                continue
            kind = req.get("type") if isinstance(req, dict) else None
            try:
                if kind == "start_session":
                    session = str(req.get("session") or "default")
                    say({"type": "session_started", "session": session})
                elif kind == "stop_session":
                    say({"type": "session_stopped"})
                elif kind == "seed_session":
                    say(seed_session(gateway, settings, req))
                elif kind == "schedule":
                    say({"type": "schedule", "schedule": schedule()})
                elif kind == "message":
                    seq += 1
                    # The receipt, on this sandbox's (simulated) clock, before OpenClaw starts.
                    say({"type": "received", "seq": seq, "wall_ns": time.time_ns(), "mono_ns": time.monotonic_ns()})
                    if not gateway.alive():
                        with gateway_lock(exclusive=True):
                            gateway.start()
                    result = turn(str(req.get("text", "")), str(req.get("session") or session), settings)
                    say({"type": "turn_end", "round_id": req.get("round_id"), "schedule": schedule(), **result})
                else:
                    say({"type": "error", "error": f"unknown request type {kind!r}"})
            except RuntimeError as exc:  # the gateway would not start again
                say({"type": "error", "error": str(exc)})
    finally:
        gateway.stop()
    return 0


DEFAULTS: dict[str, Any] = {
    "agent": "main",
    "context_window": 65536,
    "max_tokens": 256,
    "tools_profile": "coding",
    "heartbeat_every": "0m",
    "heartbeat_prompt": "Heartbeat: check your notes and pending work.",
    "turn_timeout_s": 1800,
    "gateway_start_timeout_s": 240,
    "cron_jobs": [],
}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("setup", "serve", "tick", "schedule"):
        print(
            "usage: bridge.py setup|serve|tick|schedule  (settings JSON in SCLATE_OPENCLAW_SETTINGS)", file=sys.stderr
        )
        return 2
    settings = {**DEFAULTS, **json.loads(os.environ.get("SCLATE_OPENCLAW_SETTINGS") or "{}")}
    if argv[1] == "setup":
        report = setup(settings)
        print(json.dumps(report))
        return 1 if report.get("errors") else 0
    if argv[1] == "schedule":
        print(json.dumps({"type": "schedule", "schedule": schedule()}))
        return 0
    if argv[1] == "tick":
        return tick(settings)
    return serve(settings)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
