"""One run's sandbox, wired: container, model bridge, control socket, capture, time.

A :class:`SandboxSession` owns everything between a run and the harness in
its container, and nothing harness-specific:

- the run's control directory (a short host path, mounted at ``/run/sclate``)
  with its control socket (capture records and clock leases from the proxy,
  ``sclate-wait``) and the libfaketime timestamp file;
- the model bridge from the sandbox's model socket to the run's endpoint (the
  embedded model is found again at each connection, so it may restart);
- the container: created fresh, adopted after a daemon restart, or restored
  from a snapshot; the capture proxy running in it;
- simulated time published to it on every jump, in the clock's mode;
- at close: the proxy drained (what it could not deliver is stored here) and
  the container removed, or left running for a resumed run to adopt.

The harness gets a :class:`adapters.SandboxAccess` view of it (commands,
channels, the proxy's endpoints). Harnesses declare what they are
(:class:`adapters.HarnessDeclaration`); the runs room puts the two together.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import hashlib
import json
import logging
import os
import secrets
import shlex
import shutil
import signal
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from adapters import ExecOutput, LineChannel, ProxyEndpoints, RunClock
from sclated.capture import (
    DEFAULT_CALL_TTL_NS,
    NO_CAPTURE_OBSERVER,
    CallRecord,
    CaptureObserver,
    CaptureSink,
    LeaseHolder,
)
from sclated.clock import MAX_SIM_NS
from sclated.errors import FailedPrecondition, InvalidArgument, NotFound, RuntimeUnavailable, SclateError
from sclated.model import ModelStatus
from sclated.runtime import (
    LABEL_ROLE,
    LABEL_RUN,
    LABEL_TENANT,
    DockerRuntime,
    ExecResult,
    Limits,
    ModelBridge,
    Runtime,
    Sandbox,
    SandboxManager,
    SandboxSpec,
    SnapshotInfo,
    image_ref,
    snapshot,
    untar_dir,
)
from sclated.sandbox._control import ControlConnection, ControlServer, current_connection
from sclated.sandbox._disk_watch import (
    DEFAULT_DISK_CHECK_S,
    DEFAULT_DISK_LIMIT_GB,
    DiskVerdict,
    DiskWatchdog,
    SandboxDiskMeter,
)
from sclated.sandbox._observer import NO_SANDBOX_OBSERVER, SandboxObserver
from sclated.sandbox._process_probe import PROBE_SCRIPT, ProcessProbe, parse_probe
from sclated.sandbox._proxy import (
    PROXY_LOG,
    ROLE_PORTS,
    SPOOL_DIR,
    endpoints_for,
    mitmdump_command,
    upstream_env,
)

__all__ = [
    "CallStore",
    "ModelService",
    "SandboxOptions",
    "SandboxServices",
    "SandboxSession",
    "SessionStart",
    "short_sockets_dir",
]

log = logging.getLogger("sclated.sandbox")

WaitHandler = Callable[[int], Awaitable[int]]
WorldHandler = Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]
"""A benchmark world's tools for the sandbox's ``are`` command (see adapters.AgentEnvironment.world)."""
"""``until_ns`` -> the simulated time the waiter woke at (see RunLoop turns)."""


class SessionStart(enum.Enum):
    FRESH = "fresh"
    """A new container (an old one of the run, if any, is removed)."""
    ADOPT = "adopt"
    """The run's container outlived the previous daemon process: take it over."""
    RESTORE = "restore"
    """A new container from a snapshot's committed image and archives."""


@dataclass(frozen=True, slots=True)
class SandboxOptions:
    """The run options every sandboxed harness accepts (the rest are the harness's own)."""

    probe: bool = True
    """Check simulated time inside when the container starts."""
    model_grace_s: float = 120.0
    """How long the model endpoint may stay unreachable before the run fails."""
    call_lease_ttl_s: float = DEFAULT_CALL_TTL_NS / 1e9
    """How long a model call's clock lease lasts without the call's end (the proxy died,
    the sandbox froze): then it expires, is released and reported."""

    disk_limit_gb: float = DEFAULT_DISK_LIMIT_GB
    """What the sandbox may write (its writable layer and its volumes), in GiB: the engine's
    per-container size where it can set one, and the disk watchdog in any case for what the
    engine does not bound; over it, the sandbox is stopped and the run fails naming it."""
    disk_check_interval_s: float = DEFAULT_DISK_CHECK_S
    """How often the disk watchdog measures (less often when a measurement is slow)."""

    KEYS = frozenset({"probe", "model_grace_s", "call_lease_ttl_s", "disk_limit_gb", "disk_check_interval_s"})
    MIN_DISK_GB = 1 / 64
    """16 MiB, the least a sandbox can start with (Limits.disk_bytes' minimum)."""
    MAX_DISK_GB = 65_536.0

    @property
    def disk_limit_bytes(self) -> int:
        return int(self.disk_limit_gb * (1 << 30))

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> SandboxOptions:
        probe = options.get("probe", True)
        if not isinstance(probe, bool):
            raise InvalidArgument("probe must be true or false", field="run.agent.options.probe")
        grace = options.get("model_grace_s", 120)
        if not isinstance(grace, int | float) or isinstance(grace, bool) or not 1 <= grace <= 86_400:
            raise InvalidArgument("model_grace_s must be in [1, 86400]", field="run.agent.options.model_grace_s")
        ttl = options.get("call_lease_ttl_s", DEFAULT_CALL_TTL_NS / 1e9)
        if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not 1 <= ttl <= 86_400:
            raise InvalidArgument("call_lease_ttl_s must be in [1, 86400]", field="run.agent.options.call_lease_ttl_s")
        disk = options.get("disk_limit_gb", DEFAULT_DISK_LIMIT_GB)
        if not _number_in(disk, cls.MIN_DISK_GB, cls.MAX_DISK_GB):
            raise InvalidArgument(
                f"disk_limit_gb must be a number of GiB in [{cls.MIN_DISK_GB}, {cls.MAX_DISK_GB:.0f}] "
                f"(16 MiB to 64 TiB: what the sandbox may write), not {disk!r}",
                field="run.agent.options.disk_limit_gb",
            )
        every = options.get("disk_check_interval_s", DEFAULT_DISK_CHECK_S)
        if not _number_in(every, 0.5, 3600):
            raise InvalidArgument(
                f"disk_check_interval_s must be a number of seconds in [0.5, 3600], not {every!r}",
                field="run.agent.options.disk_check_interval_s",
            )
        return cls(
            probe=probe,
            model_grace_s=float(grace),
            call_lease_ttl_s=float(ttl),
            disk_limit_gb=float(disk),
            disk_check_interval_s=float(every),
        )


