"""`sclated bench fuzz`, the control socket part: what a hostile agent inside a
sandbox can send the daemon over ``/run/sclate/sclate.sock``.

Two real runs (tenants ``alice`` and ``bob``) of the synthetic benchmark run in a
real :class:`~sclated.runs.RunManager` on a real SQLite store, each with its own
:class:`~sclated.sandbox.SandboxSession` control socket (its own secret, its own
capture sink writing to the store, the run's own clock, leases and ``wait``), as
the daemon wires them; there is no container: the agent is the scripted one,
held in its first turn until the fuzzing is over, so nothing else moves the run
meanwhile. Cases are thrown at the real Unix sockets: malformed JSON, lines of
megabytes, unknown types, wrong ids, wrong fields, replayed and forged records
(another run's records, its call ids, its API key), floods of ``wait``,
``call_start`` and connections, and a memory attack from a process of its own
(many connections, each sending an endless line).

Counted (each a case that went wrong, described in ``findings``):

- ``crashes``: the socket stopped answering (a fresh ``hello`` fails), a run failed
  or ended early, or a run did not succeed once released;
- ``internal_errors``: a reply that is not a clean error for a bad request (no
  reply, not JSON, ``ok: true`` where an error is due, reason ``INTERNAL``), or a
  traceback logged by the daemon's code;
- ``state_changed_on_error``: a refused request changed its run (stored calls,
  journal, leases, state or results);
- ``cross_tenant_leaks``: a request on one run's socket changed the other run, or
  a reply carried the other run's id, secret or data.

``rss_growth_mb`` is this process's growth (the daemon side only: the attacking
client is a process of its own) while ``memory_attack_connections`` connections
each send an endless line; ``max_line_bytes_accepted`` is the longest line that
was read and answered ``ok``, ``longest_line_refused_bytes`` the longest refused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters import AgentEnvironment, InProcessAgent, TurnResult
from adapters.synthetic import SyntheticBenchmark
from proxy_addons._call import Call
from sclated.bench._fuzz_part import Tally as _Tally
from sclated.bench._fuzz_part import main
from sclated.model import EmbeddedModel
from sclated.runs import AgentEntry, AgentRef, BenchmarkRef, ManagerConfig, Registry, RunManager, RunSpec
from sclated.runtime import Limits
from sclated.sandbox import ControlLimits, SandboxOptions, SandboxServices, SandboxSession, SessionConfig
from sclated.scheduler import DeliverPrompt
from sclated.store import Store

__all__ = ["run"]

TENANTS = ("alice", "bob")
_NS = 1_000_000_000
_HARNESS = "fuzz-target"
_REPLY_TIMEOUT_S = 10.0
_MEMORY_CONNECTIONS = 40
_MEMORY_BYTES_EACH = 12 * 1024 * 1024


# -- the runs under attack -----------------------------------------------------------------


@dataclass
class Target:
    """One run under attack: its control socket and what it was given."""

    tenant: str
    run_id: str
    key: str
    socket: Path
    session: SandboxSession
    env: AgentEnvironment

    @property
    def api_key(self) -> str:
        return self.session.endpoints.api_key


class _HeldAgent(InProcessAgent):
    """The scripted agent's part in a run, with its sandbox's control socket and no
    container: ``prepare`` serves the socket as a sandboxed run's does, ``deliver``
    holds the turn until ``release`` is set."""

    def __init__(self, rig: _Rig) -> None:
        self._rig = rig
        self._session: SandboxSession | None = None
        self._run_key = ""

    @property
    def name(self) -> str:
        return _HARNESS

    async def prepare(self, env: AgentEnvironment) -> None:
        config = SessionConfig(
            run_key=env.run_key,
            tenant=env.tenant,
            run_id=env.run_id,
            image="",
            model_base_url="",
            model_name="",
            limits=Limits(),
            options=SandboxOptions(probe=False),
        )
        session = SandboxSession(
            self._rig.services,
            config,
            clock=env.clock,
            leases=env.leases,
            on_wait=env.wait,
            fail_run=env.fail_run,
            on_world=env.world,
        )
        await asyncio.to_thread(session.control_dir.mkdir, parents=True, exist_ok=True)
        path = session.control_dir / "sclate.sock"
        await session.start_control(path)
        self._session = session
        self._run_key = env.run_key
        self._rig.targets[env.run_key] = Target(env.tenant, env.run_id, env.run_key, path, session, env)

    async def start_session(self, session: str) -> None:
        return None

    async def stop_session(self) -> None:
        return None

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        received = time.monotonic_ns()
        self._rig.in_turn.add(self._run_key)
        if len(self._rig.in_turn) == len(TENANTS):
            self._rig.all_in_turn.set()
        await self._rig.release.wait()
        return TurnResult(reply="done", started_ns=0, ended_ns=0, received_wall_ns=received)

    async def close(self, *, keep: bool = False) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


@dataclass
class RunState:
    """What a refused request must not change."""

    calls: dict[str, str]
    journal: int
    leases: dict[str, int]
    state: str
    results: str

    def diff(self, other: RunState) -> list[str]:
        out = []
        if self.calls != other.calls:
            out.append(f"calls {len(self.calls)} -> {len(other.calls)}")
        if self.journal != other.journal:
            out.append(f"journal {self.journal} -> {other.journal}")
        if self.leases != other.leases:
            gone = sorted(n[:60] for n in set(self.leases) - set(other.leases))
            new = sorted(n[:60] for n in set(other.leases) - set(self.leases))
            out.append(f"leases -{gone} +{new}")
        if self.state != other.state:
            out.append(f"state {self.state} -> {other.state}")
        if self.results != other.results:
            out.append("results changed")
        return out


class _TracebackLog(logging.Handler):
    """Every log record with an exception from the daemon's code."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.name.startswith("sclated"):
            self.records.append(f"{record.name}: {record.getMessage()} ({record.exc_info[1]!r})"[:300])


