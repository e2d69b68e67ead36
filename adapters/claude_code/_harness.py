"""Claude Code (npm ``@anthropic-ai/claude-code``), unmodified, on the harness contract.

Inside its sandbox (image ``sclate-claude-code``) ``bridge.py serve`` runs one
``claude -p --output-format stream-json --verbose`` per message:
``--session-id UUID`` for a session's first message, ``--resume UUID`` for
the next ones; the turn ends when that process exits (the end of its output
stream) and the reply is its ``result`` event. Permissions are bypassed
(``--dangerously-skip-permissions``), which Claude Code allows as root only
because the image declares a sandbox (``IS_SANDBOX=1``).

Everything Claude Code keeps lives in ``CLAUDE_CONFIG_DIR``
(``/memory/claude-code``): settings, transcripts
(``projects/<cwd>/<session>.jsonl``), its auto-memory ``MEMORY.md`` files and
which Claude Code session continues which of the run's sessions; the
workspace's ``CLAUDE.md`` is read from ``/workspace`` as Claude Code does.
Snapshots, branches and the next day find all of it.

Sessions: with ``session_scope="scenario"`` (the default) each of the run's
sessions (a MetaClaw day, a LongMemEval haystack session) is its own Claude
Code session, resumed while it lasts; ``session_scope="run"`` keeps one
across the whole run.

The model endpoint is the capture proxy's agent listener
(``ANTHROPIC_BASE_URL``, the run's key as ``ANTHROPIC_API_KEY``). Claude Code
asks for a main model and smaller background tiers: the main ones (opus,
sonnet, fable, sub-agents) are all mapped to the run's model; the background
tier (haiku, "small fast") asks for :meth:`ProxyEndpoints.role_model`
``("aux")``, which the proxy attributes to the ``aux`` role and forwards as
the run's model. Sub-agents and compaction are recognised from what Claude
Code sends (``proxy_addons._branch_hints``).

Clock: the Claude Code binary is dynamically linked against glibc, so
libfaketime reaches it (``process_clock="simulated"``): the "Today's date is"
line it sends, its transcript timestamps and its timeouts follow simulated
time (tests/e2e/test_claude_code.py checks the date the model is shown).

Memory systems: ``native`` (its own: transcripts, auto-memory, CLAUDE.md) or
``mem0``, attached the way Claude Code users attach a memory: Mem0's own
integrations recall before each prompt and store after each reply, so the
image's ``sclate-mem0`` (adapters/memory/mem0_tools.py, the mem0ai library with
the reference harness's configuration) is installed as two Claude Code hooks in
its user settings, ``UserPromptSubmit`` (the memories about the prompt added as
context: "What you remember about this (Mem0)") and ``Stop`` (the exchange
added to Mem0; for a turn an API error ended, which fires no ``Stop``, the bridge
runs the same command), plus an MCP server (``--mcp-config``, tools
``mcp__mem0__search_memories`` and ``mcp__mem0__add_memory``) for the model's
explicit use. Mem0's official MCP server (``mem0-mcp-server``) talks only to
Mem0's hosted platform, unreachable from a sandbox, hence a small program of
our own around the library. Mem0's own model and embedding calls go to the
memory listener (component ``memory:mem0``); each turn's ``memory`` detail says
what the hooks (and tools) recalled and stored (bridge.py reads their log).

Differences from a person running Claude Code: a lean tool set by default
(``tools``: Bash, Read, Write, Edit; ``"default"`` gives Claude Code's own
set, which does not fit a small model's context), an output bound per call
(``max_tokens``, Claude Code's ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``), its
auto-compact window set to the served context (``context_window``; whether
Claude Code honours a window this small is not established: runs up to 8,900
tokens did not compact; ``autocompact_pct``, its
``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE``, made it compact), a cap on agentic steps per
message (``max_turns``), and no update check, telemetry, error reports,
feature-flag fetches or other non-essential traffic.
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
from adapters.claude_code.image import CLAUDE_CODE_VERSION, IMAGE_NAME, register_image
from adapters.memory import MEM0, MemorySystem
from sclated.errors import FailedPrecondition, InvalidArgument
from sclated.scheduler import DeliverPrompt, EventSource

__all__ = ["BRIDGE", "DECLARATION", "DEFAULT_TOOLS", "HOME", "ClaudeCodeHarness"]

register_image()

HOME = "/memory/claude-code"
BRIDGE = "/opt/sclate-claude-code/bridge.py"
DEFAULT_TOOLS = ("Bash", "Read", "Write", "Edit")
"""Kept equal to bridge.py's default (a test checks)."""

DECLARATION = HarnessDeclaration(
    name="claude-code",
    description="Claude Code, unmodified: one `claude -p --output-format stream-json` per message "
    "resuming its session, CLAUDE_CONFIG_DIR in the memory volume, ANTHROPIC_BASE_URL on the capture "
    "proxy (Anthropic Messages API), background model tier attributed to aux",
    image=IMAGE_NAME,
    wire_apis=frozenset({"anthropic_messages"}),
    capabilities=frozenset({Capability.CONSOLIDATE}),
    state_dirs=("/workspace", "/memory"),
    options=frozenset(
        {"turn_timeout_s", "session_scope", "max_turns", "tools", "max_tokens", "context_window", "autocompact_pct"}
    ),
    memory_systems=("native", "mem0"),
    workspace_memory=("CLAUDE.md",),
    version=CLAUDE_CODE_VERSION,
    executable="/opt/claude-code/node_modules/@anthropic-ai/claude-code/bin/claude.exe",
    process_clock="simulated",
)

