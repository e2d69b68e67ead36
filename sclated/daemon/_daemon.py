"""The daemon process: start-up and shutdown on one stack, signals, systemd.

``Daemon.start`` acquires its parts step by step and pushes each one's undo
on one stack (aiohttp's runner and sites: what is set up is torn down the
same way); a step that fails unwinds what came before it, in reverse, and
its error goes on. ``Daemon.stop`` unwinds the same stack, which makes the
shutdown order (temporalio's lesson: announce, stop taking work, drain,
cancel the rest, then close):

    the scheduled full garbage collections stop, watchdog pings stop,
    STOPPING=1, health NOT_SERVING (the HTTP /healthz and reads: 503), no new calls,
    runs drain for drain_grace_s and the rest are interrupted and persisted,
    open calls end, the container engine and the embedded model close,
    the store closes, the HTTP listener closes (its watch streams ended with
    the runs), the socket file goes, the ready file goes last.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import inspect
import json
import logging
import os
import secrets
import shutil
import signal
import sqlite3
import ssl
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection
from sclate_api.v1 import sclate_pb2, sclate_pb2_grpc

from adapters import Judge, JudgeReply
from sclated.api import SclateInterceptor, SclateServicer, TokenTable
from sclated.daemon._config import DaemonConfig, check_executor
from sclated.daemon._gc import GarbageCollector, tune_for_daemon
from sclated.daemon._listeners import GrpcServer, Listener, TcpListener, UnixSocketListener, listeners_for
from sclated.daemon._sdnotify import notify, watchdog_interval_s, watchdog_loop
from sclated.errors import ConfigError, InvalidArgument, SclateError
from sclated.model import EmbeddedModel
from sclated.runs import (
    JUDGE_MAX_TOKENS,
    DataRoots,
    Executor,
    JudgeConfig,
    ManagerConfig,
    Registry,
    RunManager,
    RunSpec,
    ask_judge,
    default_registry,
)
from sclated.runtime import SnapshotInfo
from sclated.sandbox import SandboxServices, short_sockets_dir
from sclated.store import Store
from sclated.web import DaemonMetrics, HttpListener, build_app

__all__ = ["Daemon", "ReadyFile", "Steps", "data_roots_for"]


def _daemon_id(state_dir: Path) -> str:
    """Stable per state directory, so a restarted daemon recognises its own containers."""
    path = state_dir / "daemon-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    state_dir.mkdir(parents=True, exist_ok=True)
    ident = f"sclated-{secrets.token_hex(4)}"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(ident + "\n")
    os.replace(tmp, path)
    return ident


def data_roots_for(config: DaemonConfig, builtin: tuple[Path, ...]) -> DataRoots:
    """The confinement of a daemon with ``config``: its roots, and fenced off, its state
    directory (every tenant's runs), its sandboxes' sockets and its secrets."""
    fences = [config.state_dir, short_sockets_dir(config.state_dir)]
    fences += [p for p in (config.tokens_file, config.tls_cert, config.tls_key) if p is not None]
    return DataRoots.build(
        default=config.effective_data_roots,
        tenants=config.tenant_data_roots,
        builtin=builtin,
        fences=fences,
    )


log = logging.getLogger("sclated")
_SERVICE = sclate_pb2.DESCRIPTOR.services_by_name["Sclate"].full_name
_HEALTH = health_pb2.HealthCheckResponse


async def _let_go(what: str, undo: Callable[[], object]) -> None:
    """Run one undo; a failure is logged, never raised: it must not hide the
    error being handled, nor keep the other undos from running."""
    try:
        result = undo()
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("letting go of the %s failed", what)


def _server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    """The HTTP listener's TLS, from the same certificate and key as the gRPC listener's
    (``check_startup`` has read both)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


class Steps:
    """The daemon's stack of undos: an ``AsyncExitStack`` whose entries have names.

    Each start-up step that acquired something pushes how to let it go;
    ``aclose()`` runs the undos in reverse, after a failed start and on stop
    alike. ``acquired`` and ``released`` name the entries in the order they
    were pushed and run."""

    def __init__(self) -> None:
        self._stack = contextlib.AsyncExitStack()
        self._lock = asyncio.Lock()
        self.acquired: list[str] = []
        self.released: list[str] = []

    def push(self, name: str, undo: Callable[[], object]) -> None:
        async def release() -> None:
            log.debug("letting go of the %s", name)
            try:
                await _let_go(name, undo)
            finally:
                self.released.append(name)

        self._stack.push_async_callback(release)
        self.acquired.append(name)

    @property
    def held(self) -> list[str]:
        """What is acquired and not let go yet, newest last."""
        return self.acquired[: len(self.acquired) - len(self.released)]

    async def aclose(self) -> None:
        async with self._lock:  # a second caller waits for the first, then finds it empty
            await self._stack.aclose()


class ReadyFile:
    """The file that says where the daemon listens (``ready_file``).

    Claimed first (a stale one from a killed process is removed, so nobody
    reads a dead daemon's addresses), written once the daemon serves, and
    removed last, once everything else is let go: while it exists, a daemon
    may be using the state directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tmp = path.with_name(path.name + ".tmp")
        self._written = False

    def claim(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
            self._tmp.unlink(missing_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot remove the ready file of an earlier process: {exc.strerror or exc}",
                path=self.path,
                field="ready_file",
            ) from None

    def write(self, info: dict[str, object]) -> None:
        self._written = True  # from the first byte on: withdraw() removes a half-written file too
        try:
            self._tmp.write_text(json.dumps(info))
            os.replace(self._tmp, self.path)
        except OSError as exc:
            raise ConfigError(
                f"cannot write the ready file: {exc.strerror or exc}", path=self.path, field="ready_file"
            ) from None

    def withdraw(self) -> None:
        if self._written:
            self._tmp.unlink(missing_ok=True)
            self.path.unlink(missing_ok=True)
            self._written = False


def executor_for(config: DaemonConfig, registry: Registry, daemon_id: Callable[[], str]) -> Executor | None:
    """The configured executor; None for the local one (the manager's own, which it gives
    its observer). Ray's is imported only when configured: the local path never loads Ray.
    ``daemon_id``: the daemon's id once it started (a remote sandbox is labelled with it)."""
    if config.executor != "ray":
        return None
    check_executor(config)
    from sclated.cluster import ClusterConfig, RayExecutor

    scope = hashlib.sha256(str(config.state_dir.resolve()).encode()).hexdigest()[:12]
    try:
        cluster = ClusterConfig(
            address=config.ray_address,
            scope=scope,
            placement=config.ray_placement,
            snapshot_dir=config.cluster_snapshot_dir,
            model_n_ctx=config.model_n_ctx,
        )
    except InvalidArgument as exc:
        raise ConfigError(exc.message, field=exc.field or "executor") from None
    return RayExecutor(cluster, registry, daemon_id)


class Daemon:
    """One sclated process's worth of parts. ``start()`` once, ``stop()`` once
    (or after a failed start: it has nothing left to do). Start a new
    ``Daemon`` to start again."""

    def __init__(self, config: DaemonConfig, *, registry: Registry | None = None) -> None:
        self.config = config
        self.metrics = DaemonMetrics()
        """Every room's observer, and what ``/metrics`` serves (see sclated.web)."""
        self.tokens = TokenTable(config.tokens_file)
        self.store = Store(config.state_dir / "sclated.db", observer=self.metrics)
        self.daemon_id = ""
        """Read (or made) in the state directory by ``start()``."""
        self.services = SandboxServices(
            state_dir=config.state_dir,
            daemon_id=self.daemon_id,
            store=self.store,
            model=EmbeddedModel(log_path=config.state_dir / "model-server.log", n_ctx=config.model_n_ctx),
            sockets_dir=short_sockets_dir(config.state_dir),
            observer=self.metrics,
            capture_observer=self.metrics,
        )
        registry = registry or default_registry(self.services)
        self.data_roots = data_roots_for(config, registry.builtin_data())
        """The host paths each tenant's runs may name."""
        self.manager = RunManager(
            self.store,
            registry,
            ManagerConfig(
                max_running=config.max_running,
                tenant_max_running=config.tenant_max_running,
                tenant_max_active=config.tenant_max_active,
                write_reports=config.reports,
                retention_s=config.retention_s,
            ),
            runs_dir=config.state_dir / "runs",
            data_roots=self.data_roots,
            observer=self.metrics,
            executor=executor_for(config, registry, lambda: self.daemon_id),
        )
        self.metrics.watch_runs(self.manager)
        self.manager.judge_factory = self._judge_for
        self.manager.on_delete = self._forget_run
        self.health = HealthServicer()
        self.grpc: GrpcServer | None = None
        self.listeners: list[Listener] = listeners_for(config)
        self.ready_file = ReadyFile(config.ready_file) if config.ready_file is not None else None
        self.http: HttpListener | None = None
        """The HTTP listener (the run viewer, /metrics, /healthz), when ``http_listen`` is set."""
        self._serving = False
        self.steps = Steps()
        self._started = False
        self._at = ""
        """The start-up step in progress (for the log when it fails)."""
        self._stopped = asyncio.Event()
        self._stopping = False
        self._watchdog: asyncio.Task[None] | None = None
        self.gc = GarbageCollector()
        """Full collections on a schedule (see sclated.daemon._gc)."""

    @property
    def server(self) -> grpc.aio.Server | None:
        return self.grpc.server if self.grpc is not None else None

    @property
    def tcp_address(self) -> str | None:
        """``HOST:PORT`` the TCP (or TLS) listener bound."""
        for listener in self.listeners:
            if isinstance(listener, TcpListener) and listener.tcp_address is not None:
                return listener.tcp_address
        return None

    @property
    def unix_path(self) -> Path | None:
        """The unix socket the daemon bound."""
        for listener in self.listeners:
            if isinstance(listener, UnixSocketListener) and listener.unix_path is not None:
                return listener.unix_path
        return None

    async def start(self) -> None:
        """Acquire every part in order; if a step fails, let go of the parts
        acquired before it, in reverse, and raise the step's error."""
        if self._started:
            raise RuntimeError("a Daemon starts once; make a new one to start again")
        self._started = True
        self._at = "state dir"
        try:
            await self._start()
        except BaseException as exc:
            level = logging.DEBUG if isinstance(exc, SclateError) else logging.ERROR
            log.log(level, "start-up failed at the %s; letting go of: %s", self._at, ", ".join(self.steps.held[::-1]))
            await self.steps.aclose()
            raise

    async def _start(self) -> None:
        cfg = self.config
        steps = self.steps

        # The state directory, and the daemon's id in it (labels its containers).
        self._at = "state dir"
        try:
            cfg.state_dir.mkdir(parents=True, exist_ok=True)
            self.daemon_id = _daemon_id(cfg.state_dir)
        except OSError as exc:
            raise ConfigError(
                f"cannot keep the daemon id in the state directory: {exc.strerror or exc}",
                path=cfg.state_dir,
                field="state_dir",
            ) from None
        self.services.daemon_id = self.daemon_id
        if not cfg.data_roots:
            # The default data root: where an operator drops data for every tenant.
            try:
                (cfg.state_dir / "data").mkdir(exist_ok=True)
            except OSError as exc:
                raise ConfigError(
                    f"cannot create the default data root: {exc.strerror or exc}",
                    path=cfg.state_dir / "data",
                    field="data_roots",
                ) from None

        # The ready file is claimed first so that it goes last.
        if self.ready_file is not None:
            self._at = "ready file"
            self.ready_file.claim()
            steps.push("ready file", self.ready_file.withdraw)

        # The gRPC server and its listeners come before anything else: an
        # address that cannot be had costs nothing to give up.
        self._at = "grpc server"
        opts = [
            ("grpc.max_receive_message_length", cfg.max_message_bytes),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.so_reuseport", 0),
        ]
        server = GrpcServer(grpc.aio.server(interceptors=[SclateInterceptor(self.tokens, self.metrics)], options=opts))
        self.grpc = server
        steps.push("grpc server", server.stopped)
        for listener in self.listeners:
            self._at = f"{listener.kind} listener"
            listener.bind(server)
            steps.push(f"{listener.kind} listener", listener.close)

        # The HTTP listener binds with the others; /healthz says 503 and the reads wait
        # until the daemon serves, and it closes after the runs drained (it answers 503
        # meanwhile, and its watch streams see the runs end).
        if cfg.http_listen:
            self._at = "http listener"
            app = build_app(
                self.manager,
                self.tokens,
                metrics=self.metrics,
                # Without a tokens file there is one tenant, whose /metrics they are.
                metrics_readers=None if cfg.tokens_file is None else cfg.metrics_readers,
                serving=self._is_serving,
            )
            tls = None
            if cfg.tls_cert is not None and cfg.tls_key is not None:
                tls = await asyncio.to_thread(_server_tls, cfg.tls_cert, cfg.tls_key)
            http = HttpListener(cfg.http_listen, app, shutdown_timeout_s=5.0, ssl_context=tls)
            try:
                await http.start()
            except OSError as exc:
                await _let_go("half-open http listener", http.close)
                raise ConfigError(
                    f"http_listen {cfg.http_listen!r}: cannot listen there: {exc.strerror or exc}", field="http_listen"
                ) from None
            except BaseException:
                await _let_go("half-open http listener", http.close)
                raise
            self.http = http
            steps.push("http listener", http.close)

        self._at = "store"
        try:
            await self.store.open()
        except BaseException as exc:
            await _let_go("half-open store", self.store.close)
            if isinstance(exc, sqlite3.Error | OSError):
                raise ConfigError(f"cannot open the database: {exc}", path=self.store.path, field="state_dir") from exc
            raise
        steps.push("store", self.store.close)

        # Sandboxes an earlier process left (connects the container engine).
        self._at = "sandboxes"
        try:
            await self._reap_leftovers()
        except BaseException:
            await _let_go("container engine", self.services.close)
            raise
        steps.push("sandboxes", self.services.close)

        # The handlers use the store and the runs: once the server stops
        # taking calls, the open ones end before those close.
        self._at = "handlers"
        sclate_pb2_grpc.add_SclateServicer_to_server(SclateServicer(self.manager), server.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server.server)
        reflection.enable_server_reflection(
            (_SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            server.server,
        )
        await self.health.set("", _HEALTH.NOT_SERVING)
        await self.health.set(_SERVICE, _HEALTH.NOT_SERVING)
        steps.push("handlers", server.stopped)

        # Runs: the manager loads the queue and resumes what was running.
        self._at = "runs"
        try:
            await self.manager.start()
        except BaseException:
            await _let_go("half-started runs", functools.partial(self.manager.shutdown, 0))
            raise
        steps.push("runs", functools.partial(self.manager.shutdown, cfg.drain_grace_s))

        # Serving: calls come in from here on.
        self._at = "serving"
        try:
            await server.start()
        except BaseException:
            await _let_go("half-started server", server.stopped)
            raise
        # Open calls (a WatchRun ends with its run) get the drain and 5 s more.
        steps.push("serving", functools.partial(server.stop_accepting, cfg.drain_grace_s + 5))

        self._at = "health"
        await self.health.set("", _HEALTH.SERVING)
        await self.health.set(_SERVICE, _HEALTH.SERVING)
        self._serving = True
        steps.push("health", self._not_serving)

        if self.ready_file is not None:
            self._at = "ready file (write)"
            unix = self.unix_path
            self.ready_file.write(
                {
                    "tcp": self.tcp_address,
                    "unix": str(unix) if unix else None,
                    "http": self.http.address if self.http is not None else None,
                    "pid": os.getpid(),
                }
            )

        self._at = "ready"
        notify(f"READY=1\nSTATUS=serving on {self.tcp_address or ''} {self.unix_path or ''}".strip())
        steps.push("ready", self._announce_stopping)

        self._at = "watchdog"
        interval = watchdog_interval_s()
        if interval:
            self._watchdog = asyncio.get_running_loop().create_task(watchdog_loop(interval), name="sclated-watchdog")
            steps.push("watchdog", self._stop_watchdog)

        self._at = "garbage collector"
        self.gc.start()
        steps.push("garbage collector", self.gc.stop)

        log.info(
            "sclated serving on tcp=%s unix=%s http=%s state=%s",
            self.tcp_address,
            self.unix_path,
            self.http.address if self.http is not None else None,
            cfg.state_dir,
        )
        roots = self.data_roots.describe()
        log.info(
            "data roots: %s%s",
            ", ".join(roots["default"]),
            "".join(f"; tenant {t}: {', '.join(r)}" for t, r in roots["tenants"].items()),
        )

    def _is_serving(self) -> bool:
        return self._serving and not self._stopping

    async def _not_serving(self) -> None:
        self._serving = False
        await self.health.enter_graceful_shutdown()

    def _announce_stopping(self) -> None:
        notify("STOPPING=1")
        log.info("shutting down: draining for up to %.1f s", self.config.drain_grace_s)

    async def _stop_watchdog(self) -> None:
        task, self._watchdog = self._watchdog, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _reap_leftovers(self) -> None:
        """Remove sandboxes a previous process of this daemon left, except those of
        runs that will resume (they are adopted, workspace intact)."""
        # INTERRUPTED runs keep their sandbox too: ResumeRun adopts it, DeleteRun removes it.
        active = await self.store.runs_in_states(["RUNNING", "PENDING", "INTERRUPTED"])
        keep = {row.name.split("/", 1)[1] for row in active}
        try:
            runtime = await self.services.runtime()
        except SclateError as exc:
            log.warning("no container engine (%s); sandboxed agents will fail until it is up", exc.message)
            return
        removed = await runtime.reap(self.daemon_id, keep)
        if removed:
            log.info("removed %d sandbox(es) left by a previous process", len(removed))

    async def _forget_run(self, run_key: str) -> None:
        tenant, _, run_id = run_key.partition("/")
        try:
            runtime = await self.services.runtime()
        except SclateError:
            runtime = None
        run_dir = self.config.state_dir / "runs" / run_key
        if runtime is not None:
            for c in await runtime.list_containers({"sclate.run": run_id, "sclate.tenant": tenant}):
                await runtime.remove(c.id)
            # The run's snapshot images, found through its own snapshot records (the
            # image names carry only the run id, which another tenant may share).
            for meta in await asyncio.to_thread(lambda: sorted(run_dir.glob("snapshots/*/sandbox"))):
                try:
                    info = await SnapshotInfo.load(meta)
                except SclateError:
                    continue
                await runtime.remove_image(info.image)
        await asyncio.to_thread(shutil.rmtree, run_dir, True)

    def _judge_for(self, spec: RunSpec) -> Judge:
        config = JudgeConfig.from_options(spec.benchmark.options, run_model_url=spec.agent.model.base_url)
        embedded_url = self.services.model.url

        async def judge(prompt: str, *, max_tokens: int | None = None) -> JudgeReply:
            return await ask_judge(config, prompt, embedded_url=embedded_url, max_tokens=max_tokens or JUDGE_MAX_TOKENS)

        return judge

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        loop.add_signal_handler(signal.SIGINT, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, self.tokens.reload)

    def request_stop(self) -> None:
        if not self._stopping:
            self._stopping = True
            asyncio.get_running_loop().create_task(self.stop())

    async def stop(self) -> None:
        """Let go of everything ``start()`` acquired, in reverse (see the module's docstring)."""
        self._stopping = True
        had = bool(self.steps.held)
        try:
            await self.steps.aclose()
        finally:
            if had:
                log.info("stopped")
            self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


def run_daemon(config: DaemonConfig) -> int:
    import uvloop

    logging.basicConfig(
        level=config.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    async def amain() -> None:
        # A long-lived daemon holding many small objects: the start-up heap is
        # frozen and the young generations collected lazily; the daemon's
        # GarbageCollector runs the full collections (sclated.daemon._gc).
        tune_for_daemon()
        daemon = Daemon(config)
        await daemon.start()
        daemon.install_signal_handlers()
        await daemon.wait_stopped()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(amain())
    return 0