class _Rig:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.store = Store(tmp / "sclated.db")
        self.services = SandboxServices(
            state_dir=tmp,
            daemon_id="sclated-fuzz",
            store=self.store,
            model=EmbeddedModel(log_path=tmp / "model.log"),
            sockets_dir=Path(tempfile.mkdtemp(prefix="sc-fz-")),
        )
        registry = Registry()
        registry.add_benchmark(SyntheticBenchmark())
        registry.add_agent(
            AgentEntry(
                name=_HARNESS,
                description="the control socket of a sandbox, no container (sclated bench fuzz)",
                sandboxed=False,
                factory=lambda options, memory: _HeldAgent(self),
            )
        )
        self.manager = RunManager(self.store, registry, ManagerConfig(write_reports=False), runs_dir=tmp / "runs")
        self.targets: dict[str, Target] = {}
        self.in_turn: set[str] = set()
        self.all_in_turn = asyncio.Event()
        self.release = asyncio.Event()

    async def start(self) -> list[Target]:
        await self.store.open()
        await self.manager.start()
        spec = RunSpec(
            benchmark=BenchmarkRef("synthetic", options={"days": 1, "events_per_day": 1}),
            agent=AgentRef(_HARNESS),
        )
        for tenant in TENANTS:
            await self.manager.create(tenant, spec, run_id=f"fuzz-{tenant}")
        async with asyncio.timeout(30):
            await self.all_in_turn.wait()
        return [self.targets[f"{t}/fuzz-{t}"] for t in TENANTS]

    async def state(self, target: Target) -> RunState:
        await self.manager.flush()
        calls = {str(c["call_id"]): json.dumps(c, sort_keys=True) for c in await self.store.calls(target.key)}
        row = await self.store.get_run(target.key)
        assert row is not None
        return RunState(
            calls=calls,
            journal=len(await self.store.journal(target.key)),
            leases=target.env.leases.counts(),
            state=row.state,
            results=json.dumps(row.results, sort_keys=True, default=str),
        )

    async def finish(self, targets: list[Target], timeout_s: float = 30.0) -> dict[str, str]:
        """Let the runs go on from their held turn; their final states."""
        self.release.set()
        states: dict[str, str] = {}
        deadline = time.monotonic() + timeout_s
        for t in targets:
            while True:
                row = await self.store.get_run(t.key)
                assert row is not None
                if row.state not in ("PENDING", "RUNNING") or time.monotonic() > deadline:
                    states[t.key] = f"{row.state}: {row.reason}" if row.state != "SUCCEEDED" else row.state
                    break
                await asyncio.sleep(0.05)
        return states

    async def close(self) -> None:
        self.release.set()
        for tenant in TENANTS:
            with contextlib.suppress(Exception):
                await self.manager.cancel(tenant, f"runs/fuzz-{tenant}")
        await self.manager.shutdown(10)
        await self.services.close()
        await self.store.close()


