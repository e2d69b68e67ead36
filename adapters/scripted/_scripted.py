"""A scripted agent that runs inside the daemon, without a container.

It answers each message after a fixed busy time, deterministically, so
tests and load runs exercise the whole run path (leases, turns, grading)
without Docker or a model.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adapters import Capability, InProcessAgent, TurnResult
from sclated.errors import FailedPrecondition, InvalidArgument
from sclated.scheduler import DeliverPrompt, EventSource

__all__ = ["ScriptedAgent"]


class ScriptedAgent(InProcessAgent):
    CAPABILITIES = frozenset({Capability.SESSION_STATE})
    """Declared once: the registry lists it without making an agent."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        opts = dict(options or {})
        turn_ms = opts.get("turn_ms", 5)
        if not isinstance(turn_ms, int | float) or isinstance(turn_ms, bool) or not 0 <= turn_ms <= 600_000:
            raise InvalidArgument(
                f"scripted option 'turn_ms' must be a number in [0, 600000], got {turn_ms!r}",
                field="run.agent.options.turn_ms",
            )
        fail_on = opts.get("fail_on_round", "")
        if not isinstance(fail_on, str):
            raise InvalidArgument(
                "scripted option 'fail_on_round' must be a string",
                field="run.agent.options.fail_on_round",
            )
        jitter = opts.get("turn_jitter", 0.0)
        if not isinstance(jitter, int | float) or isinstance(jitter, bool) or not 0 <= jitter < 1:
            raise InvalidArgument(
                f"scripted option 'turn_jitter' must be a fraction in [0, 1), got {jitter!r}",
                field="run.agent.options.turn_jitter",
            )
        self._turn_s = float(turn_ms) / 1000.0
        self._jitter = float(jitter)
        self._fail_on = fail_on
        self._session: str | None = None
        self.sessions_started = 0
        self.messages: list[str] = []

    @property
    def name(self) -> str:
        return "scripted"

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self.CAPABILITIES

    async def start_session(self, session: str) -> None:
        self._session = session
        self.sessions_started += 1

    async def stop_session(self) -> None:
        self._session = None

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        received = time.monotonic_ns()
        self.messages.append(prompt.text)
        if self._fail_on and prompt.round_id == self._fail_on:
            raise FailedPrecondition(f"scripted agent told to fail on round {self._fail_on!r}")
        if self._turn_s:
            await asyncio.sleep(self._turn_s * self._spread(prompt.text))
        return TurnResult(reply=f"done: {prompt.text[:80]}", started_ns=0, ended_ns=0, received_wall_ns=received)

    def _spread(self, text: str) -> float:
        """A deterministic factor in [1 - jitter, 1 + jitter], so turns vary like real ones do."""
        if not self._jitter:
            return 1.0
        h = int.from_bytes(hashlib.blake2b(f"{id(self)}:{text}".encode(), digest_size=4).digest(), "big")
        return 1.0 + self._jitter * (2 * h / 0xFFFFFFFF - 1)

    async def save_state(self, dest: Path) -> None:
        def write() -> None:
            dest.mkdir(parents=True, exist_ok=True)
            (dest / "scripted.txt").write_text("\n".join(self.messages))

        await asyncio.to_thread(write)

    async def restore_state(self, src: Path) -> None:
        path = src / "scripted.txt"
        try:
            text = await asyncio.to_thread(path.read_text)
        except FileNotFoundError:
            text = ""
        self.messages = text.splitlines()

    def routines(self) -> Sequence[EventSource]:
        return ()
