"""The Hermes harness's pieces in memory and as real subprocesses.

``bridge.py`` runs here against a test double of the ``hermes`` program
(``FAKE_HERMES``: records its argv, answers like ``hermes chat -Q`` does,
writes ``cron/jobs.json`` like ``hermes cron create``). The real Hermes runs
in tests/e2e/test_hermes.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from adapters import ExecOutput, LineChannel, ProxyEndpoints
from adapters.hermes import DECLARATION, HermesHarness, cron_events
from adapters.hermes.image import BRIDGE_PY, HERMES_VERSION
from adapters.memory import HINDSIGHT, memory_system
from adapters.reference_harness import SubprocessTransport
from sclated.errors import InvalidArgument
from sclated.scheduler import At, DeliverPrompt, EventSpec, ExecInSandbox

IMAGES = Path(__file__).resolve().parents[2] / "images"
_S = 1_000_000_000

FAKE_HERMES = r'''#!/usr/bin/env python3
"""Test double of the hermes CLI (only what bridge.py calls)."""
import json, os, sys, pathlib
home = pathlib.Path(os.environ["HERMES_HOME"])
home.mkdir(parents=True, exist_ok=True)
log = home / "fake-argv.jsonl"
with log.open("a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
args = sys.argv[1:]
if args[:2] == ["cron", "create"]:
    jobs_file = home / "cron" / "jobs.json"
    jobs_file.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(jobs_file.read_text()) if jobs_file.exists() else {"jobs": []}
    data["jobs"].append({"id": "job%d" % len(data["jobs"]), "name": args[args.index("--name") + 1],
                         "enabled": True, "next_run_at": "2026-05-01T10:00:00+02:00"})
    jobs_file.write_text(json.dumps(data))
    sys.exit(0)
if args[:2] == ["cron", "tick"]:
    sys.exit(int(os.environ.get("FAKE_TICK_EXIT", "0")))
if args[0] == "chat":
    text = args[args.index("-q") + 1]
    if text == "fail":
        print("API call failed after 1 retries: Connection error.")
        sys.exit(1)
    sid = args[args.index("--resume") + 1] if "--resume" in args else "20260501_080000_%06x" % (len(text) * 4099)
    if text.startswith("plugin fails"):  # as hindsight-hermes logs a failed recall and retain
        (home / "logs").mkdir(exist_ok=True)
        with (home / "logs" / "errors.log").open("a") as f:
            f.write("2026-05-01 08:00:00 WARNING hindsight_hermes.tools: Hindsight pre_llm_call recall failed: "
                    + text + "\n")
            f.write("2026-05-01 08:00:01 WARNING hindsight_hermes.tools: Hindsight post_llm_call retain failed: "
                    + text + "\n")
    print("echo: " + text)
    print("\nsession_id: " + sid, file=sys.stderr)
    sys.exit(0)
sys.exit(3)
'''


@pytest.fixture
def fake_home(tmp_path: Path) -> dict[str, str]:
    hermes = tmp_path / "hermes"
    hermes.write_text(FAKE_HERMES.replace("/usr/bin/env python3", sys.executable))
    hermes.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    return {
        **os.environ,
        "HERMES_HOME": str(tmp_path / "home"),
        "SCLATE_HERMES_BIN": str(hermes),
        "SCLATE_HERMES_WORKDIR": str(work),
    }


def _argv_log(env: Mapping[str, str]) -> list[list[str]]:
    path = Path(env["HERMES_HOME"]) / "fake-argv.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _bridge(env: Mapping[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(BRIDGE_PY), *args, env=dict(env), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, json.loads(out.decode().strip().splitlines()[-1])


# -- declaration and options -------------------------------------------------------------


def test_the_pinned_version_is_the_image_requirement() -> None:
    text = (IMAGES / "hermes" / "requirements.txt").read_text()
    assert f"hermes-agent=={HERMES_VERSION}" in text.split()
    assert DECLARATION.version == HERMES_VERSION and DECLARATION.image == "sclate-hermes"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"session_scope": "forever"}, "session_scope"),
        ({"cron_jobs": {"schedule": "every 1h"}}, "cron_jobs"),
        ({"cron_jobs": [{"schedule": "", "prompt": "x"}]}, "cron_jobs"),
        ({"cron_jobs": [{"schedule": "every 1h", "prompt": "x", "when": 1}]}, "cron_jobs"),
        ({"cron_jobs": [{"schedule": "every 1h", "prompt": "a", "name": "n"}] * 2}, "cron_jobs"),
        ({"toolsets": []}, "toolsets"),
        ({"toolsets": ["memory; rm -rf /"]}, "toolsets"),
        ({"max_turns": 0}, "max_turns"),
        ({"turn_timeout_s": True}, "turn_timeout_s"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        HermesHarness(options)
    assert err.value.field == f"run.agent.options.{field}"


def test_environment_points_each_role_at_its_listener() -> None:
    h = HermesHarness({"toolsets": "memory,todo", "max_tokens": 64})
    ep = ProxyEndpoints("http://127.0.0.1:4001", "http://127.0.0.1:4002", "http://127.0.0.1:4003", "k", "m")
    env = h.environment(ep)
    assert env["SCLATE_AGENT_BASE_URL"] == "http://127.0.0.1:4001/v1"
    assert env["SCLATE_MEMORY_BASE_URL"] == "http://127.0.0.1:4002/v1"
    assert env["SCLATE_AUX_BASE_URL"] == "http://127.0.0.1:4003/v1"
    settings = json.loads(env["SCLATE_HERMES_SETTINGS"])
    assert settings["toolsets"] == ["memory", "todo"] and settings["max_tokens"] == 64
    # A cron tick runs as a memory job: its main calls reach the memory listener.
    assert h.environment(ep.as_role("memory"))["SCLATE_AGENT_BASE_URL"] == "http://127.0.0.1:4002/v1"


def test_hermes_runs_with_hindsight_through_its_plugin_and_no_other_system() -> None:
    assert DECLARATION.memory_systems == ("native", "hindsight")
    with pytest.raises(InvalidArgument, match="it offers: native, hindsight"):
        memory_system("mem0", DECLARATION.memory_systems, "hermes")
    ep = ProxyEndpoints("http://127.0.0.1:4001", "http://127.0.0.1:4002", "http://127.0.0.1:4003", "k", "m")
    env = HermesHarness({}, HINDSIGHT).environment(ep)
    assert json.loads(env["SCLATE_HERMES_SETTINGS"])["plugins"] == ["hindsight"]
    assert env["HINDSIGHT_API_URL"] == "http://127.0.0.1:8888" and env["HINDSIGHT_BANK_ID"] == "hermes"
    assert env["SCLATE_HINDSIGHT_BANKS"] == "hermes"
    # Without it nothing of the plugin is configured or enabled.
    plain = HermesHarness({}).environment(ep)
    assert json.loads(plain["SCLATE_HERMES_SETTINGS"])["plugins"] == []
    assert not [k for k in plain if k.startswith("HINDSIGHT_")]
    # The plugin is in Hermes's image, at the server's client version.
    text = (IMAGES / "hermes" / "requirements.txt").read_text().split()
    assert "hindsight-hermes==0.5.0" in text
    assert "hindsight-client==" + HINDSIGHT.package.split("==")[1] in text


def test_cron_events_one_tick_per_due_time() -> None:
    events = cron_events({"a": 30 * _S, "b": 10 * _S, "c": 30 * _S, "bad": "soon"})
    assert [e.id for e in events] == [f"hermes:cron:{10 * _S}", f"hermes:cron:{30 * _S}"]
    assert events[1].trigger == At(30 * _S) and events[1].data["jobs"] == ["a", "c"]
    effect = events[0].effects[0]
    assert isinstance(effect, ExecInSandbox) and effect.holder == "cron" and "bridge.py tick" in effect.command
    # The same report read again gives the same ids (the run skips known ones).
    assert [e.id for e in cron_events({"b": 10 * _S})] == [events[0].id]


# -- the bridge against a test double of hermes -------------------------------------------


async def test_setup_writes_config_and_jobs_once(fake_home: dict[str, str]) -> None:
    env = {
        **fake_home,
        "SCLATE_HERMES_SETTINGS": json.dumps(
            {"cron_jobs": [{"schedule": "every 1h", "prompt": "check", "name": "hourly"}]}
        ),
    }
    code, first = await _bridge(env, "setup")
    assert code == 0 and first["created"] is True
    config = (Path(env["HERMES_HOME"]) / "config.yaml").read_text()
    assert "base_url: ${SCLATE_AGENT_BASE_URL}" in config and "${SCLATE_MEMORY_BASE_URL}" in config
    assert "allow_lazy_installs: false" in config and "context_length: 65536" in config
    # 10:00+02:00 is 08:00 UTC.
    assert first["schedule"] == {"job0": 1_777_622_400 * _S}
    code, again = await _bridge(env, "setup")
    assert again["created"] is False and again["schedule"] == first["schedule"]
    creates = [a for a in _argv_log(env) if a[:2] == ["cron", "create"]]
    assert creates == [["cron", "create", "every 1h", "check", "--name", "hourly"]]


async def test_setup_enables_the_memory_plugin_only_when_asked(fake_home: dict[str, str]) -> None:
    env = {**fake_home, "SCLATE_HERMES_SETTINGS": json.dumps({"plugins": ["hindsight"]})}
    code, _ = await _bridge(env, "setup")
    config = (Path(env["HERMES_HOME"]) / "config.yaml").read_text()
    assert code == 0 and 'plugins:\n  enabled: ["hindsight"]\n' in config
    plain = {**fake_home, "HERMES_HOME": fake_home["HERMES_HOME"] + "-plain", "SCLATE_HERMES_SETTINGS": "{}"}
    await _bridge(plain, "setup")
    assert "plugins:" not in (Path(plain["HERMES_HOME"]) / "config.yaml").read_text()


async def test_a_turn_reports_the_memory_plugins_failures(fake_home: dict[str, str]) -> None:
    env = {**fake_home, "SCLATE_HERMES_SETTINGS": json.dumps({"plugins": ["hindsight"], "turn_timeout_s": 60})}
    t = await SubprocessTransport.start([sys.executable, str(BRIDGE_PY), "serve"], env=env)
    try:

        async def ask(text: str) -> dict[str, Any]:
            await t.send(json.dumps({"type": "message", "text": text, "session": "s"}))
            await t.readline()
            return dict(json.loads(await t.readline()))

        fine = await ask("hello")
        assert fine["memory"] == {"system": "hindsight"}
        failed = await ask("plugin fails: connection refused")
        assert "recall failed: plugin fails" in failed["memory"]["recall_error"]
        assert "retain failed: plugin fails" in failed["memory"]["store_error"]
        # Only what was logged during the turn counts.
        assert (await ask("hello again"))["memory"] == {"system": "hindsight"}
    finally:
        await t.close()


async def test_serve_starts_then_resumes_each_session(fake_home: dict[str, str]) -> None:
    t = await SubprocessTransport.start([sys.executable, str(BRIDGE_PY), "serve"], env=fake_home)
    try:

        async def ask(text: str, session: str) -> tuple[dict[str, Any], dict[str, Any]]:
            await t.send(json.dumps({"type": "message", "text": text, "session": session}))
            received = json.loads(await t.readline())
            end = json.loads(await t.readline())
            return received, end

        r1, e1 = await ask("hello", "day01")
        assert r1["type"] == "received" and r1["seq"] == 1 and isinstance(r1["wall_ns"], int)
        assert e1["type"] == "turn_end" and e1["reply"] == "echo: hello" and e1["resumed"] is False
        _, e2 = await ask("again", "day01")
        assert e2["resumed"] is True and e2["hermes_session"] == e1["hermes_session"]
        _, e3 = await ask("other day", "day02")
        assert e3["resumed"] is False and e3["hermes_session"] != e1["hermes_session"]
        _, bad = await ask("fail", "day02")
        # Hermes prints its error on stdout in quiet mode: not a reply.
        assert bad["exit_code"] == 1 and bad["reply"] == "" and "Connection error" in bad["error"]
        chats = [a for a in _argv_log(fake_home) if a[0] == "chat"]
        assert "--resume" not in chats[0] and chats[1][chats[1].index("--resume") + 1] == e1["hermes_session"]
        kept = json.loads((Path(fake_home["HERMES_HOME"]) / "sclate-sessions.json").read_text())
        assert kept == {"day01": e1["hermes_session"], "day02": e3["hermes_session"]}
    finally:
        await t.close()


async def test_tick_reports_failure_and_schedule(fake_home: dict[str, str]) -> None:
    jobs = Path(fake_home["HERMES_HOME"]) / "cron" / "jobs.json"
    jobs.parent.mkdir(parents=True)
    jobs.write_text(
        json.dumps(
            {
                "jobs": [
                    {"id": "on", "enabled": True, "next_run_at": "2026-05-01T08:00:00+00:00"},
                    {"id": "off", "enabled": False, "next_run_at": "2026-05-01T09:00:00+00:00"},
                    {"id": "paused", "paused_at": "2026-05-01T07:00:00", "next_run_at": "2026-05-01T09:00:00"},
                    {"id": "garbled", "next_run_at": "tomorrow"},
                ]
            }
        )
    )
    code, ok = await _bridge(fake_home, "tick")
    assert code == 0 and ok["exit_code"] == 0 and ok["schedule"] == {"on": 1_777_622_400 * _S}
    code, failed = await _bridge({**fake_home, "FAKE_TICK_EXIT": "4"}, "tick")
    assert code == 1 and failed["exit_code"] == 4


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
        self.scheduled: list[EventSpec] = []
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
        argv = [sys.executable, str(BRIDGE_PY), "serve"]
        return _Channel(await SubprocessTransport.start(argv, env={**self.env, **(env or {})}))

    def schedule(self, specs: Sequence[EventSpec]) -> None:
        self.scheduled.extend(specs)


async def test_the_driver_delivers_and_schedules_hermes_crons(fake_home: dict[str, str]) -> None:
    h = HermesHarness({"cron_jobs": [{"schedule": "every 1h", "prompt": "check"}], "session_scope": "run"})
    access = _LocalAccess({**fake_home, **h.environment(ProxyEndpoints("http://a", "http://m", "http://x", "k", "m"))})
    await h.start(access)
    try:
        assert [e.id for e in access.scheduled] == [f"hermes:cron:{1_777_622_400 * _S}"]
        await h.start_session("day01")
        first = await h.deliver(DeliverPrompt("hi", session="day01", round_id="r1"))
        await h.start_session("day02")
        second = await h.deliver(DeliverPrompt("later", session="day02", round_id="r2"))
        assert first.reply == "echo: hi" and first.received_sim_ns is not None and first.received_seq == 1
        # session_scope=run: day 2 continues day 1's Hermes session.
        assert second.details["resumed"] is True
        assert second.details["hermes_session"] == first.details["hermes_session"]
        await h.job_ended("python3 /opt/sclate-hermes/bridge.py tick", ExecOutput(0, '{"schedule": {"j": 5}}'))
        assert access.scheduled[-1].trigger == At(5)
    finally:
        await h.stop()