# -- talking to a socket -------------------------------------------------------------------


@dataclass
class Reply:
    lines: list[Any]
    """The decoded replies (a line that is not JSON is kept as its text)."""
    closed: bool
    """The server closed the connection."""


async def exchange(path: Path, data: bytes, replies: int = 1, timeout_s: float = _REPLY_TIMEOUT_S) -> Reply:
    """Send ``data`` on a fresh connection and read up to ``replies`` lines."""
    reader, writer = await asyncio.open_unix_connection(str(path), limit=2**26)
    lines: list[Any] = []
    closed = False
    try:
        writer.write(data)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while len(lines) < replies:
                    try:
                        raw = await reader.readline()
                    except (ConnectionError, ValueError):
                        closed = True
                        break
                    if not raw:
                        closed = True
                        break
                    try:
                        lines.append(json.loads(raw))
                    except ValueError:
                        lines.append(raw[:200].decode(errors="replace"))
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return Reply(lines, closed)


def line(obj: Any) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def record_for(
    run_id: str, call_id: str | None = None, *, body_extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A call record as the addon builds it (its own builder, ``proxy_addons._call.Call``)."""
    call = Call(
        call_id=call_id or str(uuid.uuid4()),
        run=run_id,
        role="agent",
        api="openai_chat",
        method="POST",
        path="/v1/chat/completions",
        start_ns=time.time_ns(),
    )
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **(body_extra or {})}
    call.read_request(json.dumps(request).encode(), True)
    response = {
        "id": "c1",
        "object": "chat.completion",
        "model": "m",
        "prompt_token_ids": [1, 2, 3],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
                "token_ids": [7],
                "logprobs": {"content": [{"token": "ok", "logprob": -0.1}]},
            }
        ],
    }
    return dict(call.to_record(200, json.dumps(response).encode(), None, time.time_ns() + 1000))


# -- the cases -----------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    data: bytes
    expect: str
    """``error``: every reply must be a clean refusal; ``ok``: the request is valid;
    ``any``: valid or refused, never an internal error (floods)."""
    replies: int = 1
    on: int = 0
    """Which run's socket (index into the targets)."""
    changes_run: bool = False
    """An accepted request that may change its own run (a stored record, a wait)."""


def _garbage(rng: random.Random) -> list[tuple[str, bytes]]:
    out = [
        ("empty line", b"\n"),
        ("whitespace", b"   \t \n"),
        ("not json", b"hello there\n"),
        ("truncated object", b'{"id": 1, "type": "hel\n'),
        ("json null", b"null\n"),
        ("json array", b"[1, 2, 3]\n"),
        ("json string", b'"hello"\n'),
        ("json number", b"42\n"),
        ("nan", b'{"id": 1, "type": "wait", "for_ns": NaN}\n'),
        ("invalid utf-8", b'{"id": 1, "type": "\xff\xfe"}\n'),
        ("nul bytes", b'{"id": 1,\x00 "type": "hello"}\n'),
        ("deep nesting", b"[" * 100_000 + b"]" * 100_000 + b"\n"),
        ("deep nesting in a request", b'{"id": 1, "type": "hello", "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}\n"),
        ("integer past the digit limit", b'{"id": 1, "type": "wait", "for_ns": ' + b"9" * 5000 + b"}\n"),
        ("id past the digit limit", b'{"id": ' + b"9" * 5000 + b', "type": "hello"}\n'),
        ("duplicate keys", b'{"id": 1, "type": "hello", "type": "nope"}\n'),
        ("crlf", b'{"id": 1, "type": "nope"}\r\n'),
    ]
    for i in range(8):
        n = rng.randint(1, 400)
        blob = bytes(rng.randrange(256) for _ in range(n)).replace(b"\n", b" ")
        out.append((f"random bytes #{i} ({n} B)", blob + b"\n"))
    for i in range(6):
        valid = json.dumps({"id": i, "type": "call_start", "call_id": f"c{i}", "role": "agent"})
        cut = rng.randint(1, len(valid) - 1)
        out.append((f"cut request #{i} at {cut}", valid[:cut].encode() + b"\n"))
    return out


_OWN, _OTHER = "<own run>", "<other run>"
"""What a record in :func:`_bad_requests` names as its run, filled in once its socket is chosen."""


def _bad_requests(rng: random.Random) -> list[tuple[str, Any]]:
    words = ["", " ", "HELLO", "call-start", "records", "wait ", "exec", "shutdown", "world2", "__class__"]
    out: list[tuple[str, Any]] = [(f"unknown type {w!r}", {"id": 1, "type": w}) for w in words]
    out += [
        ("no type", {"id": 1}),
        ("type is a number", {"id": 1, "type": 3}),
        ("type is a list", {"id": 1, "type": ["hello"]}),
        ("type is an object", {"id": 1, "type": {"hello": 1}}),
        ("id is an object", {"id": {"a": 1}, "type": "nope"}),
        ("id is a list", {"id": [1, 2], "type": "nope"}),
        ("id is a float", {"id": 1.5, "type": "nope"}),
        ("id is true", {"id": True, "type": "nope"}),
        ("id is a long string", {"id": "x" * 10_000, "type": "nope"}),
        ("call_start without call_id", {"id": 1, "type": "call_start", "role": "agent"}),
        ("call_start, call_id a number", {"id": 1, "type": "call_start", "call_id": 5, "role": "agent"}),
        ("call_start, empty call_id", {"id": 1, "type": "call_start", "call_id": "", "role": "agent"}),
        ("call_start, call_id of 100k chars", {"id": 1, "type": "call_start", "call_id": "c" * 100_000, "role": "a"}),
        ("call_start without role", {"id": 1, "type": "call_start", "call_id": "c-norole"}),
        ("call_start, role an object", {"id": 1, "type": "call_start", "call_id": "c-r", "role": {"x": 1}}),
        ("call_end without call_id", {"id": 1, "type": "call_end"}),
        ("call_end, call_id a list", {"id": 1, "type": "call_end", "call_id": ["a"]}),
        ("wait without a time", {"id": 1, "type": "wait"}),
        ("wait, for_ns negative", {"id": 1, "type": "wait", "for_ns": -5}),
        ("wait, for_ns a string", {"id": 1, "type": "wait", "for_ns": "10"}),
        ("wait, for_ns a float", {"id": 1, "type": "wait", "for_ns": 1.5}),
        ("wait, until_ns a string", {"id": 1, "type": "wait", "until_ns": "2030-01-01"}),
        ("wait, until_ns past int64", {"id": 1, "type": "wait", "until_ns": 2**70}),
        ("wait, for_ns past int64", {"id": 1, "type": "wait", "for_ns": 2**70}),
        ("wait, until_ns true", {"id": 1, "type": "wait", "until_ns": True}),
        ("record without record", {"id": 1, "type": "record"}),
        ("record, record null", {"id": 1, "type": "record", "record": None}),
        ("record, record a list", {"id": 1, "type": "record", "record": [1]}),
        ("record, record text not JSON", {"id": 1, "type": "record", "record": "{not json"}),
        ("record, record an empty object", {"id": 1, "type": "record", "record": {}}),
        ("world on a run without a world", {"id": 1, "type": "world", "op": "tools"}),
        ("world, call on a run without a world", {"id": 1, "type": "world", "op": "call", "app": "x"}),
    ]
    mutations: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
        ("call_id removed", lambda r: r.pop("call_id")),
        ("run removed", lambda r: r.pop("run")),
        ("run of the other run (forged)", lambda r: r.__setitem__("run", _OTHER)),
        ("run a number", lambda r: r.__setitem__("run", 7)),
        ("api unknown", lambda r: r.__setitem__("api", "openai_telepathy")),
        ("schema 99", lambda r: r.__setitem__("schema", 99)),
        ("timings missing", lambda r: r.pop("timings")),
        ("end before start", lambda r: r["timings"].__setitem__("end_ns", 0)),
        ("token ids negative", lambda r: r.__setitem__("prompt_token_ids", [-1, 2])),
        ("token ids strings", lambda r: r.__setitem__("prompt_token_ids", ["a"])),
        ("logprobs longer than ids", lambda r: r["completions"][0].__setitem__("logprobs", [0.1, 0.2, 0.3])),
        ("completions an object", lambda r: r.__setitem__("completions", {"a": 1})),
        ("chunks of numbers", lambda r: r.__setitem__("chunks", [1, 2])),
        ("complete a string", lambda r: r.__setitem__("complete", "yes")),
        ("role empty", lambda r: r.__setitem__("role", "")),
    ]
    for name, mutate in mutations:
        rec = record_for(_OWN)
        mutate(rec)
        out.append((f"record: {name}", {"id": 1, "type": "record", "record": rec}))
    rng.shuffle(out)
    return out


# -- running -------------------------------------------------------------------------------


@dataclass
class Tally(_Tally):
    max_line_ok: int = 0
    longest_refused: int = 0


def _judge(case: Case, reply: Reply) -> str | None:
    """What is wrong with the replies to ``case`` (None: nothing)."""
    if len(reply.lines) < case.replies:
        return f"{len(reply.lines)} of {case.replies} replies" + (" (connection closed)" if reply.closed else "")
    for r in reply.lines:
        if not isinstance(r, dict) or "ok" not in r:
            return f"reply is not a control reply: {str(r)[:120]}"
        if r.get("reason") == "INTERNAL":
            return f"internal error: {str(r.get('error'))[:160]}"
        if case.expect == "error" and r["ok"]:
            return f"accepted: {json.dumps(r)[:160]}"
        if case.expect == "ok" and not r["ok"]:
            return f"refused: {r.get('reason')}: {str(r.get('error'))[:160]}"
        if not r["ok"] and (not isinstance(r.get("error"), str) or not isinstance(r.get("reason"), str)):
            return f"refusal without error and reason: {json.dumps(r)[:160]}"
    return None


def _leaks(reply: Reply, other: Target) -> str | None:
    text = json.dumps(reply.lines, default=str)
    secret = other.api_key.rsplit("-", 1)[-1]
    if secret in text:
        return "a reply carried the other run's secret"
    if f'"run": "{other.run_id}"' in text:
        return "a reply named the other run as its own"
    return None


class Fuzzer:
    def __init__(self, rig: _Rig, targets: list[Target], rng: random.Random) -> None:
        self.rig = rig
        self.targets = targets
        self.rng = rng
        self.tally = Tally()
        self.before = [RunState({}, 0, {}, "", "") for _ in targets]

    async def snapshot(self) -> None:
        self.before = [await self.rig.state(t) for t in self.targets]

    async def alive(self) -> str | None:
        for t in self.targets:
            try:
                r = await exchange(t.socket, line({"id": 0, "type": "hello"}), timeout_s=5)
            except OSError as exc:
                return f"{t.key}'s socket refuses connections: {exc}"
            if not r.lines or not isinstance(r.lines[0], dict) or r.lines[0].get("run") != t.run_id:
                return f"{t.key}'s socket does not answer hello: {r.lines}"
        return None

    async def throw(self, case: Case) -> Reply | None:
        t = self.tally
        t.cases += 1
        target, other = self.targets[case.on], self.targets[1 - case.on]
        try:
            reply = await exchange(target.socket, case.data, case.replies)
        except OSError as exc:
            t.find("crashes", f"{case.name}: cannot connect: {exc}")
            return None
        problem = _judge(case, reply)
        if problem is not None:
            t.find("internal_errors", f"{case.name}: {problem}")
        leak = _leaks(reply, other)
        if leak is not None:
            t.find("cross_tenant_leaks", f"{case.name}: {leak}")
        ok_lines = [r for r in reply.lines if isinstance(r, dict) and r.get("ok")]
        if ok_lines and case.replies == 1:
            t.max_line_ok = max(t.max_line_ok, len(case.data))
        elif reply.lines and case.replies == 1:
            t.longest_refused = max(t.longest_refused, len(case.data))
        after = [await self.rig.state(x) for x in self.targets]
        own = self.before[case.on].diff(after[case.on])
        if own and not (case.changes_run and ok_lines):
            t.find("state_changed_on_error", f"{case.name}: {', '.join(own)}")
        theirs = self.before[1 - case.on].diff(after[1 - case.on])
        if theirs:
            t.find("cross_tenant_leaks", f"{case.name} on {target.key} changed {other.key}: {', '.join(theirs)}")
        self.before = after
        dead = await self.alive()
        if dead is not None:
            t.find("crashes", f"after {case.name}: {dead}")
        return reply


async def _malformed(f: Fuzzer) -> None:
    for name, data in _garbage(f.rng):
        await f.throw(Case(f"garbage: {name}", data, "error", on=f.rng.randrange(2)))
    for name, req in _bad_requests(f.rng):
        on = f.rng.randrange(2)
        rec = req.get("record")
        if isinstance(rec, dict) and rec.get("run") in (_OWN, _OTHER):
            rec["run"] = f.targets[on if rec["run"] == _OWN else 1 - on].run_id
        await f.throw(Case(name, line(req), "error", on=on))


async def _long_lines(f: Fuzzer, limits: ControlLimits) -> None:
    # Just under the limit: a whole record with a long body, read and stored.
    body = "x" * (limits.line_bytes - 64 * 1024)
    rec = record_for(f.targets[0].run_id, body_extra={"pad": body})
    data = line({"id": 41, "type": "record", "record": rec})
    await f.throw(Case(f"a record of {len(data) >> 20} MiB", data, "ok", on=0, changes_run=True))
    # Over it: refused with the id it starts with, and the next line on the connection answered.
    for size in (limits.line_bytes + 1, 3 * limits.line_bytes):
        pad = b"y" * size
        data = b'{"id": 42, "type": "record", "record": "' + pad + b'"}\n' + line({"id": 43, "type": "hello"})
        reply = await f.throw(Case(f"a line of {size >> 20} MiB, then a hello", data, "any", replies=2, on=1))
        if reply is not None and len(reply.lines) == 2:
            first, second = reply.lines
            if not (isinstance(first, dict) and first.get("id") == 42 and not first.get("ok")):
                f.tally.find("internal_errors", f"over-long line: first reply {str(first)[:160]}")
            if not (isinstance(second, dict) and second.get("id") == 43 and second.get("ok")):
                f.tally.find("internal_errors", f"the line after an over-long one: {str(second)[:160]}")
            f.tally.longest_refused = max(f.tally.longest_refused, size)
    # A line of megabytes with no newline at all, then the connection closes.
    await f.throw(Case("an endless line, then EOF", b"z" * (limits.line_bytes + 4096), "error", replies=0, on=0))


def _record(rec: Any) -> dict[str, Any]:
    return {"type": "record", "record": rec}


async def _replays(f: Fuzzer) -> None:
    """Records of one run sent to the other, and records naming the other run's call ids."""
    a, b = f.targets
    own_b = record_for(b.run_id)
    stolen_id = record_for(a.run_id, call_id=own_b["call_id"])
    keyed = record_for(a.run_id, body_extra={"api_key": b.api_key})
    # (name, request, expected, socket: 0 alice / 1 bob, stores a record)
    cases: list[tuple[str, dict[str, Any], str, int, bool]] = [
        ("bob stores a record of its own", _record(own_b), "ok", 1, True),
        ("bob's record replayed on alice's socket", _record(own_b), "error", 0, False),
        ("bob's record replayed on bob's socket", _record(own_b), "ok", 1, False),
        ("bob's record as JSON text on alice's socket", _record(json.dumps(own_b)), "error", 0, False),
        ("alice stores a record under bob's call id", _record(stolen_id), "ok", 0, True),
        ("a record carrying bob's API key, on alice's socket", _record(keyed), "ok", 0, True),
        (
            "call_end of bob's call id on alice's socket",
            {"type": "call_end", "call_id": own_b["call_id"]},
            "ok",
            0,
            False,
        ),
    ]
    for i, (name, request, expected, on, stores) in enumerate(cases):
        await f.throw(Case(name, line({"id": i, **request}), expected, on=on, changes_run=stores))
    # Stored rows must be each run's own.
    for target in (a, b):
        for stored in await f.rig.store.calls(target.key):
            if stored.get("run") != target.run_id:
                f.tally.find("cross_tenant_leaks", f"{target.key} stores a record of run {stored.get('run')!r}")


async def _floods(f: Fuzzer, limits: ControlLimits) -> dict[str, Any]:
    """Floods on one connection, without reading replies until all are sent."""
    out: dict[str, Any] = {}
    a = f.targets[0]
    n = 3 * limits.in_flight
    ids = [f"flood-{i}" for i in range(n)]
    data = b"".join(line({"id": i, "type": "call_start", "call_id": c, "role": "agent"}) for i, c in enumerate(ids))
    reply = await f.throw(Case(f"{n} call_starts", data, "any", replies=n, on=0, changes_run=True))
    out["call_start_flood_leased"] = sum(
        1 for r in (reply.lines if reply else []) if isinstance(r, dict) and r.get("ok")
    )
    data = b"".join(line({"id": i, "type": "call_end", "call_id": c}) for i, c in enumerate(ids))
    await f.throw(Case(f"{n} call_ends", data, "any", replies=n, on=0, changes_run=True))
    leftover = {k: v for k, v in a.env.leases.counts().items() if k.startswith("model-call:flood-")}
    if leftover:
        f.tally.find("state_changed_on_error", f"{len(leftover)} flood leases left after their call_end")
    # Waits that return at once (for_ns 0): the turn is suspended and taken again each time.
    n = 2 * limits.in_flight
    data = b"".join(line({"id": i, "type": "wait", "for_ns": 0}) for i in range(n))
    reply = await f.throw(Case(f"{n} waits for 0 ns", data, "any", replies=n, on=0, changes_run=True))
    out["wait_flood_woken"] = sum(1 for r in (reply.lines if reply else []) if isinstance(r, dict) and r.get("ok"))
    # Connections: past the limit each gets a refusal and is closed; the socket serves on.
    held: list[asyncio.StreamWriter] = []
    refused = 0
    try:
        for _ in range(limits.connections + 8):
            reader, writer = await asyncio.open_unix_connection(str(a.socket))
            held.append(writer)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.2):
                    got = await reader.readline()
                    if got and json.loads(got).get("reason") == "RESOURCE_EXHAUSTED":
                        refused += 1
        f.tally.cases += 1
    finally:
        for w in held:
            w.close()
    out["connections_refused_past_limit"] = refused
    await asyncio.sleep(0.1)
    dead = await f.alive()
    if dead is not None:
        f.tally.find("crashes", f"after the connection flood: {dead}")
    return out


