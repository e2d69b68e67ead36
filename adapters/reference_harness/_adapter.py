"""Driving ``agent.py serve`` from sclate: transport, adapter, cron routines.

The adapter speaks the harness's JSON-lines protocol (see ``agent.py``) over
an injected :class:`LineTransport`: an exec'd process in a container (the
runtime's exec with stdin/stdout) or a local subprocess
(:class:`SubprocessTransport`, used in tests and for local runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from adapters import TurnResult
from sclated.errors import FailedPrecondition, InvalidArgument, Unavailable
from sclated.scheduler import (
    At,
    DeliverPrompt,
    EventSource,
    EventSpec,
    ExecInSandbox,
    Priority,
    Snapshot,
)

__all__ = [
    "AGENT_PY",
    "CRONTAB",
    "CronLine",
    "HarnessCronSource",
    "LineTransport",
    "NextFire",
    "ReferenceHarnessAdapter",
    "SubprocessTransport",
    "parse_crontab",
]

AGENT_PY = Path(__file__).resolve().parent / "agent.py"
CRONTAB = Path(__file__).resolve().parent / "crontab"

NextFire = Callable[[str, int], int]
"""``next_fire(expr, after_ns)``: the first fire strictly after ``after_ns``."""


class LineTransport(Protocol):
    """A line-oriented duplex channel to one ``agent.py serve`` process."""

    async def send(self, line: str) -> None:
        """Write one line (a newline is added)."""
        ...

    async def readline(self) -> str:
        """The next line without its newline; ``""`` at end of stream."""
        ...


class SubprocessTransport:
    """A local ``agent.py serve`` child process."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(
        cls,
        argv: Sequence[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> SubprocessTransport:
        proc = await asyncio.create_subprocess_exec(
            *(argv or (sys.executable, str(AGENT_PY), "serve")),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            limit=16 * 1024 * 1024,  # a turn_end line carries the whole reply
        )
        return cls(proc)

    async def send(self, line: str) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            raise Unavailable("the harness process's stdin is closed")
        stdin.write(line.encode() + b"\n")
        await stdin.drain()

    async def readline(self) -> str:
        assert self.proc.stdout is not None
        raw = await self.proc.stdout.readline()
        return raw.decode(errors="replace").rstrip("\n")

    async def close(self, timeout_s: float = 10.0) -> int:
        """Close stdin (the harness exits at end of input) and reap it."""
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            return await self.proc.wait()


# -- the adapter ---------------------------------------------------------------------------


class ReferenceHarnessAdapter:
    """Drives one ``agent.py serve`` (implements :class:`adapters.AgentAdapter`)."""

    def __init__(
        self,
        transport: LineTransport,
        *,
        clock: Callable[[], int] = time.time_ns,
        name: str = "reference-harness",
        crontab: Path | str | None = CRONTAB,
        next_fire: NextFire | None = None,
        turn_timeout_s: float | None = 3600.0,
        control_timeout_s: float = 60.0,
    ) -> None:
        self._t = transport
        self._clock = clock
        self._name = name
        self._crontab = crontab
        self._next_fire = next_fire
        self._turn_timeout = turn_timeout_s
        self._control_timeout = control_timeout_s
        # One request at a time: replies carry no request id, so order pairs them.
        self._lock = asyncio.Lock()
        self.skipped: list[str] = []
        """Lines that were not protocol JSON (kept for diagnostics)."""

    @property
    def name(self) -> str:
        return self._name

    async def _request(self, req: Mapping[str, Any], want: str, timeout_s: float | None) -> dict[str, Any]:
        async with self._lock:
            await self._t.send(json.dumps(req))
            return await asyncio.wait_for(self._read_until(want), timeout_s)

    async def _read_until(self, want: str, on: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        while True:
            line = await self._t.readline()
            if not line:
                raise Unavailable(f"the harness closed its output while sclate waited for {want!r}")
            try:
                event = json.loads(line)
            except ValueError:
                self.skipped.append(line)
                continue
            if not isinstance(event, dict):
                self.skipped.append(line)
                continue
            kind = event.get("type")
            if kind == want:
                return event
            if kind == "error":
                raise FailedPrecondition(f"the harness refused a request: {event.get('error')}")
            if on is not None:
                on(event)

    async def start_session(self, session: str) -> None:
        await self._request({"type": "start_session", "session": session}, "session_started", self._control_timeout)

    async def stop_session(self) -> None:
        await self._request({"type": "stop_session"}, "session_stopped", self._control_timeout)

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        req = {
            "type": "message",
            "text": prompt.text,
            "session": prompt.session,
            "round_id": prompt.round_id,
        }
        received: dict[str, Any] = {}

        def on_event(event: dict[str, Any]) -> None:
            if event.get("type") == "received" and not received:
                received.update(event)
                # Host-side receipt time: comparable with the run's wall clock.
                received["host_mono_ns"] = time.monotonic_ns()

        async with self._lock:
            started = self._clock()
            await self._t.send(json.dumps(req))
            end = await asyncio.wait_for(self._read_until("turn_end", on_event), self._turn_timeout)
        ended = self._clock()
        details: dict[str, Any] = {
            "steps": end.get("steps", 0),
            "round_id": end.get("round_id"),
            "written": end.get("written", []),
        }
        if end.get("error"):
            details["error"] = end["error"]
        if isinstance(end.get("memory"), dict):
            details["memory"] = end["memory"]  # what the memory system recalled and stored
        clock_ns, seq = received.get("wall_ns"), received.get("seq")
        return TurnResult(
            reply=str(end.get("reply") or ""),
            started_ns=started,
            ended_ns=ended,
            received_wall_ns=int(received.get("mono_ns", received.get("host_mono_ns", 0))),
            details=details,
            received_sim_ns=clock_ns if isinstance(clock_ns, int) else None,
            received_seq=seq if isinstance(seq, int) else None,
        )

    async def save_state(self, dest: Path) -> None:
        """The harness's in-process session (history); /memory is saved with the sandbox."""
        event = await self._request({"type": "dump_state"}, "state", self._control_timeout)
        text = json.dumps(event.get("state", {}), indent=1)
        await asyncio.to_thread(_write, dest / "reference_harness_state.json", text)

    async def restore_state(self, src: Path) -> None:
        text = await asyncio.to_thread((src / "reference_harness_state.json").read_text)
        await self._request({"type": "load_state", "state": json.loads(text)}, "state_loaded", self._control_timeout)

    def routines(self) -> Sequence[EventSource]:
        if self._crontab is None:
            return []
        text = self._crontab.read_text() if isinstance(self._crontab, Path) else self._crontab
        next_fire = self._next_fire or _runtime_next_fire()
        return [HarnessCronSource(parse_crontab(text), next_fire, name=f"{self._name}:cron")]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _runtime_next_fire() -> NextFire:
    try:
        from sclated.runtime import next_fire
    except ImportError as exc:  # the runtime room is optional for adapters
        raise FailedPrecondition(
            "sclated.runtime.next_fire is unavailable; pass next_fire= to ReferenceHarnessAdapter"
        ) from exc

    def fire(expr: str, after_ns: int) -> int:
        return next_fire(expr, after_ns)

    return fire


# -- the harness's crontab as an event source ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class CronLine:
    expr: str
    command: str
    line: int


_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\s*=")


def parse_crontab(text: str) -> list[CronLine]:
    """Schedule and command of each job line (comments, blanks, ``VAR=value`` skipped)."""
    out: list[CronLine] = []
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#") or _ENV.match(line):
            continue
        if line.startswith("@"):
            expr, _, command = line.partition(" ")
        else:
            fields = line.split(None, 5)
            if len(fields) < 6:
                raise InvalidArgument(f"crontab line {no}: expected five fields and a command: {raw!r}")
            expr, command = " ".join(fields[:5]), fields[5]
        if not command.strip():
            raise InvalidArgument(f"crontab line {no}: no command: {raw!r}")
        out.append(CronLine(expr, command.strip(), no))
    return out


class HarnessCronSource:
    """Each job's next fire as an ``ExecInSandbox`` event; the following one after it fires.

    The cron parser is injected (``next_fire``) so this source does not depend
    on how the runtime implements cron semantics. ``@reboot`` jobs have no
    time and are skipped (the runtime runs them when the sandbox starts).
    """

    def __init__(
        self,
        lines: Sequence[CronLine],
        next_fire: NextFire,
        *,
        name: str = "cron",
        holder: str = "cron",
        timeout_s: float = 600.0,
        until_ns: int | None = None,
    ) -> None:
        self._lines = [ln for ln in lines if ln.expr != "@reboot"]
        self._next_fire = next_fire
        self._name = name
        self._holder = holder
        self._timeout = timeout_s
        self._until = until_ns
        self._outstanding: dict[int, str] = {}
        self._last: dict[int, int] = {}

    @property
    def name(self) -> str:
        return self._name

    def poll(self, snapshot: Snapshot) -> Iterable[EventSpec]:
        out: list[EventSpec] = []
        for job in self._lines:
            pending = self._outstanding.get(job.line)
            if pending is not None:
                fired = snapshot.fired_at(pending)
                if fired is None:
                    continue
                self._last[job.line] = fired
            after = max(self._last.get(job.line, snapshot.now_ns), snapshot.now_ns)
            due = self._next_fire(job.expr, after)
            if self._until is not None and due > self._until:
                self._outstanding.pop(job.line, None)
                continue
            eid = f"{self._name}:{job.line}:{due}"
            self._outstanding[job.line] = eid
            out.append(
                EventSpec(
                    eid,
                    At(due),
                    (ExecInSandbox(job.command, holder=self._holder, timeout_s=self._timeout),),
                    priority=Priority.LOW,
                    data={"cron": job.expr, "line": job.line, "command": job.command},
                )
            )
        return out