def _number_in(value: object, low: float, high: float) -> bool:
    """A real number (not a bool) in [low, high]; NaN is not."""
    return isinstance(value, int | float) and not isinstance(value, bool) and low <= value <= high


def short_sockets_dir(state_dir: Path) -> Path:
    """$RUNTIME_DIRECTORY under systemd, else the temp dir; one per state directory.

    Unix socket paths are limited to 107 bytes whatever the state directory
    is, so control directories live under a short path of their own.
    """
    base = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0] or tempfile.gettempdir()
    return Path(base) / f"sclated-{hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]}"


class CallStore(Protocol):
    """Where a run's captured model calls go: the daemon's store (``sclated.store.Store``)
    or, on a cluster node, the run's record stream to the control plane."""

    async def put_call(self, run: str, call_id: str, role: str, record: dict[str, Any]) -> bool:
        """Store a call record; False when that call id was already stored (a re-delivery)."""
        ...

    async def calls(self, run: str) -> list[dict[str, Any]]:
        """The run's call records in the order they were first stored."""
        ...


class ModelService(Protocol):
    """The embedded model as sandboxes use it: ``sclated.model.EmbeddedModel`` in the
    daemon, or on a cluster node a client of the node's one model server."""

    @property
    def status(self) -> ModelStatus: ...

    async def url(self, *, timeout_s: float | None = None) -> str: ...

    async def endpoint(self) -> tuple[str, int, bool]: ...

    async def explain_drop(self, *, wait_s: float = 2.0) -> str | None: ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class SandboxServices:
    """Daemon-wide parts sandboxed runs share; the engine is connected on first use."""

    state_dir: Path
    daemon_id: str
    store: CallStore
    model: ModelService
    sockets_dir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "sclated-sockets")
    disk_by_engine: bool | None = None
    """Whether the engine bounds a container's writable layer (StorageOpt size): learnt from
    the first sandbox that asks (None until then); where it cannot, the disk watchdog does."""
    observer: SandboxObserver = NO_SANDBOX_OBSERVER
    """Told how each sandbox start ended and how long it took."""
    capture_observer: CaptureObserver = NO_CAPTURE_OBSERVER
    """Told of each model call the sandboxes' capture proxies hand over (once per call)."""
    _runtime: Runtime | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def runtime(self) -> Runtime:
        async with self._lock:
            if self._runtime is None:
                try:
                    self._runtime = await DockerRuntime.connect(self.daemon_id)
                except SclateError as exc:
                    raise RuntimeUnavailable(
                        f"the Docker engine is not available for sandboxed agents: {exc.message}. "
                        "Start it (`make system` does) and check `sclated doctor`."
                    ) from exc
            return self._runtime

    def control_dir(self, run_key: str) -> Path:
        return self.sockets_dir / hashlib.sha256(run_key.encode()).hexdigest()[:16]

    async def close(self) -> None:
        if self._runtime is not None:
            await self._runtime.close()
            self._runtime = None
        await self.model.close()
        # The per-daemon directory of control directories goes once no run keeps one
        # (a sandbox left for a resumed run keeps its own, and so this one).
        with contextlib.suppress(OSError):
            await asyncio.to_thread(self.sockets_dir.rmdir)


class _StoreRecords:
    """The capture sink's RecordStore, on the services' call store."""

    def __init__(self, store: CallStore, run_key: str) -> None:
        self._store = store
        self._run_key = run_key

    async def put(self, record: CallRecord) -> bool:
        return await self._store.put_call(self._run_key, record.call_id, record.role, record.to_json())

    async def list(self, run: str) -> list[CallRecord]:
        return [CallRecord.from_json(r) for r in await self._store.calls(self._run_key)]


