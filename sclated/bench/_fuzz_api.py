"""The API part of `sclated bench fuzz`: sclate.v1 requests from the schema against a real daemon.

A real ``sclated`` process (tokens file with two tenants, reports off, state in
a temporary directory) is given some state per tenant through the API, with the
scripted agent (no Docker, no model): a run left RUNNING across a restart of
the daemon (so INTERRUPTED), a run that stays RUNNING (its turns take 2 s), two
short runs that finish, a snapshot of each taken while it ran, and a branch
group of two runs from one of them; every id and label value of a tenant
carries a nonce of its own. Then
:class:`~sclated.bench._fuzz_requests.RequestGenerator` makes the cases (see
there), sent ``CONCURRENCY`` at a time over raw-bytes channels (``cases``
counts requests sent: a ``race`` case sends its request 2-4 times), and each
answer is classified:

* ``internal_errors``: INTERNAL or UNKNOWN; also a run that ended FAILED with
  an "internal error" (input the API took that broke the run later);
* ``crashes``: the daemon process exited, or no longer created a small run
  within ``HEALTH_DEADLINE_S`` (a daemon whose writes are stuck still answers
  reads); checked after every batch of ``BATCH`` cases, and started again on
  the same state to go on;
* ``state_changed_on_error``: an erroring request of a mutating method, run
  alone with the store read before and after (read-only SQLite: runs and their
  specs, parents and settled states, snapshots, restore markers; 15 ms after
  the answer, past the daemon's 10 ms flush). Sampled: every request naming
  the other tenant's resources, and ``check_fraction`` (30%) of the others. A
  client's deadline is no refusal: such a request is not checked;
* ``cross_tenant_leaks``: a string only the other tenant owns (an id, a label
  value, its tenant name) in an answer, that the request did not carry; or an
  OK to a request naming the other tenant's resource;
* ``auth_bypasses``: an answer other than UNAUTHENTICATED without a valid token
  (no answer within the deadline is none);
* ``unnamed_errors``: an error whose message is empty or that did not come from
  the daemon's error interceptor (no ``sclate-reason`` trailer; gRPC's own refusal
  of an oversized message excepted);
* ``timeouts``: a unary call past its deadline (a stream's deadline is how it is
  read: its first messages within ``STREAM_DEADLINE_S``);
* ``unexpected_status``: any other code that is not a clean refusal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import signal
import sqlite3
import string
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc

from sclated.bench._fuzz_requests import Case, RequestGenerator, TenantPools

__all__ = [
    "Answer",
    "CampaignResult",
    "DaemonTarget",
    "FuzzTarget",
    "RunState",
    "StoreState",
    "Verdict",
    "classify",
    "run",
    "run_campaign",
    "state_changes",
]

CONCURRENCY = 48
BATCH = 384
HEALTH_DEADLINE_S = 30.0
UNARY_DEADLINE_S = 15.0
STREAM_DEADLINE_S = 0.5
STREAM_MAX_MESSAGES = 200
SETTLE_S = 0.015
"""Wait after an erroring mutating request before reading the store (the daemon flushes every 10 ms)."""
MAX_FINDINGS = 60
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
)

_CLEAN = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.OUT_OF_RANGE,
    }
)
_INTERNAL = frozenset({grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})
_UNSETTLED = frozenset({grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED})
"""Answers after which a request may have changed the state (a client's deadline is no refusal)."""
_OPEN_TO_ANY = frozenset({"ListRuns", "ListBenchmarks", "ListAgents"})
"""Methods a request naming the other tenant's things may get an OK from (an empty list)."""
_GRPC_SIZE_REFUSAL = "larger than max"
SETTLED_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "INTERRUPTED"})


# -- what the campaign needs of its target -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunState:
    spec: str
    parent: str
    state: str


@dataclass(frozen=True, slots=True)
class StoreState:
    """What a client can see of the daemon's state, as far as requests change it."""

    runs: Mapping[str, RunState] = field(default_factory=dict)
    snapshots: frozenset[str] = frozenset()
    restores: frozenset[str] = frozenset()


