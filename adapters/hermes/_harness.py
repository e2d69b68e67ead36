"""Hermes Agent (PyPI ``hermes-agent``), unmodified, on the harness contract.

Inside its sandbox (image ``sclate-hermes``) ``bridge.py serve`` runs one
``hermes chat -q MSG -Q [--resume ID]`` per message and says when the turn
ended (the process exited). Everything Hermes keeps lives in ``HERMES_HOME``
(``/memory/hermes``): its config, sessions (``state.db``), ``MEMORY.md`` and
``USER.md``, skills and cron jobs, so snapshots and branches keep them.

Sessions: with ``session_scope="scenario"`` (the default) each of the run's
sessions (a MetaClaw day, a LongMemEval haystack session) is its own Hermes
session, continued with ``--resume`` while it lasts; ``session_scope="run"``
keeps one Hermes conversation across the whole run, as a personal assistant's
chat would.

Cron jobs: Hermes's own (made by its ``cronjob`` tool, or given as the
``cron_jobs`` option and created with ``hermes cron create``) are read from its
``cron/jobs.json`` after every turn and every tick, and each job's
``next_run_at`` becomes an event on the run's scheduler: the clock lands on
it, and ``hermes cron tick`` runs the due jobs under the sandbox's simulated
clock, as a job of the harness (its calls go to the memory listener). Hermes's
own timers never wait in real time: no Hermes gateway runs.

Memory systems: Hermes's own (``MEMORY.md``, ``USER.md``) always; with
``--memory hindsight`` also Hindsight, through the plugin Hindsight publishes for
Hermes (``hindsight-hermes``, installed in Hermes's venv and enabled in its
config.yaml). Chosen over Hermes's built-in ``hindsight`` memory provider because
that provider recalls for the *next* turn of the same process (the query is the
previous message, the result waits in memory): with one Hermes process per message
its recall never reaches a turn. The plugin's ``pre_llm_call`` hook recalls for the
message at hand and adds the memories to it; its ``post_llm_call`` hook retains the
exchange; its ``hindsight_recall``/``_retain``/``_reflect`` tools are offered in
addition. Its bank is ``hermes`` on the Hindsight server in the sandbox.

Differences from a person running Hermes: the model endpoint is the capture
proxy; its update check, lazy installs, tirith download, model catalog,
environment probe, background memory and skill reviews and command approvals
are off (each would reach the network, ask on stdin, or add model calls that
no user asked for); the toolsets default to ``memory`` only, so its first
prompt (~2,300 tokens) fits a small embedded model's context.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adapters import (
    Capability,
    ExecOutput,
    HarnessDeclaration,
    ProxyEndpoints,
    SandboxAccess,
    SessionSeed,
    TurnResult,
)
from adapters._bridge import BridgeDriver, turn_result
from adapters._bridge_replies import last_json, number_option
from adapters.hermes.image import HERMES_VERSION, IMAGE_NAME, register_image
from adapters.memory import MemorySystem
from sclated.errors import FailedPrecondition, InvalidArgument
from sclated.scheduler import At, DeliverPrompt, EventSource, EventSpec, ExecInSandbox, Priority

__all__ = ["BRIDGE", "DECLARATION", "HOME", "HermesHarness", "cron_events"]

register_image()

HOME = "/memory/hermes"
BRIDGE = "/opt/sclate-hermes/bridge.py"
TICK_COMMAND = f"python3 {BRIDGE} tick"
HINDSIGHT_BANK = "hermes"

DECLARATION = HarnessDeclaration(
    name="hermes",
    description="Hermes Agent (Nous Research), unmodified: one `hermes chat` per message resuming its "
    "session, HERMES_HOME in the memory volume, its cron jobs ticked on simulated time",
    image=IMAGE_NAME,
    wire_apis=frozenset({"openai_chat"}),
    capabilities=frozenset({Capability.CONSOLIDATE}),
    state_dirs=("/workspace", "/memory"),
    options=frozenset(
        {"turn_timeout_s", "max_tokens", "max_turns", "toolsets", "cron_toolsets", "cron_jobs", "session_scope"}
    ),
    version=HERMES_VERSION,
    executable="hermes",
    memory_systems=("native", "hindsight"),
)

_SCOPES = ("scenario", "run")


def _names(options: Mapping[str, Any], key: str, default: list[str]) -> list[str]:
    value = options.get(key, default)
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.isidentifier() for v in value):
        raise InvalidArgument(
            f'{key} must be a non-empty list of Hermes toolset names (like ["memory", "todo"])',
            field=f"run.agent.options.{key}",
        )
    return list(value)


def _cron_jobs(options: Mapping[str, Any]) -> list[dict[str, str]]:
    raw = options.get("cron_jobs", [])
    field = "run.agent.options.cron_jobs"
    if not isinstance(raw, list):
        raise InvalidArgument("cron_jobs must be a list of {schedule, prompt, name}", field=field)
    jobs: list[dict[str, str]] = []
    for i, job in enumerate(raw):
        if not isinstance(job, Mapping):
            raise InvalidArgument(f"cron_jobs[{i}] must be an object with schedule and prompt", field=field)
        unknown = set(job) - {"schedule", "prompt", "name"}
        if unknown:
            raise InvalidArgument(f"cron_jobs[{i}] has unknown key(s) {', '.join(sorted(unknown))}", field=field)
        schedule, prompt = job.get("schedule"), job.get("prompt")
        if not isinstance(schedule, str) or not schedule.strip():
            raise InvalidArgument(
                f"cron_jobs[{i}].schedule must be Hermes's schedule text ('every 1h', '0 9 * * *')", field=field
            )
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidArgument(f"cron_jobs[{i}].prompt must be a non-empty text", field=field)
        name = job.get("name", f"sclate-job-{i + 1}")
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgument(f"cron_jobs[{i}].name must be a non-empty text", field=field)
        jobs.append({"schedule": schedule.strip(), "prompt": prompt, "name": name.strip()})
    names = [j["name"] for j in jobs]
    if len(set(names)) != len(names):
        raise InvalidArgument("cron_jobs names must differ", field=field)
    return jobs


def cron_events(schedule: Mapping[str, Any]) -> list[EventSpec]:
    """Hermes's schedule (job id -> next due ns) as tick events, one per due time.

    Several jobs due at the same time share one tick (it runs every due job).
    The id names the due time, so the same report read again is the same event.
    """
    due_times = sorted({int(t) for t in schedule.values() if isinstance(t, int) and not isinstance(t, bool)})
    jobs_at = {t: sorted(str(j) for j, d in schedule.items() if d == t) for t in due_times}
    return [
        EventSpec(
            f"hermes:cron:{t}",
            At(t),
            (ExecInSandbox(TICK_COMMAND, holder="cron", timeout_s=1800.0),),
            priority=Priority.LOW,
            data={"cron": "hermes", "jobs": jobs_at[t]},
        )
        for t in due_times
    ]


class HermesHarness:
    """Drives ``bridge.py serve`` (see bridge.py for its JSON-lines protocol)."""

    declaration = DECLARATION

    def __init__(self, options: Mapping[str, Any], memory: MemorySystem | None = None) -> None:
        # Its own memory or Hindsight (declaration.memory_systems): the factory refuses any other.
        self._memory = memory
        self._turn_timeout_s = number_option(options, "turn_timeout_s", 1800, 1, 86_400)
        scope = options.get("session_scope", "scenario")
        if scope not in _SCOPES:
            raise InvalidArgument(
                f"session_scope must be one of {', '.join(_SCOPES)}", field="run.agent.options.session_scope"
            )
        self._scope = str(scope)
        self._settings = {
            "max_tokens": int(number_option(options, "max_tokens", 256, 1, 32_768)),
            "max_turns": int(number_option(options, "max_turns", 8, 1, 90)),
            "turn_timeout_s": self._turn_timeout_s,
            "toolsets": _names(options, "toolsets", ["memory"]),
            "cron_toolsets": _names(options, "cron_toolsets", ["todo"]),
            "cron_jobs": _cron_jobs(options),
            "context_length": 65536,
            "api_max_retries": 1,
            # Hindsight's Hermes plugin (hindsight-hermes), enabled in config.yaml.
            "plugins": ["hindsight"] if memory is not None and memory.server is not None else [],
        }
        self._sandbox: SandboxAccess | None = None
        self._bridge = BridgeDriver("Hermes", BRIDGE)
        self._session = "default"

    # -- environment and lifetime ----------------------------------------------------------
    def environment(self, endpoints: ProxyEndpoints) -> Mapping[str, str]:
        prefix = endpoints.openai_prefix
        return {
            "HERMES_HOME": HOME,
            "SCLATE_AGENT_BASE_URL": endpoints.agent + prefix,
            "SCLATE_AUX_BASE_URL": endpoints.aux + prefix,
            "SCLATE_MEMORY_BASE_URL": endpoints.memory + prefix,
            "SCLATE_API_KEY": endpoints.api_key,
            "SCLATE_MODEL": endpoints.model,
            "SCLATE_HERMES_SETTINGS": json.dumps(self._settings, sort_keys=True),
            **self._memory_environment(),
        }

    def _memory_environment(self) -> dict[str, str]:
        """hindsight-hermes reads its settings from these (they win over its
        ``~/.hindsight/hermes.json``): the server in the sandbox and Hermes's own bank."""
        system = self._memory
        if system is None or system.server is None:
            return {}
        return {
            "HINDSIGHT_API_URL": system.server.url,
            "HINDSIGHT_BANK_ID": HINDSIGHT_BANK,
            "HINDSIGHT_RECALL_BUDGET": "low",
            "HINDSIGHT_RECALL_MAX_TOKENS": "512",
            "HINDSIGHT_AUTO_RETAIN": "true",
            # Created when the server starts, so a recall before any retain finds it.
            "SCLATE_HINDSIGHT_BANKS": HINDSIGHT_BANK,
        }

    async def start(self, sandbox: SandboxAccess) -> None:
        self._sandbox = sandbox
        report = await self._bridge.setup(sandbox)
        self._schedule(report.get("schedule"))
        await self._bridge.open(sandbox)

    async def stop(self) -> None:
        self._sandbox = None
        await self._bridge.close()

    def _schedule(self, schedule: object) -> None:
        if self._sandbox is not None and isinstance(schedule, dict) and schedule:
            self._sandbox.schedule(cron_events(schedule))

    # -- the protocol -----------------------------------------------------------------------
    async def start_session(self, session: str) -> None:
        self._session = session
        await self._bridge.start_session(session)

    async def stop_session(self) -> None:
        await self._bridge.stop_session()

    def _session_for(self, prompt: DeliverPrompt) -> str:
        if self._scope == "run":
            return "run"
        return prompt.session or self._session

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        req = {"text": prompt.text, "session": self._session_for(prompt), "round_id": prompt.round_id}
        # Hermes's own retries and tool loop are bounded inside the bridge.
        answer = await self._bridge.message(req, self._turn_timeout_s + 60)
        self._schedule(answer.end.get("schedule"))
        return turn_result(
            answer,
            {
                "exit_code": answer.end.get("exit_code"),
                "hermes_session": answer.end.get("hermes_session", ""),
                "resumed": bool(answer.end.get("resumed")),
            },
        )

    # -- state -------------------------------------------------------------------------------
    async def seed_session(self, seed: SessionSeed) -> None:
        # Not declared (Capability.SEEDED_SESSIONS): a run never asks.
        raise FailedPrecondition("Hermes does not take recorded session histories", reason="UNSUPPORTED")

    async def save_state(self, dest: Path) -> None:
        return None  # everything Hermes keeps is in HERMES_HOME (the memory volume)

    async def restore_state(self, src: Path) -> None:
        return None

    def routines(self) -> Sequence[EventSource]:
        # Its cron jobs are not a fixed table: they are read from its state and
        # scheduled as they come due (see _schedule).
        return ()

    def consolidate_command(self) -> str | None:
        # Hermes writes MEMORY.md and USER.md with its memory tool during turns;
        # it has no separate consolidation step to run.
        return None

    async def job_ended(self, command: str, result: ExecOutput) -> None:
        if command != TICK_COMMAND:
            return
        report = last_json(result.output)
        if report is not None:
            self._schedule(report.get("schedule"))