@dataclass(frozen=True, slots=True)
class SessionConfig:
    run_key: str
    tenant: str
    run_id: str
    image: str
    """An image recipe name (resolved to its content-hashed tag)."""
    model_base_url: str
    """Empty: the daemon's embedded model."""
    model_name: str
    limits: Limits
    options: SandboxOptions
    state_dirs: tuple[str, ...] = ("/workspace", "/memory")
    model_api_key_env: str = ""
    """The NAME of the daemon's environment variable with the endpoint's key."""
    model_skip_token_ids: bool = False
    model_sampling_seed: int | None = None
    """Each call's seed is derived from this (a branch group's runs each have their own)."""


class _Channel:
    """A LineChannel over a runtime exec stream."""

    def __init__(self, stream: Any, argv: Sequence[str]) -> None:
        self._stream = stream
        self.argv = tuple(argv)

    async def exit_code(self) -> int | None:
        """How its process ended; None while it runs (or when the engine cannot say)."""
        code: int | None = await self._stream.exit_code()
        return code

    async def send(self, line: str) -> None:
        await self._stream.send(line)

    async def readline(self) -> str:
        line: str = await self._stream.readline()
        return line

    async def close(self) -> None:
        await self._stream.close()


class FreezeGate:
    """Commands in the sandbox and its freezing for a snapshot never overlap.

    An exec whose process is being set up (``runc init``) while the container's
    freezer cgroup freezes can be frozen half-way, and the engine then hangs on
    both (seen with cgroup v1: a consolidation job started as a snapshot paused
    the sandbox); an exec into a frozen container hangs too. So a snapshot
    waits for the commands running now (``running`` holds, shared, for a whole
    command: jobs last seconds to minutes), and commands wait while it freezes
    (``frozen``, exclusive, from pause to unpause).
    """

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._running = 0
        self._freezing = False

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._freezing)
            self._running += 1
        try:
            yield
        finally:
            async with self._cond:
                self._running -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def frozen(self) -> AsyncIterator[None]:
        async with self._cond:
            # Claimed first, so commands arriving meanwhile wait instead of starving it.
            await self._cond.wait_for(lambda: not self._freezing)
            self._freezing = True
            try:
                await self._cond.wait_for(lambda: self._running == 0)
            except BaseException:
                self._freezing = False
                self._cond.notify_all()
                raise
        try:
            yield
        finally:
            async with self._cond:
                self._freezing = False
                self._cond.notify_all()


