"""The Codex CLI (npm ``@openai/codex``), unmodified, on the harness contract.

Inside its sandbox (image ``sclate-codex``) ``bridge.py serve`` runs one
``codex exec --json`` per message (``codex exec resume THREAD_ID`` once the
session has a Codex thread), standard input closed; the turn ends when that
process exits and the reply is the last agent message among its JSON events.
Everything Codex keeps lives in ``CODEX_HOME`` (``/memory/codex``): its
config, its sessions (rollout files and state databases) and which Codex
thread continues which of the run's sessions, so snapshots, branches and the
next day find them; its project instructions (``AGENTS.md``) are read from the
workspace, as Codex does.

Sessions: with ``session_scope="scenario"`` (the default) each of the run's
sessions (a MetaClaw day, a LongMemEval haystack session) is its own Codex
thread, resumed while it lasts; ``session_scope="run"`` keeps one thread
across the whole run.

The model endpoint is a Codex model provider in ``config.toml`` (wire API
``responses``, the capture proxy's agent listener, the run's key in an
environment variable). Codex sends no output bound (no ``max_output_tokens``)
and has no setting for one: the ``max_tokens`` option (default 1024, 0 for
none) is put on each call by the capture proxy (``SCLATE_OUTPUT_BOUND``; the
record lists it in ``injected``), so a small model that never stops is cut
there rather than at ``turn_timeout_s``.

Clock: the Codex executable is a static (musl) binary, so libfaketime does
not reach it (``process_clock="wall"``); the commands it runs see simulated
time. What follows the wall clock: the date in its environment context (so
it is off unless ``show_date``: the model is told the date is unavailable
rather than shown the wall date), its session file names and its request
metadata (``turn_started_at_unix_ms``).

Differences from a person running Codex: the update check, analytics,
feedback, apps, plugins, web search, image tools, subagents, goals, the
user-input tool and skills are off (each would reach the network, wait for
a person, or lengthen a small model's prompt; ``keep_tools`` brings optional
ones back); the provider makes one attempt per call (no retries).
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
from adapters._bridge_replies import number_option
from adapters.codex.image import CODEX_VERSION, IMAGE_NAME, register_image
from adapters.memory import MemorySystem
from sclated.errors import FailedPrecondition, InvalidArgument
from sclated.scheduler import DeliverPrompt, EventSource

__all__ = ["BRIDGE", "DECLARATION", "HOME", "OPTIONAL_TOOLS", "CodexHarness"]

register_image()

HOME = "/memory/codex"
BRIDGE = "/opt/sclate-codex/bridge.py"
OPTIONAL_TOOLS = (
    "web_search",
    "view_image",
    "request_user_input",
    "multi_agent",
    "goals",
    "skills",
    "image_generation",
)
"""Kept equal to bridge.py's list (a test checks)."""

DECLARATION = HarnessDeclaration(
    name="codex",
    description="OpenAI Codex CLI, unmodified: one `codex exec --json` per message resuming its thread, "
    "CODEX_HOME in the memory volume, a model provider on the capture proxy (Responses API)",
    image=IMAGE_NAME,
    wire_apis=frozenset({"openai_responses"}),
    capabilities=frozenset({Capability.CONSOLIDATE}),
    state_dirs=("/workspace", "/memory"),
    options=frozenset(
        {
            "turn_timeout_s",
            "session_scope",
            "context_window",
            "auto_compact_token_limit",
            "keep_tools",
            "show_date",
            "max_tokens",
        }
    ),
    workspace_memory=("AGENTS.md",),
    version=CODEX_VERSION,
    executable="/opt/codex/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
    process_clock="wall",
)

_SCOPES = ("scenario", "run")


def _keep_tools(options: Mapping[str, Any]) -> list[str]:
    value = options.get("keep_tools", [])
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) and v in OPTIONAL_TOOLS for v in value):
        raise InvalidArgument(
            f"keep_tools must be a list of Codex's optional tools: {', '.join(OPTIONAL_TOOLS)}",
            field="run.agent.options.keep_tools",
        )
    return sorted(set(value))


