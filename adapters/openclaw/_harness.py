"""OpenClaw (npm ``openclaw``), unmodified, on the harness contract.

Inside its sandbox (image ``sclate-openclaw``) ``bridge.py serve`` starts one
OpenClaw gateway for the run and runs one ``openclaw agent --session-id SID
--message TEXT`` per message, as MetaClaw-Bench's ``infer_cmd.py`` does
upstream; the turn ends when that process exits. Its state directory
(``OPENCLAW_STATE_DIR=/memory/openclaw/state``: config, sessions in SQLite,
cron jobs) is in the memory volume and its memory files (``MEMORY.md``,
``memory/``, the persona files) are in the workspace, so snapshots and
branches keep both.

Seeded sessions (``Capability.SEEDED_SESSIONS``): a benchmark's recorded
transcript (MetaClaw's ``openclaw_state/agents/<agent>/sessions/<id>.jsonl``)
becomes the session's history with no model call: written where OpenClaw
looks, registered in ``sessions.json`` and imported into its SQLite store
(``openclaw doctor --session-sqlite import``) while the gateway is stopped.
The benchmark's ``openclaw.json`` gives the agents and tool policy; its model
endpoints are replaced by the capture proxy's listeners.

Scheduled work on simulated time: the gateway's own scheduler is off. Its cron
jobs (``openclaw cron list``) and its heartbeat (``agents.defaults.heartbeat.
every``) are read after every turn and tick, and each due time becomes an event
on the run's scheduler; ``bridge.py tick`` then runs what is due through
OpenClaw's own commands (``openclaw cron run ID --due --wait``, ``openclaw
system event --mode now``). Jobs made with the ``cron_jobs`` option use the
``sclate-memory`` provider, so their calls are attributed to the memory role;
a job the agent makes itself with its cron tool, and the heartbeat, run on its
main model (agent role).

Differences from MetaClaw-Bench upstream (``--benchmark metaclaw`` follows its
protocol: see ``adapters.metaclaw.TimelineConfig.protocol``): one state
directory and one gateway for the whole run instead of a fresh copy per day
(the point of a continual run: what OpenClaw learned stays; each day's seeded
session is still its own session), the gateway restarted only to import a
day's transcript; the workspace's ``MEMORY.md`` and ``memory/`` carry over the
fresh workspace of each day; upstream's ``llm-prompt-logger`` plugin is not
loaded (the capture proxy records every call); the update check, catalog
refresh, telemetry, Bonjour, the nightly "dreaming" job and skill reviews are
off (network, or model calls nobody asked for).
"""

from __future__ import annotations

import asyncio
import json
import re
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
from adapters.memory import MemorySystem
from adapters.openclaw.image import IMAGE_NAME, OPENCLAW_VERSION, register_image
from sclated.errors import InvalidArgument
from sclated.scheduler import At, DeliverPrompt, EventSource, EventSpec, ExecInSandbox, Priority

__all__ = ["BRIDGE", "DECLARATION", "GATEWAY_PORT", "OpenClawHarness", "tick_events"]

register_image()

BRIDGE = "/opt/sclate-openclaw/bridge.py"
TICK_COMMAND = f"python3 {BRIDGE} tick"
CONSOLIDATE_COMMAND = "openclaw memory promote --apply"
"""OpenClaw's own consolidation step: what its agent recalled most often in
short-term memory is appended to MEMORY.md (the "deep" phase of its nightly
dreaming, run alone and on demand; no model call)."""
GATEWAY_PORT = 18789

DECLARATION = HarnessDeclaration(
    name="openclaw",
    description="OpenClaw, unmodified: a gateway per run and one `openclaw agent --session-id` per message "
    "(as MetaClaw-Bench drives it), seeded sessions imported, its cron jobs and heartbeat on simulated time",
    image=IMAGE_NAME,
    wire_apis=frozenset({"openai_chat"}),
    capabilities=frozenset({Capability.SEEDED_SESSIONS, Capability.CONSOLIDATE}),
    state_dirs=("/workspace", "/memory"),
    options=frozenset(
        {
            "turn_timeout_s",
            "max_tokens",
            "context_window",
            "tools_profile",
            "heartbeat_every",
            "heartbeat_prompt",
            "cron_jobs",
            "session_scope",
            "thinking",
        }
    ),
    workspace_memory=("MEMORY.md", "memory"),
    version=OPENCLAW_VERSION,
    executable="openclaw",
)