class SandboxSession:
    """The sandbox of one run (see the module docstring). Open once, close once."""

    def __init__(
        self,
        services: SandboxServices,
        config: SessionConfig,
        *,
        clock: RunClock,
        leases: LeaseHolder,
        on_wait: WaitHandler,
        fail_run: Callable[[str], None],
        on_world: WorldHandler | None = None,
    ) -> None:
        self._services = services
        self.config = config
        self._clock = clock
        self._leases = leases
        self._on_wait = on_wait
        self._on_world = on_world
        self._fail_run = fail_run
        self._secret = secrets.token_hex(16)
        self._runtime: Runtime | None = None
        self._sandbox: Sandbox | None = None
        self._bridge: ModelBridge | None = None
        self._control: ControlServer | None = None
        self._sink: CaptureSink | None = None
        self._watch: asyncio.Task[None] | None = None
        self._disk_watch: DiskWatchdog | None = None
        self._layer_by_engine = False
        """The engine bounds this sandbox's writable layer (so the watchdog measures volumes only)."""
        self._endpoint_label = ""
        self.endpoints: ProxyEndpoints = endpoints_for(config.run_id, self._secret, config.model_name)
        self.capture_report: dict[str, Any] = {}
        """How the proxy's records were handed over at close (calls_lost, recovered, drain)."""
        self._gate = FreezeGate()
        self._closing = False
        self._proxy_checks: set[asyncio.Task[None]] = set()
        self.proxy_restarts = 0
        """Times the capture proxy was found dead (its connection closed) and started again."""
        self._channels: list[_Channel] = []

    # -- opening ----------------------------------------------------------------------------
    @property
    def control_dir(self) -> Path:
        return self._services.control_dir(self.config.run_key)

    async def open(
        self,
        start: SessionStart,
        *,
        env: Callable[[ProxyEndpoints], Mapping[str, str]],
        snapshot_dir: Path | None = None,
    ) -> None:
        """Start the control socket, the bridge and the container; publish time; wait for the proxy.

        ``env``: the harness's environment for the proxy's endpoints (every
        process started in the sandbox gets it). Nothing is left behind on failure.
        """
        if self._clock.mode_name == "realtime" and self._clock.rate != 1.0:
            raise InvalidArgument(
                f"a REALTIME clock at rate {self._clock.rate} cannot drive a sandbox: libfaketime's speed "
                "factor counts from each process's own start, so processes in one sandbox would disagree; "
                "use a HYBRID clock, or REALTIME at rate 1",
                field="run.clock.rate",
            )
        observer, began = self._services.observer, time.monotonic()
        try:
            await self._open(start, env=env, snapshot_dir=snapshot_dir)
        except BaseException as exc:
            outcome = "cancelled" if isinstance(exc, asyncio.CancelledError) else "failed"
            observer.on_sandbox_start(start.value, outcome, time.monotonic() - began)
            await asyncio.shield(self.close(keep=start is SessionStart.ADOPT))
            raise
        observer.on_sandbox_start(start.value, "started", time.monotonic() - began)

    async def _open(
        self, start: SessionStart, *, env: Callable[[ProxyEndpoints], Mapping[str, str]], snapshot_dir: Path | None
    ) -> None:
        cfg = self.config
        runtime = self._runtime = await self._services.runtime()
        manager = SandboxManager(runtime)
        paths = manager.paths_for(self.control_dir)
        await asyncio.to_thread(paths.create)
        await self._start_bridge(paths.model_socket)
        await self.start_control(paths.control_socket)
        upstream = await asyncio.to_thread(
            upstream_env,
            paths.root,
            cfg.model_api_key_env,
            cfg.model_skip_token_ids,
            os.environ,
            cfg.model_sampling_seed,
            not cfg.model_base_url,
        )
        spec = manager.spec_for(
            image=await _image_ref(cfg.image),
            run=cfg.run_id,
            tenant=cfg.tenant,
            run_dir=self.control_dir,
            env={
                **env(self.endpoints),
                "SCLATE_RUN_SECRET": self._secret,
                "SCLATE_SPOOL": SPOOL_DIR,
                # What a call asking for a role's model (sclate-role-aux) is forwarded asking for.
                "SCLATE_RUN_MODEL": self.endpoints.model,
                **upstream,
            },
            limits=cfg.limits
            if cfg.limits.disk_bytes is not None
            else dataclasses.replace(cfg.limits, disk_bytes=cfg.options.disk_limit_bytes),
            command=["sh", "-c", f"{mitmdump_command()} >{PROXY_LOG} 2>&1 & exec sleep infinity"],
        )
        existing = [
            c
            for c in await runtime.list_containers({LABEL_RUN: cfg.run_id})
            if c.labels.get(LABEL_TENANT) == cfg.tenant
        ]
        # The run's other containers (a benchmark's task containers) are never the agent's.
        own = [c for c in existing if c.labels.get(LABEL_ROLE) == spec.role]
        if start is SessionStart.ADOPT and own and own[0].state in ("running", "paused"):
            # The container outlived the previous daemon process: the workspace
            # and memory are exactly as the agent left them.
            self._sandbox = await manager.attach(own[0], spec, self.control_dir)
            if own[0].state == "paused":
                await self._sandbox.unpause()
            for stale in existing:
                if stale is not own[0]:
                    with contextlib.suppress(SclateError):
                        await runtime.remove(stale.id)
        else:
            for stale in existing:
                with contextlib.suppress(SclateError):
                    await runtime.remove(stale.id)
            if start is SessionStart.RESTORE:
                if snapshot_dir is None:
                    raise InvalidArgument("a restore needs a snapshot directory", field="snapshot_dir")
                info = await SnapshotInfo.load(snapshot_dir / "sandbox")
                self._sandbox = await self._bounded(
                    lambda s: manager.restore(
                        info, s, self.control_dir, sim_ns=self._clock.now(), probe=cfg.options.probe
                    ),
                    spec,
                )
            else:
                self._sandbox = await self._bounded(
                    lambda s: manager.create(s, self.control_dir, sim_ns=self._clock.now(), probe=cfg.options.probe),
                    spec,
                )
        await self.publish_time(self._clock.now())
        self._clock.add_publisher(self.publish_time)
        await self._wait_for_proxy()
        self._watch = asyncio.get_running_loop().create_task(self._watch_model(), name=f"model-watch:{cfg.run_key}")
        self._start_disk_watch(self._sandbox.spec)

    async def _bounded(self, make: Callable[[SandboxSpec], Awaitable[Sandbox]], spec: SandboxSpec) -> Sandbox:
        """``make(spec)`` with the engine bounding the writable layer where it can; where it
        refuses (overlay2 on anything but xfs with pquota), without: the disk watchdog bounds
        it then. A limit the run's config set itself (Limits.disk_bytes) is never dropped."""
        services = self._services
        if spec.limits.disk_bytes is not None and services.disk_by_engine is not False:
            try:
                sandbox = await make(spec)
            except FailedPrecondition as exc:
                if exc.reason != "DISK_LIMIT_UNSUPPORTED" or self.config.limits.disk_bytes is not None:
                    raise
                services.disk_by_engine = False
                log.info("the engine cannot bound a sandbox's disk (%s): the disk watchdog does", exc.message)
            else:
                services.disk_by_engine = True
                self._layer_by_engine = True
                return sandbox
        return await make(dataclasses.replace(spec, limits=dataclasses.replace(spec.limits, disk_bytes=None)))

    def _start_disk_watch(self, spec: SandboxSpec) -> None:
        """Watch what the sandbox writes where the engine does not bound it: its writable
        layer (unless the engine does) and its writable volumes."""
        runtime, opts = self._runtime, self.config.options
        assert runtime is not None and self._sandbox is not None
        volumes = tuple(v.target for v in spec.volumes if not v.read_only)
        if self._layer_by_engine and not volumes:
            return
        sandbox_id = self._sandbox.id

        async def run(argv: Sequence[str], timeout_s: float) -> ExecResult:
            async with self._gate.running():  # never into a sandbox frozen for a snapshot
                return await runtime.exec(sandbox_id, list(argv), timeout_s=timeout_s)

        meter = SandboxDiskMeter(runtime, sandbox_id, volumes=volumes, measure_layer=not self._layer_by_engine, run=run)
        self._disk_watch = DiskWatchdog(
            meter,
            limit_bytes=opts.disk_limit_bytes,
            interval_s=opts.disk_check_interval_s,
            on_over=self._disk_over,
            name=f"run {self.config.run_key}",
        )
        self._disk_watch.start()

    async def _disk_over(self, verdict: DiskVerdict) -> None:
        """The sandbox wrote past its disk limit: the run fails naming it, and every process
        in the sandbox is killed (the container stays, stopped, until close removes it)."""
        self._fail_run(verdict.reason)
        sandbox, runtime = self._sandbox, self._runtime
        if sandbox is not None and runtime is not None:
            try:
                await runtime.stop(sandbox.id, grace_s=0)
            except SclateError as exc:
                log.error("run %s: stopping the sandbox over its disk limit failed: %s", self.config.run_key, exc)

    async def _start_bridge(self, socket_path: Path) -> None:
        cfg, model = self.config, self._services.model
        if cfg.model_base_url:
            parts = urlsplit(cfg.model_base_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise InvalidArgument(
                    f"model endpoint {cfg.model_base_url!r} is not an http(s) URL", field="run.agent.model.base_url"
                )
            port = parts.port or (443 if parts.scheme == "https" else 80)
            self._bridge = ModelBridge(socket_path, parts.hostname, port, tls=parts.scheme == "https")
            self._endpoint_label = cfg.model_base_url
            self.endpoints = endpoints_for(cfg.run_id, self._secret, cfg.model_name, parts.path)
        else:
            # The embedded model may restart (on another port): found again at each connection.
            self._bridge = ModelBridge(socket_path, resolve=model.endpoint, explain_drop=model.explain_drop)
            self._endpoint_label = f"of the embedded model ({await model.url()})"
        await self._bridge.start()

    async def _wait_for_proxy(self) -> None:
        probe = (
            "import socket,sys,time\n"
            "for _ in range(300):\n"
            "    try:\n"
            f"        socket.create_connection(('127.0.0.1', {ROLE_PORTS['agent']}), 0.2).close(); sys.exit(0)\n"
            "    except OSError: time.sleep(0.05)\n"
            "sys.exit(1)\n"
        )
        sandbox = self._require()
        res = await sandbox.exec(["python3", "-c", probe], timeout_s=30)
        if res.exit_code != 0:
            tail = await sandbox.sh(f"tail -n 20 {PROXY_LOG}", timeout_s=10)
            raise FailedPrecondition(
                "the capture proxy in the sandbox did not start listening within 15 s: "
                f"{tail.stdout.decode(errors='replace').strip()[-800:]}"
            )

    async def probe_process(self, executable: str) -> ProcessProbe:
        """Which clock ``executable`` (a harness's own program) reads inside the sandbox."""
        res = await self.exec(["python3", "-c", PROBE_SCRIPT, executable], timeout_s=30)
        return parse_probe(res.output, executable)

    # -- time --------------------------------------------------------------------------------
    async def publish_time(self, sim_ns: int) -> None:
        """The sandbox's clock: flowing with the run's (HYBRID, REALTIME) or frozen (DISCRETE)."""
        sandbox = self._require()
        if self._clock.mode_name == "discrete":
            await sandbox.freeze_time(sim_ns)
        else:
            await sandbox.publish_time(sim_ns)

    # -- the control socket ----------------------------------------------------------------
    async def start_control(self, path: Path) -> None:
        """Serve the run's control socket at ``path``: capture records into the store,
        clock leases, ``sclate-wait``, the world's tools. ``open`` calls it before the
        container starts; on its own it is the socket without a container (what
        ``sclated bench fuzz`` attacks), closed by :meth:`close` as ever."""
        if self._control is not None:
            raise FailedPrecondition("the control socket is already served", reason="CONTROL_OPEN")
        self._sink = CaptureSink(
            _StoreRecords(self._services.store, self.config.run_key),
            self._leases,
            call_ttl_ns=int(self.config.options.call_lease_ttl_s * 1e9),
            observer=self._services.capture_observer,
        )
        self._control = ControlServer(path, self._handlers(), on_disconnect=self._on_disconnect)
        await self._control.start()

    def _handlers(self) -> dict[str, Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]]:
        sink, run_id = self._sink, self.config.run_id
        assert sink is not None

        async def hello(msg: Mapping[str, Any]) -> dict[str, Any]:
            return {"run": run_id}

        async def call_start(msg: Mapping[str, Any]) -> dict[str, Any]:
            # Owned by the proxy's connection: if the proxy dies, so do its calls' leases.
            return await sink.on_call_start(run_id, dict(msg), owner=current_connection())

        async def call_end(msg: Mapping[str, Any]) -> dict[str, Any]:
            return await sink.on_call_end(run_id, dict(msg))

        async def record(msg: Mapping[str, Any]) -> dict[str, Any]:
            return await sink.on_record(run_id, dict(msg))

        async def wait(msg: Mapping[str, Any]) -> dict[str, Any]:
            until, for_ns = msg.get("until_ns"), msg.get("for_ns")
            if isinstance(until, int) and not isinstance(until, bool):
                key = "until_ns"
            elif isinstance(for_ns, int) and not isinstance(for_ns, bool) and for_ns >= 0:
                key, until = "for_ns", self._clock.now() + for_ns
            else:
                raise InvalidArgument("wait needs until_ns or a non-negative for_ns (integers)", field="until_ns")
            if until > MAX_SIM_NS:
                raise InvalidArgument(
                    f"wait: {key} is past the last simulated time a run can hold ({MAX_SIM_NS} ns)", field=key
                )
            # A time already passed wakes at once (the run's wait takes it as now).
            return {"woke_ns": await self._on_wait(until)}

        async def world(msg: Mapping[str, Any]) -> dict[str, Any]:
            if self._on_world is None:
                raise FailedPrecondition(
                    "this run's benchmark has no world of apps (the `are` command is for Gaia2 runs)",
                    reason="NO_WORLD",
                )
            return await self._on_world(msg)

        return {
            "hello": hello,
            "call_start": call_start,
            "call_end": call_end,
            "record": record,
            "wait": wait,
            "world": world,
        }

    # -- what a harness may do inside (adapters.SandboxAccess) ---------------------------------
    def _require(self) -> Sandbox:
        if self._sandbox is None:
            raise FailedPrecondition("the sandbox is not running", reason="NO_SANDBOX")
        return self._sandbox

    async def exec(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 120.0,
        workdir: str | None = None,
        user: str | None = None,
    ) -> ExecOutput:
        """``user``: run as this user of the image (a server that refuses root: PostgreSQL)."""
        async with self._gate.running():
            res = await self._require().exec(list(argv), env=env, workdir=workdir, timeout_s=timeout_s, user=user)
        return ExecOutput(res.exit_code, (res.stdout + res.stderr)[-8000:].decode(errors="replace"))

    async def open_channel(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> LineChannel:
        sandbox, runtime = self._require(), self._runtime
        assert runtime is not None
        async with self._gate.running():
            channel = _Channel(await runtime.exec_stream(sandbox.id, list(argv), env=env), argv)
        self._channels = [*self._channels[-7:], channel]
        return channel

    # -- when something in the sandbox died ---------------------------------------------------
    @property
    def disk_verdict(self) -> DiskVerdict | None:
        """Set once the disk watchdog stopped the sandbox over its limit."""
        return self._disk_watch.verdict if self._disk_watch is not None else None

    @property
    def disk_watch(self) -> DiskWatchdog | None:
        """The sandbox's disk watchdog; None where the engine bounds all it can write."""
        return self._disk_watch

    async def explain(self) -> str | None:
        """Why the sandbox stopped answering, when that is what happened: its container is
        not running (first: the disk watchdog stopped it over its limit), or a process a channel
        was opened to (the harness) exited. None when neither (the failure was something else)."""
        verdict = self.disk_verdict
        if verdict is not None:
            return verdict.reason
        sandbox, runtime = self._sandbox, self._runtime
        if sandbox is None or runtime is None:
            return None
        container = await self._container_gone(runtime, sandbox.id)
        if container is not None:
            return container
        for channel in reversed(self._channels):
            code = await channel.exit_code()
            if code is None:
                continue
            # Every process of a killed container dies at once, and the engine says the
            # container exited a moment later: a process killed by a signal may be that.
            for _ in range(6 if code > 128 else 0):
                await asyncio.sleep(0.25)
                container = await self._container_gone(runtime, sandbox.id)
                if container is not None:
                    return container
            argv = shlex.join(channel.argv)[:120]
            return f"the harness process ({argv}) in the sandbox exited, {_exit_text(code)}"
        return None

    @staticmethod
    async def _container_gone(runtime: Runtime, container_id: str) -> str | None:
        try:
            info = await runtime.inspect(container_id)
        except SclateError as exc:
            return f"the sandbox's container {container_id[:12]} is gone ({exc.message})"
        if info.state == "running":
            return None
        ended = f", {_exit_text(info.exit_code)}" if info.exit_code is not None else ""
        oom = ", killed for want of memory (OOM)" if info.oom_killed else ""
        return f"the sandbox's container {container_id[:12]} {info.state}{ended}{oom}"

    def _on_disconnect(self, conn: ControlConnection) -> None:
        """A client of the control socket left. Calls the proxy had in flight will never
        end: their leases go now (else the clock could not jump until their TTL). If it
        was the proxy, it is checked, and started again if it died."""
        sink = self._sink
        released = sink.release_owned(conn) if sink is not None else []
        if released:
            log.warning(
                "run %s: the capture proxy's connection closed with %d call(s) in flight; their leases are released",
                self.config.run_key,
                len(released),
            )
        if self._closing or not conn.kinds & {"call_start", "call_end", "record"}:
            return
        if self._sandbox is None:
            # The socket without a container (before it starts, or `bench fuzz`'s): no proxy to check.
            return
        task = asyncio.get_running_loop().create_task(self._check_proxy(), name=f"proxy-check:{self.config.run_key}")
        self._proxy_checks.add(task)
        task.add_done_callback(self._proxy_checks.discard)

    async def _check_proxy(self) -> None:
        """The proxy's connection closed while the sandbox runs: start the proxy again if
        it died (the run goes on: what it had spooled is delivered by the new one), or fail
        the run naming what is gone. Busy meanwhile, so the clock does not jump past it."""
        lease = self._leases.acquire("capture-proxy:check", f"{self.config.run_id}/proxy", ttl_ns=120 * 10**9)
        try:
            why = await self.explain()
            if self.disk_verdict is not None:
                return  # the run failed with the watchdog's reason already
            if why is not None and "container" in why:
                self._fail_run(why)
                return
            if await self._proxy_listening():
                return  # alive: it reconnects by itself on its next request
            log.warning(
                "run %s: the capture proxy (mitmdump) in the sandbox exited; starting it again", self.config.run_key
            )
            await self._require().exec(["sh", "-c", f"{mitmdump_command()} >>{PROXY_LOG} 2>&1 &"], timeout_s=30)
            await self._wait_for_proxy()
            self.proxy_restarts += 1
        except SclateError as exc:
            if not self._closing:
                self._fail_run(
                    f"the capture proxy (mitmdump) in the sandbox exited and could not be started again: {exc.message}"
                )
        finally:
            self._leases.release(lease)

    async def _proxy_listening(self) -> bool:
        probe = (
            "import socket,sys\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {ROLE_PORTS['agent']}), 2).close()\n"
            "except OSError: sys.exit(1)\n"
        )
        res = await self._require().exec(["python3", "-c", probe], timeout_s=30)
        return res.exit_code == 0

    async def put_dir(self, src: Path, dest: str) -> None:
        """Copy a host directory's contents into the sandbox at ``dest`` (a day's files)."""
        sandbox, runtime = self._require(), self._runtime
        assert runtime is not None
        with tempfile.TemporaryDirectory(prefix="sclate-seed-") as tmp:
            tar_path = Path(tmp) / "seed.tar"
            await asyncio.to_thread(_tar_dir, src, tar_path)
            async with self._gate.running():
                await sandbox.sh(f"mkdir -p {shlex.quote(dest)}", timeout_s=30)
                await runtime.put_archive(sandbox.id, dest, tar_path)

    async def get_dir(self, src: str, dest: Path) -> None:
        """Copy a directory of the sandbox (``src``) into ``dest`` on the host (made here)."""
        sandbox, runtime = self._require(), self._runtime
        assert runtime is not None
        if not src.startswith("/"):
            raise InvalidArgument(f"copy out of the sandbox: {src!r} is not an absolute path", field="src")
        with tempfile.TemporaryDirectory(prefix="sclate-export-") as tmp:
            tar_path = Path(tmp) / "export.tar"
            async with self._gate.running():
                await runtime.get_archive(sandbox.id, src, tar_path)
            await asyncio.to_thread(untar_dir, tar_path, dest)

    # -- snapshots ---------------------------------------------------------------------------
    async def snapshot(self, dest: Path, *, on_paused: Callable[[], Awaitable[None]] | None = None) -> SnapshotInfo:
        """Freeze the container, commit it and archive its state directories into ``dest``."""
        sandbox, runtime = self._require(), self._runtime
        assert runtime is not None
        async with self._gate.frozen():
            return await snapshot(runtime, sandbox.info, dest, state_dirs=self.config.state_dirs, on_paused=on_paused)

    @staticmethod
    async def check_restorable(runtime: Runtime, snapshot_dir: Path) -> None:
        """NotFound unless a sandbox can be made from ``snapshot_dir`` (image and archives present)."""
        info = await SnapshotInfo.load(snapshot_dir / "sandbox")
        missing = [tar for _, tar in info.archives if not await asyncio.to_thread(Path(tar).is_file)]
        if missing:
            raise NotFound(f"snapshot archive(s) {', '.join(missing)} are gone; pick another snapshot")
        if not await runtime.image_exists(info.image):
            raise NotFound(f"snapshot image {info.image} is not on this engine (removed?); pick another snapshot")

    # -- the model endpoint's health -------------------------------------------------------------
    def _model_log_hint(self) -> str:
        if self.config.model_base_url:
            return "the daemon's log (journalctl -u sclated, or the log of the sclated process)"
        return f"the embedded model's log {self._services.model.status.log_path}"

    async def _watch_model(self, every_s: float = 2.0) -> None:
        """Fail the run once its model endpoint has stayed unreachable past the grace period."""
        bridge, grace = self._bridge, self.config.options.model_grace_s
        assert bridge is not None
        while True:
            await asyncio.sleep(every_s)
            if bridge.unreachable_for_s() < grace:
                continue
            if await bridge.probe():  # fresh evidence before failing a run
                continue
            self._fail_run(
                f"the model endpoint {self._endpoint_label} stayed unreachable for more than {grace:.0f} s "
                f"({bridge.stats.last_error or 'no answer'}); see {self._model_log_hint()}"
            )
            return

    def _check_model_was_reached(self) -> None:
        """At close: a model endpoint that never answered fails the run, however short it was."""
        bridge = self._bridge
        if bridge is None:
            return
        stats = bridge.stats
        if stats.failed and not stats.reached and stats.failing_since is not None:
            self._fail_run(
                f"the model endpoint {self._endpoint_label} was never reached: all {stats.failed} "
                f"connection(s) failed ({stats.last_error}); see {self._model_log_hint()}"
            )

    # -- closing -------------------------------------------------------------------------------
    async def close(self, *, keep: bool = False) -> None:
        """Drain the proxy and remove the container; ``keep``: leave it running for a resumed run."""
        self._closing = True
        for task in list(self._proxy_checks):
            task.cancel()
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        if self._disk_watch is not None:
            await self._disk_watch.close()  # its verdict, if any, stays for explain()
        if not keep:
            self._check_model_was_reached()
            if self._sandbox is not None and self._control is not None and self._sink is not None:
                # While the control socket still serves: the proxy hands over what it holds.
                self.capture_report = await self._drain_capture()
        self._clock.remove_publisher(self.publish_time)
        if self._control is not None:
            await self._control.close()
            self._control = None
        if self._sink is not None:
            # Calls still open end with the sandbox: their leases go with it.
            self._sink.release_all()
        if self.proxy_restarts:
            self.capture_report["proxy_restarts"] = self.proxy_restarts
        if self._bridge is not None:
            await self._bridge.close()
            self._bridge = None
        if not keep:
            if self._sandbox is not None:
                with contextlib.suppress(SclateError):
                    await self._sandbox.remove()
            await asyncio.to_thread(_rmtree, self.control_dir)
        self._sandbox = None

    async def _drain_capture(self, grace_s: float = 10.0) -> dict[str, Any]:
        """Stop the proxy cleanly and store every record it could not deliver.

        Records left in the spool are read out and stored here (idempotent by
        call id); one the daemon had rejected as invalid, or one that cannot be
        read back, is lost and counted as such.
        """
        sandbox, sink = self._require(), self._sink
        assert sink is not None
        report: dict[str, Any] = {"calls_lost": 0, "calls_recovered_at_close": 0, "drain": "ok"}
        try:
            res = await sandbox.exec(
                ["sclate-capture-drain", SPOOL_DIR, "--grace", str(grace_s)], timeout_s=grace_s + 20
            )
        except SclateError as exc:
            report["drain"] = f"failed: {exc.message}"
            log.warning("run %s: capture drain failed: %s", self.config.run_key, exc.message)
            return report
        done = False
        for line in res.stdout.decode(errors="replace").splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if item.get("done"):
                done = True
                if not item.get("proxy_exited"):
                    report["drain"] = "the capture proxy did not exit within the grace period"
            elif item.get("rejected"):
                report["calls_lost"] += 1
            elif isinstance(item.get("record"), str):
                try:
                    stored = await sink.on_record(self.config.run_id, {"record": item["record"]})
                except SclateError as exc:
                    log.error("run %s: spooled record %s is invalid: %s", self.config.run_key, item.get("call_id"), exc)
                    report["calls_lost"] += 1
                    continue
                if stored.get("stored"):
                    report["calls_recovered_at_close"] += 1
        if not done:
            err = res.stderr.decode(errors="replace")[-300:]
            report["drain"] = f"failed: the drain tool exited {res.exit_code}: {err}"
        if report["calls_lost"] or report["drain"] != "ok":
            log.warning("run %s: capture at close: %s", self.config.run_key, report)
        return report


def _exit_text(code: int | None) -> str:
    """``exit code 137 (killed by SIGKILL)``: a shell's 128 + N is a death by signal N."""
    if code is None:
        return "exit code unknown"
    if 128 < code < 128 + 65:
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            name = f"signal {code - 128}"
        return f"exit code {code} (killed by {name})"
    return f"exit code {code}"


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _tar_dir(src: Path, out: Path) -> None:
    if not src.is_dir():
        raise InvalidArgument(f"workspace seed {str(src)!r} is not a directory", field="workspace_seed")
    with tarfile.open(out, "w") as tar:
        for child in sorted(src.iterdir()):
            tar.add(child, arcname=child.name)


async def _image_ref(name: str) -> str:
    try:
        return await image_ref(name)
    except SclateError as exc:
        raise FailedPrecondition(
            f"image {name!r} is not built: run `sclated images build` (make images). {exc.message}",
            reason="IMAGE_MISSING",
        ) from exc