_MEMORY_CLIENT = r"""
import socket, sys, time
path, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.setblocking(False)
    socks.append(s)
chunk = b"m" * 65536
sent = [0] * n
deadline = time.monotonic() + 30
while time.monotonic() < deadline and min(sent) < size:
    for i, s in enumerate(socks):
        if sent[i] < size:
            try:
                sent[i] += s.send(chunk)
            except BlockingIOError:
                pass
            except OSError:
                sent[i] = size
    time.sleep(0.001)
print(sum(sent), flush=True)
time.sleep(1)
"""


def _rss_mb() -> float:
    for text in Path("/proc/self/status").read_text().splitlines():
        if text.startswith("VmRSS:"):
            return int(text.split()[1]) / 1024
    return 0.0


async def memory_attack(path: Path, connections: int, bytes_each: int) -> tuple[int, float]:
    """``connections`` connections to ``path``, each sending ``bytes_each`` bytes of one
    line that never ends, from a process of its own; the bytes it got to send, and how
    much this process (the server's side) grew meanwhile, in MiB (its peak RSS)."""
    base = peak = await asyncio.to_thread(_rss_mb)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _MEMORY_CLIENT,
        str(path),
        str(connections),
        str(bytes_each),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        while proc.returncode is None:
            peak = max(peak, await asyncio.to_thread(_rss_mb))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 0.1)
        sent = int((await proc.communicate())[0].strip() or 0)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return sent, peak - base