def state_changes(before: StoreState, after: StoreState) -> list[str]:
    """What changed between two reads that no run does by itself (a run moves
    PENDING -> RUNNING -> a settled state, and clears its restore marker, alone)."""
    out: list[str] = []
    out += [f"run {k} removed" for k in sorted(before.runs.keys() - after.runs.keys())]
    out += [f"run {k} added" for k in sorted(after.runs.keys() - before.runs.keys())]
    for key in sorted(before.runs.keys() & after.runs.keys()):
        b, a = before.runs[key], after.runs[key]
        if b.spec != a.spec:
            out.append(f"run {key}: spec changed")
        if b.parent != a.parent:
            out.append(f"run {key}: parent changed")
        if b.state in SETTLED_STATES and a.state != b.state:
            out.append(f"run {key}: {b.state} -> {a.state}")
        elif a.state == "CANCELLED" and b.state != "CANCELLED":
            out.append(f"run {key}: cancelled")
    out += [f"snapshot {s} removed" for s in sorted(before.snapshots - after.snapshots)]
    out += [f"snapshot {s} added" for s in sorted(after.snapshots - before.snapshots)]
    out += [f"restore marker for {r} added" for r in sorted(after.restores - before.restores)]
    return out


class FuzzTarget(Protocol):
    """A daemon to fuzz: where it listens, whether it lives, what its store holds."""

    @property
    def address(self) -> str: ...

    async def alive(self, channel: grpc.aio.Channel) -> str:
        """ "" when the daemon runs and serves a write over ``channel``; else what is wrong."""

    async def state(self) -> StoreState: ...

    async def restart(self) -> None:
        """Start it again on the same state (after a crash); ``address`` may change."""

    async def runs_failed_internally(self) -> list[str]:
        """``tenant/run: reason`` of every run that ended FAILED with an internal error."""

    def log_tracebacks(self) -> int:
        """Tracebacks in the daemon's log so far."""


# -- one answer --------------------------------------------------------------------------------


@dataclass(slots=True)
class Answer:
    code: grpc.StatusCode
    details: str = ""
    trailers: dict[str, str] = field(default_factory=dict)
    payload: bytes = b""
    """The response (or the stream's messages) as received, serialized."""
    messages: int = 0
    client_error: str = ""
    """An exception on our side that is not a status (the request could not be sent)."""


