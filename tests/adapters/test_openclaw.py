"""The OpenClaw harness's pieces in memory and as real subprocesses.

``bridge.py`` runs here against a test double of the ``openclaw`` program
(``FAKE_OPENCLAW``: ``gateway run`` serves ``/health`` on the port it is given;
``agent`` echoes; ``cron``, ``doctor`` and ``system`` keep their state in JSON
files and log their argv). The real OpenClaw runs in tests/e2e/test_openclaw.py.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from adapters import ProxyEndpoints, SessionSeed
from adapters.harnesses import HARNESSES
from adapters.openclaw import DECLARATION, OpenClawHarness, tick_events
from adapters.openclaw.image import BRIDGE_PY, NODE_PACKAGE, OPENCLAW_VERSION
from adapters.reference_harness import SubprocessTransport
from sclated.errors import InvalidArgument
from sclated.scheduler import At, DeliverPrompt, ExecInSandbox

IMAGES = Path(__file__).resolve().parents[2] / "images"
_S = 1_000_000_000

FAKE_OPENCLAW = r'''#!/usr/bin/env python3
"""Test double of the openclaw CLI (only what bridge.py calls)."""
import http.server, json, os, sys, pathlib, time
state = pathlib.Path(os.environ["OPENCLAW_STATE_DIR"])
state.mkdir(parents=True, exist_ok=True)
with (state / "fake-argv.jsonl").open("a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
args = sys.argv[1:]
jobs_file = state / "fake-jobs.json"
jobs = json.loads(jobs_file.read_text()) if jobs_file.exists() else []
if args[:2] == ["gateway", "run"]:
    if os.environ.get("FAKE_GATEWAY_FAILS"):
        print("gateway: refusing to start"); sys.exit(7)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404); self.end_headers()
            self.wfile.write(b'{"ok":true}')
        def log_message(self, *a): pass
    port = int(args[args.index("--port") + 1])
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
if args[:2] == ["config", "validate"]:
    json.loads(pathlib.Path(os.environ["OPENCLAW_CONFIG_PATH"]).read_text())
    print("Config valid"); sys.exit(0)
if args[0] == "agent":
    text = args[args.index("--message") + 1]
    if text == "fail":
        print("model call failed", file=sys.stderr); sys.exit(1)
    print("echo[%s]: %s" % (args[args.index("--session-id") + 1], text)); sys.exit(0)
if args[:2] == ["cron", "list"]:
    print(json.dumps({"jobs": jobs, "total": len(jobs)})); sys.exit(0)
if args[:2] == ["cron", "add"]:
    jobs.append({"id": "job%d" % len(jobs), "name": args[2], "enabled": True,
                 "state": {"nextRunAtMs": int(os.environ.get("FAKE_NEXT_MS", "1790000000000"))}})
    jobs_file.write_text(json.dumps(jobs)); sys.exit(0)
if args[:2] == ["cron", "run"]:
    for j in jobs:
        if j["id"] == args[2]:
            j["state"]["nextRunAtMs"] += 86400000
    jobs_file.write_text(json.dumps(jobs)); print(json.dumps({"ok": True, "ran": True})); sys.exit(0)
if args[0] == "doctor":
    print("session-sqlite import: 1 target(s), 1 legacy entries, 0 issue(s)"); sys.exit(0)
if args[:2] == ["system", "event"]:
    (state / "fake-heartbeat.json").write_text(json.dumps({"ts": int(time.time() * 1000) + 1}))
    print("ok"); sys.exit(0)
if args[:3] == ["system", "heartbeat", "last"]:
    p = state / "fake-heartbeat.json"
    print(p.read_text() if p.exists() else "{}"); sys.exit(0)
sys.exit(3)
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def fake_env(tmp_path: Path) -> dict[str, str]:
    openclaw = tmp_path / "openclaw"
    openclaw.write_text(FAKE_OPENCLAW.replace("/usr/bin/env python3", sys.executable))
    openclaw.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    return {
        **os.environ,
        "SCLATE_OPENCLAW_BIN": str(openclaw),
        "SCLATE_OPENCLAW_HOME": str(home),
        "SCLATE_OPENCLAW_WORKDIR": str(work),
        "OPENCLAW_STATE_DIR": str(home / "state"),
        "OPENCLAW_CONFIG_PATH": str(home / "state" / "openclaw.json"),
        "OPENCLAW_GATEWAY_PORT": str(_free_port()),
        "SCLATE_MODEL": "smol",
    }


def _argv_log(env: dict[str, str]) -> list[list[str]]:
    path = Path(env["OPENCLAW_STATE_DIR"]) / "fake-argv.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _bridge_module() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("openclaw_bridge", BRIDGE_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- declaration and options -------------------------------------------------------------


def test_the_pinned_versions_are_the_image_recipe() -> None:
    package = json.loads((IMAGES / "openclaw" / "npm" / "package.json").read_text())
    assert package["dependencies"] == {"openclaw": OPENCLAW_VERSION}
    lock = json.loads((IMAGES / "openclaw" / "npm" / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/openclaw"]["version"] == OPENCLAW_VERSION
    # The lock must not name a registry host: installs use the machine's configured one.
    assert "resolved" not in json.dumps(lock)
    # openclaw's engines: >=24.16 <25.
    major, minor, _ = (int(x) for x in NODE_PACKAGE.rpartition("@")[2].split("."))
    assert major == 24 and minor >= 16
    assert DECLARATION.version == OPENCLAW_VERSION
    assert "openclaw" in {e.declaration.name for e in HARNESSES}


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"cron_jobs": [{"schedule": "every 1h", "message": "x"}]}, "cron_jobs"),
        ({"cron_jobs": [{"schedule": "0 13 * * *", "message": ""}]}, "cron_jobs"),
        ({"cron_jobs": [{"schedule": "0 13 * * *", "message": "x", "when": 1}]}, "cron_jobs"),
        ({"heartbeat_every": "soon"}, "heartbeat_every"),
        ({"tools_profile": "everything"}, "tools_profile"),
        ({"session_scope": "day"}, "session_scope"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"thinking": "deep"}, "thinking"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        OpenClawHarness(options)
    assert err.value.field == f"run.agent.options.{field}"


def test_environment_points_each_role_at_its_listener() -> None:
    env = OpenClawHarness({}).environment(
        ProxyEndpoints("http://127.0.0.1:4001", "http://127.0.0.1:4002", "http://127.0.0.1:4003", "sk-run", "smol")
    )
    assert env["SCLATE_AGENT_BASE_URL"] == "http://127.0.0.1:4001/v1"
    assert env["SCLATE_MEMORY_BASE_URL"] == "http://127.0.0.1:4002/v1"
    assert env["SCLATE_AUX_BASE_URL"] == "http://127.0.0.1:4003/v1"
    assert env["SCLATE_API_KEY"] == "sk-run" and env["SCLATE_MODEL"] == "smol"


def test_tick_events_one_per_due_time() -> None:
    t1, t2 = 100 * _S, 200 * _S
    specs = tick_events({"a": t1, "heartbeat": t1, "b": t2, "bad": "x"})
    assert [s.id for s in specs] == [f"openclaw:cron:{t1}", f"openclaw:cron:{t2}"]
    assert isinstance(specs[0].trigger, At) and specs[0].trigger.time_ns == t1
    (effect,) = specs[0].effects
    assert isinstance(effect, ExecInSandbox) and effect.holder == "cron"
    assert specs[0].data["jobs"] == ["a", "heartbeat"]


def test_session_scope_run_keeps_seeded_sessions_apart() -> None:
    harness = OpenClawHarness({"session_scope": "run"})
    harness._seeded.add("day01_x")
    assert harness._session_for(DeliverPrompt("q", session="day01_x")) == "day01_x"
    assert harness._session_for(DeliverPrompt("q", session="lme-1")) == "sclate-run"
    assert OpenClawHarness({})._session_for(DeliverPrompt("q", session="lme-1")) == "lme-1"


# -- the bridge's config and schedule, in memory -----------------------------------------------


def test_config_keeps_the_benchmarks_agents_and_replaces_its_endpoints() -> None:
    bridge = _bridge_module()
    # The shape of upstream's metaclaw-bench openclaw_cfg/openclaw.json.
    upstream = {
        "models": {"providers": {"metaclaw-bench": {"baseUrl": "${BENCHMARK_BASE_URL}"}}},
        "agents": {
            "defaults": {"timeoutSeconds": 6000, "model": {"primary": "metaclaw-bench/${BENCHMARK_MODEL}"}},
            "list": [
                {"id": "metaclaw_agent", "name": "metaclaw_agent", "skills": [], "agentDir": "${METACLAW_ROOT}/x"}
            ],
        },
        "plugins": {"load": {"paths": ["${METACLAW_ROOT}/benchmark/openclaw_customize"]}},
        "tools": {"profile": "coding", "deny": ["group:memory"]},
    }
    cfg = bridge.build_config({**bridge.DEFAULTS, "max_tokens": 24}, upstream)
    assert set(cfg["models"]["providers"]) == {"sclate", "sclate-memory", "sclate-aux"}
    assert cfg["models"]["providers"]["sclate"]["baseUrl"] == "${SCLATE_AGENT_BASE_URL}"
    assert cfg["models"]["providers"]["sclate-memory"]["baseUrl"] == "${SCLATE_MEMORY_BASE_URL}"
    assert cfg["models"]["providers"]["sclate"]["models"][0]["maxTokens"] == 24
    assert cfg["agents"]["list"] == [
        {"id": "metaclaw_agent", "name": "metaclaw_agent", "skills": [], "workspace": "/workspace"}
    ]
    assert cfg["agents"]["defaults"]["timeoutSeconds"] == 6000
    assert cfg["agents"]["defaults"]["model"] == {"primary": "sclate/${SCLATE_MODEL}"}
    assert cfg["tools"] == upstream["tools"]  # its tool policy kept
    assert "load" not in cfg["plugins"]  # upstream's plugin paths do not exist here
    assert cfg["cron"] == {"enabled": False} and cfg["update"] == {"checkOnStart": False}
    assert "${METACLAW_ROOT}" not in json.dumps(cfg) and "BENCHMARK_" not in json.dumps(cfg)
    bare = bridge.build_config(bridge.DEFAULTS, None)
    assert bare["agents"]["list"] == [{"id": "main", "name": "main", "workspace": "/workspace"}]
    assert bare["tools"] == {"profile": "coding"}
    assert (
        bridge.build_config({**bridge.DEFAULTS, "tools_profile_override": "minimal"}, upstream)["tools"]["profile"]
        == "minimal"
    )


def test_session_ids_and_durations() -> None:
    bridge = _bridge_module()
    assert bridge.session_id("day01_5d0c1a52-3f0e") == "day01_5d0c1a52-3f0e"
    assert bridge.session_id("metaclaw:day01:start") == "metaclaw-day01-start"
    assert bridge.session_id("::") == "sclate-default"
    assert bridge.every_ns("30m") == 1800 * _S and bridge.every_ns("0m") == 0 and bridge.every_ns("x") == 0


def test_a_restored_gateway_lease_is_released_before_the_gateway_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot's state directory holds its running gateway's lease; OpenClaw would
    refuse to start a branch's gateway until that lease expired on simulated time."""
    import sqlite3

    bridge = _bridge_module()
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(tmp_path))
    assert bridge.release_stale_gateway_lease() == 0  # no database yet: nothing to do
    (tmp_path / "state").mkdir()
    db = tmp_path / "state" / "openclaw.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE other (x)")
    assert bridge.release_stale_gateway_lease() == 0  # no lease table: nothing to do
    with sqlite3.connect(db) as con:
        con.execute(
            "CREATE TABLE state_leases (scope TEXT, lease_key TEXT, owner TEXT, expires_at INTEGER, payload_json TEXT)"
        )
        con.execute("INSERT INTO state_leases VALUES ('gateway-owner', 'global', 'a', 9e15, '{}')")
        con.execute("INSERT INTO state_leases VALUES ('startup-migration', 'global', 'b', 9e15, '{}')")
    assert bridge.release_stale_gateway_lease() == 1
    with sqlite3.connect(db) as con:
        left = con.execute("SELECT scope FROM state_leases").fetchall()
    assert left == [("startup-migration",)]


