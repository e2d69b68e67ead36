"""The reference harness, declared on the harness contract.

``agent.py serve`` runs in its own sandbox (image ``sclate-reference-agent``),
speaks OpenAI chat completions to the capture proxy, keeps its memory in
``/memory`` (MEMORY.md, dated notes) and consolidates nightly from its own
crontab, which the scheduler runs as events.

With a memory system (``--memory mem0|hindsight``) it uses that system the
plain way, as a library call in its own loop: before each turn it recalls what
is relevant to the message into its system prompt, after each turn it stores
the exchange. Mem0 is imported in-process (the agent runs on the interpreter of
the Mem0 layer); Hindsight is called over its REST API at the server the
sandbox starts beside it. The notes and MEMORY.md are kept either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adapters import (
    Capability,
    ExecOutput,
    HarnessDeclaration,
    LineChannel,
    ProxyEndpoints,
    SandboxAccess,
    SessionSeed,
    TurnResult,
)
from adapters.memory import MemorySystem
from adapters.reference_harness._adapter import CRONTAB, HarnessCronSource, ReferenceHarnessAdapter, parse_crontab
from adapters.reference_harness.image import IMAGE_NAME, register_image
from sclated import __version__
from sclated.errors import FailedPrecondition, InvalidArgument
from sclated.scheduler import DeliverPrompt, EventSource

__all__ = ["DECLARATION", "ReferenceHarness"]

# The image goes with the declaration: wherever the harness can be used, the
# builder and the sandbox know its recipe.
register_image()

DECLARATION = HarnessDeclaration(
    name="reference",
    description="the project's reference harness (file and shell tools, MEMORY.md + dated notes, "
    "nightly consolidation cron) in its own sandbox, model calls captured",
    image=IMAGE_NAME,
    wire_apis=frozenset({"openai_chat"}),
    capabilities=frozenset({Capability.SESSION_STATE, Capability.WAIT, Capability.CONSOLIDATE}),
    state_dirs=("/workspace", "/memory"),
    options=frozenset({"turn_timeout_s", "max_steps", "max_tokens"}),
    memory_systems=("native", "mem0", "hindsight"),
    version=__version__,
    executable="python3",
)


def _number(options: Mapping[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = options.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidArgument(f"{key} must be in [{lo:g}, {hi:g}]", field=f"run.agent.options.{key}")
    return float(value)


class ReferenceHarness:
    """``agent.py serve`` driven over its stdin/stdout (see ``agent.py`` for the protocol)."""

    declaration = DECLARATION

    def __init__(self, options: Mapping[str, Any], memory: MemorySystem | None = None) -> None:
        self._memory = memory
        self._turn_timeout_s = _number(options, "turn_timeout_s", 1800, 1, 86_400)
        self._max_steps = int(_number(options, "max_steps", 6, 1, 50))
        self._max_tokens = int(_number(options, "max_tokens", 256, 1, 32_768))
        self._channel: LineChannel | None = None
        self._driver: ReferenceHarnessAdapter | None = None

    def environment(self, endpoints: ProxyEndpoints) -> Mapping[str, str]:
        return {
            "OPENAI_BASE_URL": endpoints.agent + endpoints.openai_prefix,
            "OPENAI_API_KEY": endpoints.api_key,
            "ANTHROPIC_BASE_URL": endpoints.agent,
            "ANTHROPIC_API_KEY": endpoints.api_key,
            "AGENT_MODEL": endpoints.model,
            "AGENT_MAX_STEPS": str(self._max_steps),
            "AGENT_MAX_TOKENS": str(self._max_tokens),
            **self._memory_environment(endpoints),
        }

    def _memory_environment(self, endpoints: ProxyEndpoints) -> dict[str, str]:
        system = self._memory
        if system is None:
            return {}
        # The system's own endpoint, key, model and data folder are the
        # SCLATE_MEMORY_SYSTEM_* variables every harness gets (adapters.memory).
        env = {"AGENT_MEMORY_SYSTEM": system.name}
        if system.server is not None:
            env["AGENT_HINDSIGHT_URL"] = system.server.url
            env["SCLATE_HINDSIGHT_BANKS"] = "agent"  # created at start: a recall before any retain finds it
        return env

    async def start(self, sandbox: SandboxAccess) -> None:
        python = self._memory.python if self._memory is not None and self._memory.python else "python3"
        self._channel = await sandbox.open_channel([python, "/opt/agent/agent.py", "serve"])
        # Its crontab is an event source of the run (routines), not a timer inside.
        self._driver = ReferenceHarnessAdapter(self._channel, turn_timeout_s=self._turn_timeout_s, crontab=None)

    async def stop(self) -> None:
        channel, self._channel, self._driver = self._channel, None, None
        if channel is not None:
            await channel.close()

    def _harness(self) -> ReferenceHarnessAdapter:
        if self._driver is None:
            raise FailedPrecondition("the reference harness is not started", reason="NOT_STARTED")
        return self._driver

    async def start_session(self, session: str) -> None:
        await self._harness().start_session(session)

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        return await self._harness().deliver(prompt)

    async def stop_session(self) -> None:
        if self._driver is not None:
            await self._driver.stop_session()

    async def seed_session(self, seed: SessionSeed) -> None:
        # Not declared (Capability.SEEDED_SESSIONS): a run never asks.
        raise FailedPrecondition("the reference harness does not take recorded session histories", reason="UNSUPPORTED")

    async def save_state(self, dest: Path) -> None:
        await self._harness().save_state(dest)

    async def restore_state(self, src: Path) -> None:
        await self._harness().restore_state(src)

    def routines(self) -> Sequence[EventSource]:
        from sclated.runtime import next_fire

        return [HarnessCronSource(parse_crontab(CRONTAB.read_text()), next_fire, name="reference:cron", holder="cron")]

    def consolidate_command(self) -> str | None:
        # Its own crontab consolidates nightly (a routine of the run): a
        # benchmark's request for consolidation is satisfied by it.
        return None

    async def job_ended(self, command: str, result: ExecOutput) -> None:
        # Its crontab is fixed (routines): nothing to read again.
        return None