def _trailers(md: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in md or ():
        out[str(key)] = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return out


async def send(channel: grpc.aio.Channel, case: Case) -> Answer:
    """Send ``case`` as bytes (its message serialized, or its raw bytes) and read the answer."""
    path = f"/{case.method.containing_service.full_name}/{case.method.name}"
    data = case.request_bytes()
    try:
        if case.method.server_streaming:
            stream = channel.unary_stream(path, request_serializer=None, response_deserializer=None)
            call = stream(data, metadata=case.metadata, timeout=STREAM_DEADLINE_S)
            chunks: list[bytes] = []
            try:
                async for chunk in call:
                    chunks.append(chunk)
                    if len(chunks) >= STREAM_MAX_MESSAGES:
                        call.cancel()
                        break
            except asyncio.CancelledError:
                if len(chunks) < STREAM_MAX_MESSAGES:
                    raise
            code = await call.code()
            return Answer(
                code,
                await call.details() or "",
                _trailers(await call.trailing_metadata()),
                b"".join(chunks),
                len(chunks),
            )
        unary = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
        reply: bytes = await unary(data, metadata=case.metadata, timeout=UNARY_DEADLINE_S)
        return Answer(grpc.StatusCode.OK, payload=reply, messages=1)
    except grpc.aio.AioRpcError as exc:
        return Answer(exc.code(), exc.details() or "", _trailers(exc.trailing_metadata()))
    except Exception as exc:  # our side failed: counted, never the daemon's fault
        return Answer(grpc.StatusCode.UNKNOWN, client_error=f"{type(exc).__name__}: {exc}"[:200])


# -- classification --------------------------------------------------------------------------


@dataclass(slots=True)
class Verdict:
    internal: bool = False
    auth_bypass: bool = False
    unnamed: bool = False
    timeout: bool = False
    unexpected: bool = False
    client_error: bool = False
    leaks: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        out = [
            name
            for name, hit in (
                ("internal_error", self.internal),
                ("auth_bypass", self.auth_bypass),
                ("unnamed_error", self.unnamed),
                ("timeout", self.timeout),
                ("unexpected_status", self.unexpected),
                ("client_error", self.client_error),
            )
            if hit
        ]
        if self.leaks:
            out.append("cross_tenant_leak")
        return out


def classify(case: Case, answer: Answer, tenants: Sequence[TenantPools]) -> Verdict:
    """What is wrong with ``answer`` to ``case`` (nothing, for a clean refusal or a clean OK)."""
    v = Verdict()
    if answer.client_error:
        v.client_error = True
        return v
    code = answer.code
    if code in _INTERNAL:
        v.internal = True
    elif code == grpc.StatusCode.OK:
        pass
    elif code in _CLEAN:
        from_grpc_limit = code == grpc.StatusCode.RESOURCE_EXHAUSTED and _GRPC_SIZE_REFUSAL in answer.details
        if not answer.details.strip() or ("sclate-reason" not in answer.trailers and not from_grpc_limit):
            v.unnamed = True
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
        waits = case.method.name == "SaveSnapshot" and getattr(case.request, "at_turn_boundary", False)
        v.timeout = not (case.method.server_streaming or waits)
    elif code == grpc.StatusCode.CANCELLED and case.method.server_streaming:
        pass
    else:
        v.unexpected = True
    if case.strategy == "auth":
        # Any answer but UNAUTHENTICATED lets the caller in; none in time (a deadline) is no answer.
        refused = (
            code == grpc.StatusCode.UNAUTHENTICATED or code in _INTERNAL or code in _UNSETTLED - {grpc.StatusCode.OK}
        )
        v.auth_bypass = answer.messages > 0 or not refused
    sender = case.tenant
    if not sender:
        return v
    request = case.request_bytes()
    seen = answer.payload + answer.details.encode() + json.dumps(answer.trailers).encode()
    others = [t for t in tenants if t.tenant != sender]
    for other in others:
        for secret in sorted(other.secrets):
            s = secret.encode()
            if s in seen and s not in request:
                v.leaks.append(f"{other.tenant}'s {secret!r}")
        names_other = any(s.encode() in request for s in other.secrets)
        crossing = case.strategy == "cross" and names_other and case.method.name not in _OPEN_TO_ANY
        if crossing and code == grpc.StatusCode.OK:
            v.leaks.append(f"OK for a request naming {other.tenant}'s resources")
    return v


# -- the campaign ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Findings:
    """Failures grouped by what they are (kind, method, fields), the first of each kept."""

    first: dict[tuple[str, str, str], str] = field(default_factory=dict)
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)

    def add(self, kind: str, case: Case | None, detail: str) -> None:
        method = case.method.name if case is not None else "-"
        what = (",".join(case.fuzzed) or case.note or case.strategy) if case is not None else ""
        key = (kind, method, what[:80])
        self.counts[key] += 1
        if key not in self.first:
            where = case.describe() if case is not None else "campaign"
            self.first[key] = f"{kind}: {where}: {detail}"[:400]

    def listing(self) -> list[str]:
        out = []
        for key, text in self.first.items():
            n = self.counts[key]
            out.append(text if n == 1 else f"{text} (x{n})")
        return out[:MAX_FINDINGS]


@dataclass(slots=True)
class CampaignResult:
    cases: int = 0
    crashes: int = 0
    internal_errors: int = 0
    state_changed_on_error: int = 0
    cross_tenant_leaks: int = 0
    auth_bypasses: int = 0
    unnamed_errors: int = 0
    timeouts: int = 0
    unexpected_status: int = 0
    client_errors: int = 0
    state_checked: int = 0
    runs_failed_internally: int = 0
    daemon_log_tracebacks: int = 0
    status: Counter[str] = field(default_factory=Counter)
    by_method: Counter[str] = field(default_factory=Counter)
    by_strategy: Counter[str] = field(default_factory=Counter)
    findings: _Findings = field(default_factory=_Findings)

    def figures(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "crashes": self.crashes,
            "internal_errors": self.internal_errors,
            "state_changed_on_error": self.state_changed_on_error,
            "cross_tenant_leaks": self.cross_tenant_leaks,
            "auth_bypasses": self.auth_bypasses,
            "unnamed_errors": self.unnamed_errors,
            "timeouts": self.timeouts,
            "unexpected_status": self.unexpected_status,
            "client_errors": self.client_errors,
            "state_checked": self.state_checked,
            "runs_failed_internally": self.runs_failed_internally,
            "daemon_log_tracebacks": self.daemon_log_tracebacks,
            "status": dict(sorted(self.status.items())),
            "by_method": dict(sorted(self.by_method.items())),
            "by_strategy": dict(sorted(self.by_strategy.items())),
            "findings": self.findings.listing(),
        }


_COUNTERS = {
    "internal_error": "internal_errors",
    "auth_bypass": "auth_bypasses",
    "unnamed_error": "unnamed_errors",
    "timeout": "timeouts",
    "unexpected_status": "unexpected_status",
    "client_error": "client_errors",
    "cross_tenant_leak": "cross_tenant_leaks",
}
"""Each problem of a :class:`Verdict` and the CampaignResult count it adds to."""