_SCOPES = ("scenario", "run")
_PROFILES = ("minimal", "coding", "messaging", "full")
_THINKING = ("off", "minimal", "low", "medium", "high")


def _choice(options: Mapping[str, Any], key: str, allowed: Sequence[str], default: str | None) -> str | None:
    value = options.get(key, default)
    if value is not None and value not in allowed:
        raise InvalidArgument(f"{key} must be one of {', '.join(allowed)}", field=f"run.agent.options.{key}")
    return None if value is None else str(value)


def _duration(options: Mapping[str, Any], key: str, default: str) -> str:
    value = options.get(key, default)
    if not isinstance(value, str) or not re.fullmatch(r"\d+(\.\d+)?[smhd]", value.strip()):
        raise InvalidArgument(
            f"{key} must be a duration like '30m', '1h' or '0m' (off)", field=f"run.agent.options.{key}"
        )
    return value.strip()


def _cron_jobs(options: Mapping[str, Any]) -> list[dict[str, str]]:
    raw = options.get("cron_jobs", [])
    field = "run.agent.options.cron_jobs"
    if not isinstance(raw, list):
        raise InvalidArgument("cron_jobs must be a list of {schedule, message, name}", field=field)
    jobs: list[dict[str, str]] = []
    for i, job in enumerate(raw):
        if not isinstance(job, Mapping):
            raise InvalidArgument(f"cron_jobs[{i}] must be an object with schedule and message", field=field)
        unknown = set(job) - {"schedule", "message", "name"}
        if unknown:
            raise InvalidArgument(f"cron_jobs[{i}] has unknown key(s) {', '.join(sorted(unknown))}", field=field)
        schedule, message = job.get("schedule"), job.get("message")
        if not isinstance(schedule, str) or len(schedule.split()) not in (5, 6):
            raise InvalidArgument(
                f"cron_jobs[{i}].schedule must be a 5- or 6-field cron expression ('0 13 * * *'), in UTC",
                field=field,
            )
        if not isinstance(message, str) or not message.strip():
            raise InvalidArgument(f"cron_jobs[{i}].message must be a non-empty text", field=field)
        name = job.get("name", f"sclate-job-{i + 1}")
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgument(f"cron_jobs[{i}].name must be a non-empty text", field=field)
        jobs.append({"schedule": schedule.strip(), "message": message, "name": name.strip()})
    names = [j["name"] for j in jobs]
    if len(set(names)) != len(names):
        raise InvalidArgument("cron_jobs names must differ", field=field)
    return jobs


def tick_events(schedule: Mapping[str, Any]) -> list[EventSpec]:
    """OpenClaw's schedule (job id or ``heartbeat`` -> next due ns) as tick events,
    one per due time; the id names the time, so the same report read again is the
    same event (the scheduler skips ids it knows)."""
    due_times = sorted({int(t) for t in schedule.values() if isinstance(t, int) and not isinstance(t, bool)})
    return [
        EventSpec(
            f"openclaw:cron:{t}",
            At(t),
            (ExecInSandbox(TICK_COMMAND, holder="cron", timeout_s=1800.0),),
            priority=Priority.LOW,
            data={"cron": "openclaw", "jobs": sorted(str(j) for j, d in schedule.items() if d == t)},
        )
        for t in due_times
    ]


