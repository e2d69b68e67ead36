"""The daemon process: listeners, runs, signals, ordered shutdown.

Shutdown order (aiohttp's runner/site lesson): tell systemd and health
checkers first, stop accepting new calls, let running runs drain for a grace
period, interrupt what is left, persist, close the store, remove the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import secrets
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection
from sclate_api.v1 import sclate_pb2, sclate_pb2_grpc

from adapters import JudgeReply
from sclated.api import SclateInterceptor, SclateServicer, TokenTable
from sclated.daemon._config import DaemonConfig
from sclated.daemon._sdnotify import notify, watchdog_interval_s, watchdog_loop
from sclated.errors import ConfigError, SclateError
from sclated.model import EmbeddedModel
from sclated.runs import JudgeConfig, ManagerConfig, Registry, RunManager, RunSpec, ask_judge, default_registry
from sclated.runtime import SnapshotInfo
from sclated.sandbox import SandboxServices, short_sockets_dir
from sclated.store import Store

__all__ = ["Daemon"]


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


log = logging.getLogger("sclated")
_SERVICE = sclate_pb2.DESCRIPTOR.services_by_name["Sclate"].full_name


class Daemon:
    def __init__(self, config: DaemonConfig, *, registry: Registry | None = None) -> None:
        self.config = config
        self.tokens = TokenTable(config.tokens_file)
        self.store = Store(config.state_dir / "sclated.db")
        self.daemon_id = _daemon_id(config.state_dir)
        self.services = SandboxServices(
            state_dir=config.state_dir,
            daemon_id=self.daemon_id,
            store=self.store,
            model=EmbeddedModel(log_path=config.state_dir / "model-server.log"),
            sockets_dir=short_sockets_dir(config.state_dir),
        )
        self.manager = RunManager(
            self.store,
            registry or default_registry(self.services),
            ManagerConfig(
                max_running=config.max_running,
                tenant_max_running=config.tenant_max_running,
                tenant_max_active=config.tenant_max_active,
                write_reports=config.reports,
            ),
            runs_dir=config.state_dir / "runs",
        )
        self.manager.judge_factory = self._judge_for
        self.manager.on_delete = self._forget_run
        self.health = HealthServicer()
        self.server: grpc.aio.Server | None = None
        self.tcp_address: str | None = None
        self.unix_path: Path | None = None
        self._stopped = asyncio.Event()
        self._stopping = False
        self._watchdog: asyncio.Task[None] | None = None

    async def start(self) -> None:
        cfg = self.config
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        await self.store.open()
        await self._reap_leftovers()
        await self.manager.start()
        opts = [
            ("grpc.max_receive_message_length", cfg.max_message_bytes),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.so_reuseport", 0),
        ]
        server = grpc.aio.server(interceptors=[SclateInterceptor(self.tokens)], options=opts)
        sclate_pb2_grpc.add_SclateServicer_to_server(SclateServicer(self.manager), server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (
                _SERVICE,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )
        if cfg.listen:
            host = cfg.listen.rpartition(":")[0]
            try:
                if cfg.tls_cert is not None and cfg.tls_key is not None:
                    creds = grpc.ssl_server_credentials([(cfg.tls_key.read_bytes(), cfg.tls_cert.read_bytes())])
                    port = server.add_secure_port(cfg.listen, creds)
                else:
                    port = server.add_insecure_port(cfg.listen)
            except RuntimeError:  # what grpc raises now where it used to return 0
                port = 0
            if port == 0:
                raise ConfigError(
                    f"listen {cfg.listen!r}: cannot listen there (in use, or not this host's)", field="listen"
                )
            self.tcp_address = f"{host}:{port}"
        path = cfg.unix_socket_path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a stale socket from a killed process
            try:
                server.add_insecure_port(f"unix:{path}")
            except RuntimeError:
                raise ConfigError("cannot listen on this unix socket", path=path, field="unix_socket") from None
            self.unix_path = path
        await server.start()
        self.server = server
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self.health.set(_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        if cfg.ready_file is not None:
            tmp = cfg.ready_file.with_suffix(".tmp")
            tmp.write_text(
                json.dumps(
                    {
                        "tcp": self.tcp_address,
                        "unix": str(self.unix_path) if self.unix_path else None,
                        "pid": os.getpid(),
                    }
                )
            )
            os.replace(tmp, cfg.ready_file)
        notify(f"READY=1\nSTATUS=serving on {self.tcp_address or ''} {self.unix_path or ''}".strip())
        interval = watchdog_interval_s()
        if interval:
            self._watchdog = asyncio.get_running_loop().create_task(watchdog_loop(interval))
        log.info(
            "sclated serving on tcp=%s unix=%s state=%s",
            self.tcp_address,
            self.unix_path,
            cfg.state_dir,
        )

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

    def _judge_for(self, spec: RunSpec) -> Callable[[str], Awaitable[JudgeReply]]:
        config = JudgeConfig.from_options(spec.benchmark.options, run_model_url=spec.agent.model.base_url)
        embedded_url = self.services.model.url

        async def judge(prompt: str) -> JudgeReply:
            return await ask_judge(config, prompt, embedded_url=embedded_url)

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
        self._stopping = True
        grace = self.config.drain_grace_s
        notify("STOPPING=1")
        log.info("shutting down: draining for up to %.1f s", grace)
        await self.health.enter_graceful_shutdown()
        if self.server is not None:
            # The server refuses new calls at once; open streams end as their runs end.
            stop_server = asyncio.get_running_loop().create_task(self.server.stop(grace + 5))
        await self.manager.shutdown(grace)
        if self.server is not None:
            await stop_server
        await self.services.close()
        if self._watchdog is not None:
            self._watchdog.cancel()
        await self.store.close()
        if self.unix_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.unix_path.unlink()
        if self.config.ready_file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.config.ready_file.unlink()
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
        # A long-lived daemon holding many small objects: full collections of
        # the startup heap are pure pause time, so freeze it and collect the
        # young generation less eagerly.
        gc.freeze()
        gc.set_threshold(100_000, 50, 1000)
        daemon = Daemon(config)
        await daemon.start()
        daemon.install_signal_handlers()
        await daemon.wait_stopped()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(amain())
    return 0