async def _memory_attack(f: Fuzzer) -> dict[str, Any]:
    sent, growth = await memory_attack(f.targets[1].socket, _MEMORY_CONNECTIONS, _MEMORY_BYTES_EACH)
    f.tally.cases += 1
    dead = await f.alive()
    if dead is not None:
        f.tally.find("crashes", f"after the memory attack: {dead}")
    return {
        "memory_attack_connections": _MEMORY_CONNECTIONS,
        "memory_attack_sent_mb": round(sent / 2**20, 1),
        "rss_growth_mb": round(growth, 1),
    }


async def run(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Throw the cases at two runs' control sockets; the contract of ``sclated bench fuzz``'s parts."""
    rng = random.Random(seed)
    limits = ControlLimits()
    traces = _TracebackLog()
    logging.getLogger().addHandler(traces)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sclate-fuzz-socket-") as tmp:
        rig = _Rig(Path(tmp))
        try:
            f = Fuzzer(rig, await rig.start(), rng)
            await f.snapshot()
            await _malformed(f)
            await _long_lines(f, limits)
            await _replays(f)
            extra = await _floods(f, limits)
            extra.update(await _memory_attack(f))
            await f.snapshot()
            ended = await rig.finish(f.targets)
            for key, state in ended.items():
                if state != "SUCCEEDED":
                    f.tally.find("crashes", f"run {key} ended {state}")
        finally:
            await rig.close()
            logging.getLogger().removeHandler(traces)
    t = f.tally
    for text in traces.records:
        t.find("internal_errors", f"traceback logged: {text}")
    return {
        **t.result(),
        "max_line_bytes_accepted": t.max_line_ok,
        "longest_line_refused_bytes": t.longest_refused,
        "line_limit_bytes": limits.line_bytes,
        "held_bytes_limit": limits.held_bytes,
        **extra,
        "seconds": round(time.monotonic() - started, 1),
    }


if __name__ == "__main__":
    raise SystemExit(main("python -m sclated.bench._fuzz_socket", run))