# -- the bridge as a subprocess against the double -----------------------------------------


async def _bridge(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    import asyncio

    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(BRIDGE_PY), *args, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, json.loads(out.decode().strip().splitlines()[-1])


async def test_setup_then_serve_seeds_sessions_delivers_and_ticks(fake_env: dict[str, str]) -> None:
    settings = {"cron_jobs": [{"name": "daily", "schedule": "0 13 * * *", "message": "tick"}], "heartbeat_every": "1h"}
    env = {**fake_env, "SCLATE_OPENCLAW_SETTINGS": json.dumps(settings), "FAKE_NEXT_MS": "1000"}
    code, report = await _bridge(env, "setup")
    assert code == 0 and report["created"] is True
    code, again = await _bridge(env, "setup")
    assert again["created"] is False
    t = await SubprocessTransport.start([sys.executable, str(BRIDGE_PY), "serve"], env=env)
    try:
        ready = json.loads(await t.readline())
        assert ready["type"] == "ready" and ready["errors"] == [] and ready["seeded"] == []
        assert ready["schedule"]["job0"] == 1000 * 1_000_000 and "heartbeat" in ready["schedule"]
        transcript = '{"type": "session", "id": "day01_a"}\n{"type": "message", "message": {"role": "user"}}'
        config = {"agents": {"list": [{"id": "tiny"}]}}
        seed = {"type": "seed_session", "session_id": "day01_a", "agent": "tiny", "transcript": transcript}
        await t.send(json.dumps({**seed, "config": config}))
        seeded = json.loads(await t.readline())
        assert seeded["type"] == "session_seeded" and seeded["imported"] is True
        sessions = Path(env["OPENCLAW_STATE_DIR"]) / "agents" / "tiny" / "sessions"
        assert (sessions / "day01_a.jsonl").read_text() == transcript + "\n"
        assert json.loads((sessions / "sessions.json").read_text()) == {
            "agent:tiny:explicit:day01_a": {"sessionId": "day01_a", "sessionFile": "day01_a.jsonl"}
        }
        cfg = json.loads(Path(env["OPENCLAW_CONFIG_PATH"]).read_text())
        assert [a["id"] for a in cfg["agents"]["list"]] == ["tiny"]
        # Seeding the same session again (a replay) imports nothing twice.
        await t.send(json.dumps({"type": "seed_session", "session_id": "day01_a", "agent": "tiny", "transcript": "x"}))
        assert json.loads(await t.readline())["imported"] is False

        await t.send(json.dumps({"type": "message", "text": "hello", "session": "day01_a", "round_id": "r1"}))
        received, end = json.loads(await t.readline()), json.loads(await t.readline())
        assert received["type"] == "received" and received["seq"] == 1
        assert end["type"] == "turn_end" and end["reply"] == "echo[day01_a]: hello" and end["round_id"] == "r1"
        await t.send(json.dumps({"type": "message", "text": "fail", "session": "day01_a"}))
        _, bad = json.loads(await t.readline()), json.loads(await t.readline())
        assert bad["exit_code"] == 1 and bad["reply"] == "" and "model call failed" in bad["error"]

        # A due job and a due heartbeat run through OpenClaw's own commands.
        hb = Path(env["SCLATE_OPENCLAW_HOME"]) / "sclate-heartbeat.json"
        hb.write_text(json.dumps({"last_ns": 0}))
        code, tick = await _bridge(env, "tick")
        assert code == 0 and tick["type"] == "tick"
        assert {r["job"] for r in tick["ran"]} == {"job0", "heartbeat"}
        assert tick["schedule"]["job0"] == (1000 + 86_400_000) * 1_000_000
        assert tick["schedule"]["heartbeat"] > 3600 * _S
        argv = _argv_log(env)
        assert ["cron", "run", "job0", "--due", "--wait", "--wait-timeout", "30m", "--timeout", "1800000"] in argv
        adds = [a for a in argv if a[:2] == ["cron", "add"]]
        assert len(adds) == 1 and adds[0][adds[0].index("--model") + 1] == "sclate-memory/smol"
        assert any(a[:2] == ["system", "event"] for a in argv)
    finally:
        await t.close()


async def test_a_gateway_that_will_not_start_is_reported(fake_env: dict[str, str]) -> None:
    env = {**fake_env, "FAKE_GATEWAY_FAILS": "1"}
    t = await SubprocessTransport.start([sys.executable, str(BRIDGE_PY), "serve"], env=env)
    try:
        ready = json.loads(await t.readline())
        assert ready["type"] == "ready" and "exited with 7" in ready["errors"][0]
        assert "refusing to start" in ready["errors"][0]
    finally:
        await t.close()


async def test_seed_reads_the_benchmarks_files_on_the_host(tmp_path: Path) -> None:
    from adapters.openclaw._harness import _read_seed

    transcript = tmp_path / "s.jsonl"
    transcript.write_text('{"type": "session"}\n')
    config = tmp_path / "openclaw.json"
    config.write_text("{not json")
    text, cfg = _read_seed(SessionSeed("s", "a", transcript, None))
    assert text == '{"type": "session"}\n' and cfg is None
    with pytest.raises(InvalidArgument, match="not valid JSON"):
        _read_seed(SessionSeed("s", "a", transcript, config))