def _count(result: CampaignResult, case: Case, answer: Answer, verdict: Verdict) -> None:
    result.cases += 1
    result.status[answer.code.name] += 1
    result.by_method[case.method.name] += 1
    result.by_strategy[case.strategy] += 1
    for kind in verdict.problems():
        counter = _COUNTERS[kind]
        setattr(result, counter, getattr(result, counter) + 1)
        if kind == "client_error":
            detail = answer.client_error
        elif kind == "cross_tenant_leak":
            detail = f"{answer.code.name}: " + "; ".join(verdict.leaks[:3])
        else:
            detail = f"{answer.code.name} {answer.details[:160]!r}"
        result.findings.add(kind, case, detail)


async def run_campaign(
    target: FuzzTarget,
    tenants: Sequence[TenantPools],
    *,
    seed: int,
    requests: int,
    concurrency: int = CONCURRENCY,
    check_fraction: float = 0.3,
    progress: Callable[[str], None] = lambda _: None,
) -> CampaignResult:
    """Send ``requests`` generated cases to ``target`` and classify every answer.

    Cases go in batches of ``BATCH``: first the batch's unchecked cases,
    ``concurrency`` at a time, then its checked ones alone, one after the other
    (the store read after one is the read before the next, unless it succeeded);
    then the daemon must still serve a write (:meth:`FuzzTarget.alive`)."""
    gen = RequestGenerator(seed, tenants, check_fraction=check_fraction)
    result = CampaignResult()
    channel = grpc.aio.insecure_channel(target.address, options=CHANNEL_OPTIONS)
    sem = asyncio.Semaphore(concurrency)

    def record(case: Case, answer: Answer) -> None:
        _count(result, case, answer, classify(case, answer, tenants))

    async def one(case: Case) -> None:
        async with sem:
            answers = await asyncio.gather(*(send(channel, case) for _ in range(case.copies)))
        for answer in answers:
            record(case, answer)

    try:
        for start in range(0, requests, BATCH):
            cases = [gen.case(i) for i in range(start, min(start + BATCH, requests))]
            await asyncio.gather(*(one(c) for c in cases if not c.check_state))
            before: StoreState | None = None
            for case in (c for c in cases if c.check_state):
                if before is None:
                    before = await target.state()
                answer = await send(channel, case)
                record(case, answer)
                if answer.code in _UNSETTLED or answer.client_error:
                    before = None  # it changed the state, as it may (or may have: no answer in time)
                    continue
                await asyncio.sleep(SETTLE_S)
                after = await target.state()
                result.state_checked += 1
                changes = state_changes(before, after)
                if changes:
                    result.state_changed_on_error += 1
                    what = f"{answer.code.name}; " + "; ".join(changes[:3])
                    result.findings.add("state_changed_on_error", case, what)
                before = after
            problem = await target.alive(channel)
            if problem:
                # Counted, and started again on the same state to go on.
                result.crashes += 1
                result.findings.add("crash", None, f"after cases {cases[0].index}..{cases[-1].index}: {problem}")
                await channel.close()
                await target.restart()
                channel = grpc.aio.insecure_channel(target.address, options=CHANNEL_OPTIONS)
            progress(f"fuzz api: {result.cases}/{requests} requests")
        failed = await target.runs_failed_internally()
        result.runs_failed_internally = len(failed)
        for line in failed:
            result.internal_errors += 1
            result.findings.add("internal_error", None, f"a run ended FAILED: {line}")
        result.daemon_log_tracebacks = target.log_tracebacks()
    finally:
        await channel.close()
    return result


# -- the real daemon -----------------------------------------------------------------------------


def _nonce(rng: secrets.SystemRandom) -> str:
    return rng.choice(string.ascii_lowercase) + "".join(
        rng.choice(string.ascii_lowercase + string.digits) for _ in range(7)
    )