_SCOPES = ("scenario", "run")


def _tools(options: Mapping[str, Any]) -> list[str]:
    value = options.get("tools", list(DEFAULT_TOOLS))
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    # Claude Code validates the names itself (and its set changes between versions);
    # here only the shape: tool names, or "default" alone for Claude Code's own set.
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(v, str) and v.replace("_", "").isalnum() for v in value)
        or ("default" in value and len(value) > 1)
    ):
        raise InvalidArgument(
            'tools must be a list of Claude Code tool names (e.g. ["Bash", "Read"]) or "default"',
            field="run.agent.options.tools",
        )
    return list(dict.fromkeys(value))


class ClaudeCodeHarness:
    """Drives ``bridge.py serve`` (see bridge.py for its JSON-lines protocol)."""

    declaration = DECLARATION

    def __init__(self, options: Mapping[str, Any], memory: MemorySystem | None = None) -> None:
        # Its own memory or Mem0 (declaration.memory_systems): the factory refuses any other.
        if memory is not None and memory.name != MEM0.name:
            raise InvalidArgument(
                f"Claude Code does not run with memory system {memory.name!r}", field="run.agent.memory"
            )
        self._memory = memory
        self._turn_timeout_s = number_option(options, "turn_timeout_s", 1800, 1, 86_400)
        scope = options.get("session_scope", "scenario")
        if scope not in _SCOPES:
            raise InvalidArgument(
                f"session_scope must be one of {', '.join(_SCOPES)}", field="run.agent.options.session_scope"
            )
        self._scope = str(scope)
        self._settings = {
            "turn_timeout_s": self._turn_timeout_s,
            "max_turns": int(number_option(options, "max_turns", 8, 1, 1000)),
            "tools": _tools(options),
        }
        if memory is not None:
            self._settings["memory"] = memory.name  # hooks and MCP server attached by the bridge
        self._max_tokens = int(number_option(options, "max_tokens", 1024, 1, 131_072))
        self._context_window = int(number_option(options, "context_window", 16384, 2048, 2_000_000))
        # Claude Code's own threshold knob (a percentage of the window it assumes).
        pct = options.get("autocompact_pct")
        self._autocompact_pct = None if pct is None else int(number_option(options, "autocompact_pct", 0, 1, 100))
        self._bridge = BridgeDriver("Claude Code", BRIDGE)
        self._session = "default"

    # -- environment and lifetime ----------------------------------------------------------
    def environment(self, endpoints: ProxyEndpoints) -> Mapping[str, str]:
        main = endpoints.model
        background = endpoints.role_model("aux")
        return {
            # Claude Code appends /v1/messages itself.
            "ANTHROPIC_BASE_URL": endpoints.agent,
            "ANTHROPIC_API_KEY": endpoints.api_key,
            # Every model name it may ask for: the main tiers are the run's model,
            # the background tier a role model the proxy attributes to aux.
            "ANTHROPIC_MODEL": main,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": main,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": main,
            "ANTHROPIC_DEFAULT_FABLE_MODEL": main,
            "CLAUDE_CODE_SUBAGENT_MODEL": main,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": background,
            "ANTHROPIC_SMALL_FAST_MODEL": background,
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(self._max_tokens),
            # Auto-compact sized to what the endpoint serves (Claude Code assumes a
            # hosted model's window for a model name it does not know).
            "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(self._context_window),
            **(
                {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": str(self._autocompact_pct)}
                if self._autocompact_pct is not None
                else {}
            ),
            # Nothing but the model path leaves the sandbox (the image sets the rest).
            "CLAUDE_CODE_DISABLE_FEATURE_FLAGS": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "SCLATE_CLAUDE_CODE_SETTINGS": json.dumps(self._settings, sort_keys=True),
            **self._memory_environment(),
        }

    def _memory_environment(self) -> dict[str, str]:
        if self._memory is None:
            return {}
        # Mem0's MCP server imports a large library, and its tools make model calls:
        # Claude Code waits for them as long as a turn may last.
        return {"MCP_TIMEOUT": "120000", "MCP_TOOL_TIMEOUT": str(int(self._turn_timeout_s * 1000))}

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
        # The bridge ends a Claude Code process past turn_timeout_s; this is the last guard.
        answer = await self._bridge.message(req, self._turn_timeout_s + 60)
        return turn_result(
            answer,
            {
                "exit_code": answer.end.get("exit_code"),
                "claude_session": answer.end.get("claude_session", ""),
                "resumed": bool(answer.end.get("resumed")),
                "num_turns": answer.end.get("num_turns"),
                "stop_reason": answer.end.get("stop_reason"),
            },
        )

    # -- state -------------------------------------------------------------------------------
    async def seed_session(self, seed: SessionSeed) -> None:
        # Not declared (Capability.SEEDED_SESSIONS): a run never asks.
        raise FailedPrecondition("Claude Code does not take recorded session histories", reason="UNSUPPORTED")

    async def save_state(self, dest: Path) -> None:
        return None  # everything Claude Code keeps is in CLAUDE_CONFIG_DIR (the memory volume)

    async def restore_state(self, src: Path) -> None:
        return None

    def routines(self) -> Sequence[EventSource]:
        return ()  # print mode has no schedule of its own

    def consolidate_command(self) -> str | None:
        # Claude Code consolidates nothing on a schedule: what it keeps is its
        # transcripts, its auto-memory and CLAUDE.md, written during turns. A
        # benchmark's "consolidate" is a no-op, as for Codex and Hermes.
        return None

    async def job_ended(self, command: str, result: ExecOutput) -> None:
        return None