def _read_seed(seed: SessionSeed) -> tuple[str, dict[str, Any] | None]:
    transcript = seed.transcript.read_text(encoding="utf-8") if seed.transcript is not None else ""
    config: dict[str, Any] | None = None
    if seed.harness_config is not None:
        try:
            loaded = json.loads(seed.harness_config.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InvalidArgument(f"OpenClaw config {seed.harness_config} is not valid JSON: {exc}") from None
        config = loaded if isinstance(loaded, dict) else None
    return transcript, config


class OpenClawHarness:
    """Drives ``bridge.py serve`` (see bridge.py for its JSON-lines protocol)."""

    declaration = DECLARATION

    def __init__(self, options: Mapping[str, Any], memory: MemorySystem | None = None) -> None:
        # Only its own memory (declaration.memory_systems): the factory refuses any other.
        del memory
        self._turn_timeout_s = number_option(options, "turn_timeout_s", 1800, 1, 86_400)
        self._scope = str(_choice(options, "session_scope", _SCOPES, "scenario"))
        self._settings: dict[str, Any] = {
            "max_tokens": int(number_option(options, "max_tokens", 256, 1, 32_768)),
            "context_window": int(number_option(options, "context_window", 65536, 1024, 1_048_576)),
            "turn_timeout_s": self._turn_timeout_s,
            "tools_profile": "coding",
            "tools_profile_override": _choice(options, "tools_profile", _PROFILES, None),
            "heartbeat_every": _duration(options, "heartbeat_every", "0m"),
            "heartbeat_prompt": str(options.get("heartbeat_prompt", "Heartbeat: check your notes and pending work.")),
            "cron_jobs": _cron_jobs(options),
            "thinking": _choice(options, "thinking", _THINKING, None),
        }
        self._sandbox: SandboxAccess | None = None
        self._bridge = BridgeDriver("OpenClaw", BRIDGE)
        self._session = "default"
        self._seeded: set[str] = set()

    # -- environment and lifetime ----------------------------------------------------------
    def environment(self, endpoints: ProxyEndpoints) -> Mapping[str, str]:
        prefix = endpoints.openai_prefix
        return {
            "SCLATE_AGENT_BASE_URL": endpoints.agent + prefix,
            "SCLATE_AUX_BASE_URL": endpoints.aux + prefix,
            "SCLATE_MEMORY_BASE_URL": endpoints.memory + prefix,
            "SCLATE_API_KEY": endpoints.api_key,
            "SCLATE_MODEL": endpoints.model,
            "OPENCLAW_GATEWAY_PORT": str(GATEWAY_PORT),
            "SCLATE_OPENCLAW_SETTINGS": json.dumps(self._settings, sort_keys=True),
        }

    async def start(self, sandbox: SandboxAccess) -> None:
        self._sandbox = sandbox
        await self._bridge.setup(sandbox)
        ready = await self._bridge.open(sandbox, ready_timeout_s=600)
        self._seeded.update(str(s) for s in ready.get("seeded", []) or [])
        self._schedule(ready.get("schedule"))

    async def stop(self) -> None:
        self._sandbox = None
        await self._bridge.close()

    def _schedule(self, schedule: object) -> None:
        if self._sandbox is not None and isinstance(schedule, dict) and schedule:
            self._sandbox.schedule(tick_events(schedule))

    # -- the protocol -----------------------------------------------------------------------
    async def start_session(self, session: str) -> None:
        self._session = session
        await self._bridge.start_session(session)

    async def stop_session(self) -> None:
        await self._bridge.stop_session()

    async def seed_session(self, seed: SessionSeed) -> None:
        transcript, config = await asyncio.to_thread(_read_seed, seed)
        req = {
            "type": "seed_session",
            "session_id": seed.session_id,
            "agent": seed.agent,
            "transcript": transcript,
            "config": config,
        }
        # The gateway restarts around the import (20-30 s on 2 cores).
        done = await self._bridge.request(req, "session_seeded", 900)
        self._seeded.add(str(done.get("session_id") or seed.session_id))

    def _session_for(self, prompt: DeliverPrompt) -> str:
        session = prompt.session or self._session
        if self._scope == "run" and session not in self._seeded:
            return "sclate-run"
        return session

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        req = {"text": prompt.text, "session": self._session_for(prompt), "round_id": prompt.round_id}
        # OpenClaw's own timeout bounds the turn inside the bridge.
        answer = await self._bridge.message(req, self._turn_timeout_s + 120)
        self._schedule(answer.end.get("schedule"))
        return turn_result(
            answer,
            {"exit_code": answer.end.get("exit_code"), "openclaw_session": answer.end.get("openclaw_session", "")},
        )

    # -- state -------------------------------------------------------------------------------
    async def save_state(self, dest: Path) -> None:
        return None  # everything OpenClaw keeps is in its state directory and workspace

    async def restore_state(self, src: Path) -> None:
        return None

    def routines(self) -> Sequence[EventSource]:
        # Its cron jobs and heartbeat are read from its own state as they come due.
        return ()

    def consolidate_command(self) -> str | None:
        # Its nightly "dreaming" job is off (it would run on wall-clock timers);
        # a benchmark's consolidation runs OpenClaw's own promotion step instead.
        return CONSOLIDATE_COMMAND

    async def job_ended(self, command: str, result: ExecOutput) -> None:
        if command != TICK_COMMAND:
            return
        report = last_json(result.output)
        if report is not None:
            self._schedule(report.get("schedule"))