class DaemonTarget:
    """A ``sclated`` process with a tokens file; its SQLite store read read-only."""

    def __init__(self, state_dir: Path, tokens: Mapping[str, str]) -> None:
        self.state_dir = state_dir
        self.tokens_file = state_dir.parent / "tokens"
        self.tokens_file.write_text("".join(f"{tok} {tenant}\n" for tenant, tok in tokens.items()))
        self._proc: asyncio.subprocess.Process | None = None
        self._address = ""
        self._probes = 0
        token = next(iter(tokens.values()))
        self.health_metadata = (("authorization", f"Bearer {token}"),)

    @property
    def address(self) -> str:
        return self._address

    async def start(self) -> None:
        from sclated.bench._daemon import start_daemon_process

        self._proc, ready = await start_daemon_process(
            self.state_dir,
            "--tokens-file",
            str(self.tokens_file),
            "--unix-socket",
            "-",
            "--no-reports",
            "--log-level",
            "warning",
            "--max-running",
            "12",
            "--tenant-max-running",
            "6",
            "--drain-grace-s",
            "2",
        )
        self._address = ready["tcp"]

    async def stop(self) -> None:
        from sclated.bench._cli import end_group

        if self._proc is not None:
            await asyncio.shield(end_group(self._proc, sig=signal.SIGTERM, grace_s=20))
            self._proc = None

    async def alive(self, channel: grpc.aio.Channel) -> str:
        """The process runs and creates a small run within HEALTH_DEADLINE_S (a daemon whose
        writes are stuck still answers reads)."""
        from sclate_api.v1 import sclate_pb2 as pb

        if self._proc is None or self._proc.returncode is not None:
            return f"the daemon exited ({None if self._proc is None else self._proc.returncode})"
        self._probes += 1
        run = pb.Run(benchmark=pb.BenchmarkSpec(name="synthetic"), agent=pb.AgentSpec(harness="scripted"))
        run.benchmark.options.update({"days": 1, "events_per_day": 1})
        run.agent.options.update({"turn_ms": 0})
        request = pb.CreateRunRequest(run=run, run_id=f"health-{self._probes}").SerializeToString()
        create = channel.unary_unary("/sclate.v1.Sclate/CreateRun", request_serializer=None, response_deserializer=None)
        try:
            await create(request, metadata=self.health_metadata, timeout=HEALTH_DEADLINE_S)
        except grpc.aio.AioRpcError as exc:
            return f"a small CreateRun got {exc.code().name} {(exc.details() or '')[:120]}"
        return ""

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    def _read(self, sql: str) -> list[tuple[Any, ...]]:
        db = self.state_dir / "sclated.db"
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()

    def _state(self) -> StoreState:
        runs = {
            str(n): RunState(str(s), str(p), str(st))
            for n, s, p, st in self._read("SELECT name, spec, parent, state FROM runs")
        }
        snaps = frozenset(str(n) for (n,) in self._read("SELECT name FROM snapshots"))
        restores = frozenset(str(r) for (r,) in self._read("SELECT run FROM restores"))
        return StoreState(runs, snaps, restores)

    async def state(self) -> StoreState:
        return await asyncio.to_thread(self._state)

    async def runs_failed_internally(self) -> list[str]:
        rows = await asyncio.to_thread(
            self._read, "SELECT name, reason FROM runs WHERE state = 'FAILED' AND reason LIKE 'internal error%'"
        )
        return [f"{n}: {str(r)[:200]}" for n, r in rows]

    def log_tracebacks(self) -> int:
        try:
            return (
                (self.state_dir / "sclated.log").read_text(errors="replace").count("Traceback (most recent call last)")
            )
        except OSError:
            return 0


async def _until(stub: Any, name: str, md: Any, stop: Callable[[Any], bool]) -> None:
    from sclate_api.v1 import sclate_pb2 as pb

    async for ev in stub.WatchRun(pb.WatchRunRequest(name=name), metadata=md):
        if stop(ev):
            return


def _labels(nonce: str) -> dict[str, str]:
    return {"team": f"{nonce}-team", "owner": f"{nonce}-owner"}


def _spec(nonce: str, days: int, turn_ms: int) -> Any:
    from sclate_api.v1 import sclate_pb2 as pb

    run = pb.Run(benchmark=pb.BenchmarkSpec(name="synthetic"), agent=pb.AgentSpec(harness="scripted"))
    run.benchmark.options.update({"days": days, "events_per_day": 2})
    run.agent.options.update({"turn_ms": turn_ms})
    run.labels.update(_labels(nonce))
    return run


async def start_paused(channel: grpc.aio.Channel, token: str, nonce: str) -> str:
    """A long run, left RUNNING: the daemon's restart makes it INTERRUPTED (for ResumeRun)."""
    from sclate_api.v1 import sclate_pb2 as pb
    from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

    stub = pb_grpc.SclateStub(channel)
    md = (("authorization", f"Bearer {token}"),)
    run = await stub.CreateRun(pb.CreateRunRequest(run=_spec(nonce, 365, 2000), run_id=f"{nonce}-paused"), metadata=md)
    await _until(stub, run.name, md, lambda ev: ev.WhichOneof("kind") == "turn")
    return str(run.name)