def _flag(options: Mapping[str, Any], key: str) -> bool:
    value = options.get(key, False)
    if not isinstance(value, bool):
        raise InvalidArgument(f"{key} must be true or false", field=f"run.agent.options.{key}")
    return value


class CodexHarness:
    """Drives ``bridge.py serve`` (see bridge.py for its JSON-lines protocol)."""

    declaration = DECLARATION

    def __init__(self, options: Mapping[str, Any], memory: MemorySystem | None = None) -> None:
        # Only its own memory (declaration.memory_systems): the factory refuses any other.
        del memory
        self._turn_timeout_s = number_option(options, "turn_timeout_s", 1800, 1, 86_400)
        scope = options.get("session_scope", "scenario")
        if scope not in _SCOPES:
            raise InvalidArgument(
                f"session_scope must be one of {', '.join(_SCOPES)}", field="run.agent.options.session_scope"
            )
        self._scope = str(scope)
        context_window = int(number_option(options, "context_window", 16384, 1024, 2_000_000))
        compact = options.get("auto_compact_token_limit")
        if compact is not None:
            compact = int(number_option(options, "auto_compact_token_limit", 0, 256, context_window))
        self._settings = {
            "turn_timeout_s": self._turn_timeout_s,
            "context_window": context_window,
            "auto_compact_token_limit": compact,
            "keep_tools": _keep_tools(options),
            "show_date": _flag(options, "show_date"),
        }
        # Codex sends no output bound and has no setting for one: the capture proxy
        # (which runs in the same container, with this environment) adds
        # max_output_tokens to a call that has none, recorded as injected. 0: no bound.
        self._output_bound = int(number_option(options, "max_tokens", 1024, 0, 131_072))
        self._bridge = BridgeDriver("Codex", BRIDGE)
        self._session = "default"

    # -- environment and lifetime ----------------------------------------------------------
    def environment(self, endpoints: ProxyEndpoints) -> Mapping[str, str]:
        return {
            "CODEX_HOME": HOME,
            "SCLATE_AGENT_BASE_URL": endpoints.agent + endpoints.openai_prefix,
            "SCLATE_API_KEY": endpoints.api_key,
            "SCLATE_MODEL": endpoints.model,
            "SCLATE_CODEX_SETTINGS": json.dumps(self._settings, sort_keys=True),
            "SCLATE_OUTPUT_BOUND": str(self._output_bound),
        }

    async def start(self, sandbox: SandboxAccess) -> None:
        await self._bridge.setup(sandbox)
        await self._bridge.open(sandbox)

    async def stop(self) -> None:
        await self._bridge.close()

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
        # The bridge kills a Codex process past turn_timeout_s; this is the last guard.
        answer = await self._bridge.message(req, self._turn_timeout_s + 60)
        return turn_result(
            answer,
            {
                "exit_code": answer.end.get("exit_code"),
                "codex_thread": answer.end.get("codex_thread", ""),
                "resumed": bool(answer.end.get("resumed")),
                "usage": answer.end.get("usage"),
            },
        )

    # -- state -------------------------------------------------------------------------------
    async def seed_session(self, seed: SessionSeed) -> None:
        # Not declared (Capability.SEEDED_SESSIONS): a run never asks.
        raise FailedPrecondition("Codex does not take recorded session histories", reason="UNSUPPORTED")

    async def save_state(self, dest: Path) -> None:
        return None  # everything Codex keeps is in CODEX_HOME (the memory volume)

    async def restore_state(self, src: Path) -> None:
        return None

    def routines(self) -> Sequence[EventSource]:
        return ()  # codex exec has no schedule of its own

    def consolidate_command(self) -> str | None:
        # Codex has no consolidation step: what it keeps is its session history and
        # the files it writes (AGENTS.md); a benchmark's "consolidate" is a no-op, as for Hermes.
        return None

    async def job_ended(self, command: str, result: ExecOutput) -> None:
        return None
