"""The host side of a harness's in-sandbox bridge (shared by every unmodified harness).

Each unmodified harness (Hermes, OpenClaw, Claude Code, Codex) is driven by a
small stdlib ``bridge.py`` inside its sandbox: ``bridge.py setup`` once (prints
one JSON report), then ``bridge.py serve``, which speaks sclate's JSON-lines
harness protocol on stdin/stdout:

* requests: ``start_session``, ``stop_session``, ``message`` (and whatever a
  harness adds, such as ``seed_session``);
* answers: ``session_started``, ``session_stopped``, ``received`` (the moment
  a message was read, on the sandbox's simulated and monotonic clocks) then
  ``turn_end`` (with ``reply`` and the harness's own details, and ``memory``
  when the run's memory system reports what it did), or ``error``.

:class:`BridgeDriver` is that protocol on the host: one request at a time,
lines that are not the protocol skipped, an ``error`` answer raised as
:class:`~sclated.errors.FailedPrecondition`, a bridge that closed its output as
:class:`~sclated.errors.Unavailable`. :func:`turn_result` turns a ``turn_end``
into the contract's :class:`~adapters.TurnResult`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters._base import LineChannel, SandboxAccess, TurnResult
from adapters._bridge_replies import last_json
from sclated.errors import FailedPrecondition, Unavailable

__all__ = ["BridgeDriver", "TurnAnswer", "turn_result"]


@dataclass(frozen=True, slots=True)
class TurnAnswer:
    """What the bridge said of one message: its ``received`` and ``turn_end`` lines."""

    received: Mapping[str, Any]
    end: Mapping[str, Any]
    started_ns: int
    ended_ns: int


def turn_result(answer: TurnAnswer, details: Mapping[str, Any]) -> TurnResult:
    """The contract's turn result; a failed turn (``error``) is the harness's business: the run goes on."""
    out = dict(details)
    if answer.end.get("error"):
        out["error"] = answer.end["error"]
    if isinstance(answer.end.get("memory"), dict):
        out["memory"] = answer.end["memory"]  # what the run's memory system recalled and stored
    wall, mono, seq = answer.received.get("wall_ns"), answer.received.get("mono_ns"), answer.received.get("seq")
    return TurnResult(
        reply=str(answer.end.get("reply") or ""),
        started_ns=answer.started_ns,
        ended_ns=answer.ended_ns,
        received_wall_ns=mono if isinstance(mono, int) else 0,
        details=out,
        received_sim_ns=wall if isinstance(wall, int) else None,
        received_seq=seq if isinstance(seq, int) else None,
    )


class BridgeDriver:
    """One harness's ``bridge.py`` in its sandbox, spoken to line by line.

    ``name`` is the harness as people say it ("Claude Code"): every error names it.
    """

    def __init__(self, name: str, bridge: str) -> None:
        self.name = name
        self.bridge = bridge
        self._channel: LineChannel | None = None
        self._lock = asyncio.Lock()

    async def setup(self, sandbox: SandboxAccess, timeout_s: float = 600) -> dict[str, Any]:
        """Run ``bridge.py setup``; its report, or FailedPrecondition naming what failed."""
        out = await sandbox.exec(["python3", self.bridge, "setup"], timeout_s=timeout_s)
        report = last_json(out.output)
        if out.exit_code != 0 or report is None or report.get("errors"):
            why = "; ".join(map(str, report.get("errors", []))) if report else out.output[-800:]
            raise FailedPrecondition(f"{self.name} setup in the sandbox failed: {why}", reason="HARNESS_SETUP")
        return report

    async def open(self, sandbox: SandboxAccess, *, ready_timeout_s: float | None = None) -> dict[str, Any]:
        """Start ``bridge.py serve``; with ``ready_timeout_s``, wait for its ``ready`` line and return it."""
        self._channel = await sandbox.open_channel(["python3", self.bridge, "serve"])
        if ready_timeout_s is None:
            return {}
        ready = await asyncio.wait_for(self._read_until("ready"), ready_timeout_s)
        if ready.get("errors"):
            raise FailedPrecondition(
                f"{self.name} did not start in the sandbox: {'; '.join(map(str, ready['errors']))}",
                reason="HARNESS_SETUP",
            )
        return ready

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    @property
    def open_now(self) -> bool:
        return self._channel is not None

    def _live(self) -> LineChannel:
        if self._channel is None:
            raise FailedPrecondition(f"the {self.name} harness is not started", reason="NOT_STARTED")
        return self._channel

    async def _read_until(self, want: str, received: dict[str, Any] | None = None) -> dict[str, Any]:
        channel = self._live()
        while True:
            line = await channel.readline()
            if not line:
                raise Unavailable(f"the {self.name} bridge closed its output while sclate waited for {want!r}")
            try:
                event = json.loads(line)
            except ValueError:
                continue  # not the protocol (a stray print): skipped
            if not isinstance(event, dict):
                continue
            kind = event.get("type")
            if kind == want:
                return event
            if kind == "error":
                raise FailedPrecondition(f"the {self.name} bridge refused a request: {event.get('error')}")
            if kind == "received" and received is not None and not received:
                received.update(event)

    async def request(self, req: Mapping[str, Any], want: str, timeout_s: float) -> dict[str, Any]:
        """Send one request and wait (at most ``timeout_s``) for the answer of type ``want``."""
        async with self._lock:
            await self._live().send(json.dumps(req))
            return await asyncio.wait_for(self._read_until(want), timeout_s)

    async def start_session(self, session: str) -> None:
        await self.request({"type": "start_session", "session": session}, "session_started", 60)

    async def stop_session(self) -> None:
        if self._channel is not None:
            await self.request({"type": "stop_session"}, "session_stopped", 60)

    async def message(self, req: Mapping[str, Any], timeout_s: float) -> TurnAnswer:
        """Deliver one message (``type: message``) and wait for its ``turn_end``.

        The harness's own timeout bounds the turn inside the bridge; ``timeout_s``
        is the last guard against a hung process.
        """
        received: dict[str, Any] = {}
        async with self._lock:
            started = time.time_ns()
            await self._live().send(json.dumps({"type": "message", **req}))
            end = await asyncio.wait_for(self._read_until("turn_end", received), timeout_s)
        return TurnAnswer(received, end, started, time.time_ns())