async def seed_tenant(
    channel: grpc.aio.Channel, tenant: str, token: str, nonce: str, state_dir: Path, paused: Sequence[str] = ()
) -> TenantPools:
    """Give ``tenant`` state to find (runs, snapshots, a branch group), all named with ``nonce``;
    ``paused``: its INTERRUPTED runs."""
    from sclate_api.v1 import sclate_pb2 as pb
    from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

    stub = pb_grpc.SclateStub(channel)
    md = (("authorization", f"Bearer {token}"),)
    labels = _labels(nonce)

    def spec(days: int, turn_ms: int) -> Any:
        return _spec(nonce, days, turn_ms)

    def ended(ev: Any) -> bool:
        return bool(ev.WhichOneof("kind") == "state" and ev.state.state not in (pb.PENDING, pb.RUNNING))

    live = await stub.CreateRun(pb.CreateRunRequest(run=spec(365, 2000), run_id=f"{nonce}-live"), metadata=md)
    snapshots: list[str] = []
    short: list[str] = [*paused]
    for k in range(2):
        run = await stub.CreateRun(pb.CreateRunRequest(run=spec(2, 300), run_id=f"{nonce}-done-{k}"), metadata=md)
        short.append(run.name)
        await _until(stub, run.name, md, lambda ev: ev.WhichOneof("kind") == "verdict" or ended(ev))
        snap = await stub.SaveSnapshot(
            pb.SaveSnapshotRequest(run=run.name, snapshot_id=f"{nonce}-snap-{k}"), metadata=md
        )
        snapshots.append(snap.name)
        await _until(stub, run.name, md, ended)
    group = await stub.BranchRun(
        pb.BranchRunRequest(snapshot=snapshots[0], count=2, group_id=f"{nonce}-grp", labels=labels), metadata=md
    )
    for r in group.runs:
        short.append(r.name)
        await _until(stub, r.name, md, ended)
    await _until(stub, live.name, md, lambda ev: ev.WhichOneof("kind") == "turn")
    return TenantPools(
        tenant=tenant,
        token=token,
        nonce=nonce,
        runs=tuple(short),
        live_runs=(live.name,),
        snapshots=tuple(snapshots),
        groups=(group.group,),
        label_values=tuple(labels.values()),
        run_dirs=(str(state_dir / "runs" / tenant), str(state_dir / "runs" / tenant / f"{nonce}-live")),
    )


async def run(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The API part (see the module's docstring): its figures, ``cases`` = requests sent."""
    import sys

    requests = int(getattr(args, "requests", None) or 10_000)
    quiet = bool(getattr(args, "json", False))

    def progress(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    rng = secrets.SystemRandom()
    nonces = [_nonce(rng), _nonce(rng)]
    tokens = {f"tenant-{n}": secrets.token_hex(16) for n in nonces}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sclate-fuzz-") as tmp:
        state_dir = Path(tmp) / "state"
        target = DaemonTarget(state_dir, tokens)
        await target.start()
        try:
            async with grpc.aio.insecure_channel(target.address, options=CHANNEL_OPTIONS) as ch:
                paused = await asyncio.gather(
                    *(start_paused(ch, tok, n) for tok, n in zip(tokens.values(), nonces, strict=True))
                )
            await target.restart()  # SIGTERM: those runs are INTERRUPTED now
            async with grpc.aio.insecure_channel(target.address, options=CHANNEL_OPTIONS) as ch:
                tenants = await asyncio.gather(
                    *(
                        seed_tenant(ch, t, tok, n, state_dir, (p,))
                        for (t, tok), n, p in zip(tokens.items(), nonces, paused, strict=True)
                    )
                )
            seeded_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            result = await run_campaign(target, tenants, seed=seed, requests=requests, progress=progress)
            campaign_s = time.perf_counter() - t1
        finally:
            await target.stop()
    out = result.figures()
    out.update(
        {
            "seed_s": round(seeded_s, 2),
            "campaign_s": round(campaign_s, 2),
            "requests_per_s": round(result.cases / campaign_s, 1) if campaign_s else 0.0,
            "state_check_sampling": "every erroring mutating request that names the other tenant's resources, "
            "and 30% of the other mutating requests, each run alone with the store read before and after",
            "tenants": 2,
        }
    )
    return out
