"""An agent harness in its own sandbox: the wiring of runtime, capture and the run.

For one run it lays out the run directory, serves the sandbox's control socket
(capture records and leases, ``sclate-wait``), bridges the model socket to the
run's model endpoint, starts the container (simulated time via libfaketime,
mitmdump with the capture addon in front of the model, one listener per role),
and drives the harness process inside over stdin/stdout. The harness runs
unmodified: environment variables and the proxy are the only levers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import secrets
import shlex
import shutil
import tarfile
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from adapters import TurnResult
from sclated.capture import CallRecord, CaptureSink
from sclated.clock import Lease
from sclated.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    RuntimeUnavailable,
    SclateError,
)
from sclated.runs._control import ControlServer
from sclated.runs._model_service import EmbeddedModel
from sclated.scheduler import DeliverPrompt, EventSource
from sclated.store import Store

__all__ = ["AGENT_PORTS", "RunEnvironment", "SandboxServices", "SandboxedHarness"]

log = logging.getLogger("sclated.sandbox")

AGENT_PORTS = {"agent": 4001, "memory": 4002, "aux": 4003}


@dataclass(slots=True)
class SandboxServices:
    """Daemon-wide parts sandboxed runs share; the engine is connected on first use."""

    state_dir: Path
    daemon_id: str
    store: Store
    model: EmbeddedModel
    sockets_dir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "sclated-sockets")
    """Short-path home of per-run control directories (see ``short_sockets_dir``)."""
    _runtime: Any = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def runtime(self) -> Any:
        from sclated.runtime import DockerRuntime

        async with self._lock:
            if self._runtime is None:
                self._runtime = await DockerRuntime.connect(self.daemon_id)
            return self._runtime

    async def close(self) -> None:
        if self._runtime is not None:
            await self._runtime.close()
            self._runtime = None
        await self.model.close()


def short_sockets_dir(state_dir: Path) -> Path:
    """$RUNTIME_DIRECTORY under systemd, else the temp dir; one per state directory."""
    base = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0] or tempfile.gettempdir()
    return Path(base) / f"sclated-{hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]}"


@dataclass(slots=True)
class RunEnvironment:
    """What the run worker hands an agent that needs more than messages."""

    run_key: str
    tenant: str
    run_id: str
    run_dir: Path
    sim_now: Callable[[], int]
    leases: Any
    sleep_until: Callable[..., Any]
    turn_lease: Callable[[], Lease | None]
    set_turn_lease: Callable[[Lease | None], None]
    add_time_publisher: Callable[[Any], None]
    model_base_url: str
    model_api: str
    model_name: str
    resources: Any
    workspace_seed: Path | None
    resume: bool
    fail_run: Callable[[str], None]
    """End the run FAILED with this reason (the substrate broke under the agent)."""
    restore_from: Path | None = None
    """A snapshot directory: the sandbox is created from its ``sandbox/`` part (see
    SandboxedHarness.snapshot) instead of fresh or adopted."""


class _StoreRecords:
    """The capture sink's RecordStore, on the daemon's SQLite store."""

    def __init__(self, store: Store, run_key: str) -> None:
        self._store = store
        self._run_key = run_key

    async def put(self, record: CallRecord) -> bool:
        return await self._store.put_call(self._run_key, record.call_id, record.role, record.to_json())

    async def list(self, run: str) -> list[CallRecord]:
        return [CallRecord.from_json(r) for r in await self._store.calls(self._run_key)]


def _mitmdump_command() -> str:
    modes = " ".join(f"--mode reverse:http://127.0.0.1:18080@127.0.0.1:{port}" for port in AGENT_PORTS.values())
    roles = ",".join(f"{port}={role}" for role, port in AGENT_PORTS.items())
    return (
        f"mitmdump -q -s /opt/sclate/proxy/capture.py {modes} --set sclate_roles={roles} "
        "--set confdir=/tmp/mitmproxy --set connection_strategy=lazy"
    )


class SandboxedHarness:
    """The reference harness (``agent.py serve``) in a ``sclate-reference-agent`` sandbox.

    Implements :class:`adapters.AgentAdapter`, plus ``prepare`` / ``close``
    (the worker calls them around the run), ``exec_in_workspace`` (grading)
    and ``run_job`` (cron jobs, attributed to the memory role).
    """

    image = "sclate-reference-agent"

    def __init__(self, options: Mapping[str, Any], services: SandboxServices | None) -> None:
        unknown = set(options) - {"turn_timeout_s", "max_steps", "max_tokens", "probe", "model_grace_s"}
        if unknown:
            raise InvalidArgument(
                f"unknown option(s) for the reference harness: {', '.join(sorted(unknown))}",
                field="run.agent.options",
            )
        turn_timeout = options.get("turn_timeout_s", 1800)
        if not isinstance(turn_timeout, int | float) or not 1 <= turn_timeout <= 86_400:
            raise InvalidArgument("turn_timeout_s must be in [1, 86400]", field="run.agent.options.turn_timeout_s")
        max_steps = options.get("max_steps", 6)
        if not isinstance(max_steps, int | float) or not 1 <= max_steps <= 50:
            raise InvalidArgument("max_steps must be in [1, 50]", field="run.agent.options.max_steps")
        max_tokens = options.get("max_tokens", 256)
        if not isinstance(max_tokens, int | float) or not 1 <= max_tokens <= 32_768:
            raise InvalidArgument("max_tokens must be in [1, 32768]", field="run.agent.options.max_tokens")
        grace = options.get("model_grace_s", 120)
        if not isinstance(grace, int | float) or isinstance(grace, bool) or not 1 <= grace <= 86_400:
            raise InvalidArgument("model_grace_s must be in [1, 86400]", field="run.agent.options.model_grace_s")
        self._model_grace_s = float(grace)
        self._model_watch: asyncio.Task[None] | None = None
        self._max_tokens = int(max_tokens)
        self._turn_timeout = float(turn_timeout)
        self._max_steps = int(max_steps)
        self._probe = bool(options.get("probe", True))
        self._services = services
        self._env: RunEnvironment | None = None
        self._sandbox: Any = None
        self._bridge: Any = None
        self._control: ControlServer | None = None
        self._stream: Any = None
        self._inner: Any = None
        self._secret = secrets.token_hex(16)
        self._crontab_text = ""
        self._sink: CaptureSink | None = None
        self.capture_report: dict[str, Any] = {}
        """How the capture proxy's records were handed over when the sandbox closed."""

    @property
    def name(self) -> str:
        return "reference"

    # -- lifecycle around the run ----------------------------------------------------
    async def prepare(self, env: RunEnvironment) -> None:
        if self._services is None:
            raise RuntimeUnavailable("this daemon has no sandbox runtime configured")
        from adapters.reference_harness import CRONTAB
        from sclated.runtime import Limits, ModelBridge, SandboxManager

        self._env = env
        self._crontab_text = await asyncio.to_thread(CRONTAB.read_text)
        services = self._services
        try:
            runtime = await services.runtime()
        except SclateError as exc:
            raise RuntimeUnavailable(
                f"the Docker engine is not available for sandboxed agents: {exc.message}. "
                "Start it (`make system` does) and check `sclate doctor`."
            ) from exc
        manager = SandboxManager(runtime)
        paths = manager.paths_for(self._sandbox_root(env))
        await asyncio.to_thread(paths.create)

        base = env.model_base_url or await services.model.url()
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidArgument(f"model endpoint {base!r} is not an http(s) URL", field="run.agent.model.base_url")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if env.model_base_url:
            self._bridge = ModelBridge(paths.model_socket, parts.hostname, port, tls=parts.scheme == "https")
        else:
            # The embedded model may restart (on another port): find it at each connection.
            self._bridge = ModelBridge(
                paths.model_socket, resolve=services.model.endpoint, explain_drop=services.model.explain_drop
            )
        await self._bridge.start()
        self._model_watch = asyncio.get_running_loop().create_task(
            self._watch_model(base if env.model_base_url else f"the embedded model ({base})"),
            name=f"model-watch:{env.run_key}",
        )

        sink = CaptureSink(_StoreRecords(services.store, env.run_key), env.leases)
        self._sink = sink
        run_id = env.run_id

        async def hello(msg: Mapping[str, Any]) -> dict[str, Any]:
            return {"run": run_id}

        async def call_start(msg: Mapping[str, Any]) -> dict[str, Any]:
            return await sink.on_call_start(run_id, dict(msg))

        async def call_end(msg: Mapping[str, Any]) -> dict[str, Any]:
            return await sink.on_call_end(run_id, dict(msg))

        async def record(msg: Mapping[str, Any]) -> dict[str, Any]:
            return await sink.on_record(run_id, dict(msg))

        self._control = ControlServer(
            paths.control_socket,
            {"hello": hello, "call_start": call_start, "call_end": call_end, "record": record, "wait": self._wait},
        )
        await self._control.start()

        r = env.resources
        limits = Limits(
            memory_bytes=r.memory_bytes or 2 * 1024**3,
            nano_cpus=int((r.cpus or 1.0) * 1e9),
            pids=r.pids or 512,
        )
        api_key = f"sk-sclate-{run_id}-{self._secret}"
        path_prefix = parts.path.rstrip("/")
        env_vars = {
            "OPENAI_BASE_URL": f"http://127.0.0.1:{AGENT_PORTS['agent']}{path_prefix or '/v1'}",
            "OPENAI_API_KEY": api_key,
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{AGENT_PORTS['agent']}",
            "ANTHROPIC_API_KEY": api_key,
            "AGENT_MODEL": env.model_name or "default",
            "AGENT_MAX_STEPS": str(self._max_steps),
            "AGENT_MAX_TOKENS": str(self._max_tokens),
            "SCLATE_RUN_SECRET": self._secret,
            "SCLATE_SPOOL": "/var/spool/sclate",
        }
        spec = manager.spec_for(
            image=await _image_ref(self.image),
            run=run_id,
            tenant=env.tenant,
            run_dir=self._sandbox_root(env),
            env=env_vars,
            limits=limits,
            command=["sh", "-c", f"{_mitmdump_command()} >/var/log/sclate-proxy.log 2>&1 & exec sleep infinity"],
        )
        existing = [
            c
            for c in await runtime.list_containers({"sclate.run": run_id})
            if c.labels.get("sclate.tenant") == env.tenant
        ]
        if env.restore_from is not None:
            for stale in existing:
                with contextlib.suppress(SclateError):
                    await runtime.remove(stale.id)
            self._sandbox = await self._restore_sandbox(runtime, manager, spec, env, env.restore_from / "sandbox")
        elif env.resume and existing and existing[0].state in ("running", "paused"):
            # The container outlived the previous daemon process: adopt it, so
            # the workspace and memory are exactly as the agent left them.
            self._sandbox = await manager.attach(existing[0], spec, self._sandbox_root(env))
            if existing[0].state == "paused":
                await self._sandbox.unpause()
            await self._sandbox.publish_time(env.sim_now())
        else:
            for stale in existing:
                with contextlib.suppress(SclateError):
                    await runtime.remove(stale.id)
            self._sandbox = await manager.create(spec, self._sandbox_root(env), sim_ns=env.sim_now(), probe=self._probe)
            if env.workspace_seed is not None:
                await self.seed_workspace(env.workspace_seed, "/workspace")
        env.add_time_publisher(self._sandbox.publish_time)
        await self._wait_for_proxy()
        self._stream = await runtime.exec_stream(self._sandbox.id, ["python3", "/opt/agent/agent.py", "serve"])
        from adapters.reference_harness import ReferenceHarnessAdapter

        self._inner = ReferenceHarnessAdapter(self._stream, turn_timeout_s=self._turn_timeout, crontab=None)

    async def _wait_for_proxy(self) -> None:
        probe = (
            "import socket,sys,time\n"
            "for _ in range(300):\n"
            "    try:\n"
            f"        socket.create_connection(('127.0.0.1', {AGENT_PORTS['agent']}), 0.2).close(); sys.exit(0)\n"
            "    except OSError: time.sleep(0.05)\n"
            "sys.exit(1)\n"
        )
        res = await self._sandbox.exec(["python3", "-c", probe], timeout_s=30)
        if res.exit_code != 0:
            log_tail = await self._sandbox.sh("tail -n 20 /var/log/sclate-proxy.log", timeout_s=10)
            raise FailedPrecondition(
                "the capture proxy in the sandbox did not start listening within 15 s: "
                f"{log_tail.stdout.decode(errors='replace').strip()[-800:]}"
            )

    def _model_log_hint(self) -> str:
        assert self._env is not None and self._services is not None
        if self._env.model_base_url:
            return "the daemon's log (journalctl -u sclated, or the log of the sclated process)"
        return f"the embedded model's log {self._services.model.status.log_path}"

    def _check_model_was_reached(self) -> None:
        """At the end of a run: a model endpoint that never answered fails it, however short it was."""
        bridge, env = self._bridge, self._env
        if bridge is None or env is None:
            return
        stats = bridge.stats
        if stats.failed and not stats.reached and stats.failing_since is not None:
            env.fail_run(
                f"the model endpoint {env.model_base_url or 'of the embedded model'} was never reached: "
                f"all {stats.failed} connection(s) failed ({stats.last_error}); see {self._model_log_hint()}"
            )

    async def _watch_model(self, endpoint: str, every_s: float = 2.0) -> None:
        """End the run FAILED once its model endpoint has stayed unreachable past the grace.

        A run whose every model call fails must not finish as if the agent had
        answered badly: it fails, naming the endpoint and where to look.
        """
        assert self._bridge is not None and self._env is not None and self._services is not None
        while True:
            await asyncio.sleep(every_s)
            if self._bridge.unreachable_for_s() < self._model_grace_s:
                continue
            if await self._bridge.probe():  # fresh evidence before failing a run
                continue
            self._env.fail_run(
                f"the model endpoint {endpoint} stayed unreachable for more than {self._model_grace_s:.0f} s "
                f"({self._bridge.stats.last_error or 'no answer'}); see {self._model_log_hint()}"
            )
            return

    async def _stop_model_watch(self) -> None:
        task, self._model_watch = self._model_watch, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        await self._stop_model_watch()
        self._check_model_was_reached()
        if self._stream is not None:
            await self._stream.close()
        if self._sandbox is not None and self._control is not None:
            # While the control socket still serves: the proxy hands over what it holds.
            self.capture_report = await self._drain_capture()
        if self._control is not None:
            await self._control.close()
        if self._bridge is not None:
            await self._bridge.close()
        if self._sandbox is not None:
            with contextlib.suppress(SclateError):
                await self._sandbox.remove()
        if self._env is not None and self._services is not None:
            await asyncio.to_thread(shutil.rmtree, self._sandbox_root(self._env), True)

    async def _drain_capture(self, grace_s: float = 10.0) -> dict[str, Any]:
        """Stop the capture proxy cleanly and store every record it could not deliver.

        Records left in the spool are read out and stored here (idempotent by
        call id); a record the daemon had rejected as invalid, or one that cannot
        be read back, is lost and counted as such.
        """
        assert self._sandbox is not None and self._sink is not None and self._env is not None
        report: dict[str, Any] = {"calls_lost": 0, "calls_recovered_at_close": 0, "drain": "ok"}
        try:
            res = await self._sandbox.exec(
                ["sclate-capture-drain", "/var/spool/sclate", "--grace", str(grace_s)], timeout_s=grace_s + 20
            )
        except SclateError as exc:
            report["drain"] = f"failed: {exc.message}"
            log.warning("run %s: capture drain failed: %s", self._env.run_key, exc.message)
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
                    stored = await self._sink.on_record(self._env.run_id, {"record": item["record"]})
                except SclateError as exc:
                    log.error("run %s: spooled record %s is invalid: %s", self._env.run_key, item.get("call_id"), exc)
                    report["calls_lost"] += 1
                    continue
                if stored.get("stored"):
                    report["calls_recovered_at_close"] += 1
        if not done:
            err = res.stderr.decode(errors="replace")[-300:]
            report["drain"] = f"failed: the drain tool exited {res.exit_code}: {err}"
        if report["calls_lost"] or report["drain"] != "ok":
            log.warning("run %s: capture at close: %s", self._env.run_key, report)
        return report

    async def _restore_sandbox(
        self, runtime: Any, manager: Any, spec: Any, env: RunEnvironment, snapshot_dir: Path
    ) -> Any:
        """A fresh container from a snapshot: its committed image, its state archives put back,
        the run's simulated time published before the first process starts."""
        from sclated.runtime import Sandbox, SnapshotInfo, publish_time, restore

        info = await SnapshotInfo.load(snapshot_dir)
        paths = manager.paths_for(self._sandbox_root(env))
        await asyncio.to_thread(paths.create)
        sim_ns = env.sim_now()
        await publish_time(paths.time_file, sim_ns)
        container = await restore(runtime, info, spec)
        sandbox = Sandbox(runtime, container, spec, paths)
        sandbox.last_sim_ns = sim_ns
        if self._probe:
            try:
                await sandbox.probe_time()
            except BaseException:
                with contextlib.suppress(SclateError):
                    await asyncio.shield(sandbox.remove())
                raise
        return sandbox

    async def snapshot(self, dest: Path, *, on_paused: Callable[[], Awaitable[None]] | None = None) -> Any:
        """Freeze the sandbox, commit it to ``sclate-snap:<run>-<n>`` and archive /workspace and
        /memory into ``dest`` (a SnapshotInfo); ``on_paused`` runs while it is frozen."""
        from sclated.runtime import snapshot

        if self._sandbox is None or self._services is None:
            raise FailedPrecondition("the sandbox is not running", reason="NO_SANDBOX")
        runtime = await self._services.runtime()
        return await snapshot(runtime, self._sandbox.info, dest, on_paused=on_paused)

    async def discard_snapshot(self, image: str) -> None:
        """Remove a snapshot's committed image (a snapshot that could not be recorded)."""
        if not image or self._services is None:
            return
        runtime = await self._services.runtime()
        with contextlib.suppress(SclateError):
            await runtime.remove_image(image)

    async def check_restorable(self, snapshot_dir: Path) -> None:
        """NotFound unless a sandbox can be made from ``snapshot_dir`` (image and archives present)."""
        from sclated.runtime import SnapshotInfo

        sandbox_dir = snapshot_dir / "sandbox"
        info = await SnapshotInfo.load(sandbox_dir)
        missing = [tar for _, tar in info.archives if not await asyncio.to_thread(Path(tar).is_file)]
        if missing:
            raise NotFound(f"snapshot archive(s) {', '.join(missing)} are gone; pick another snapshot")
        if self._services is None:
            raise RuntimeUnavailable("this daemon has no sandbox runtime configured")
        runtime = await self._services.runtime()
        if not await runtime.image_exists(info.image):
            raise NotFound(f"snapshot image {info.image} is not on this engine (removed?); pick another snapshot")

    async def detach(self) -> None:
        """Leave the container running (daemon shutdown): a resumed run adopts it."""
        await self._stop_model_watch()
        if self._stream is not None:
            await self._stream.close()
        if self._control is not None:
            await self._control.close()
        if self._bridge is not None:
            await self._bridge.close()

    def _sandbox_root(self, env: RunEnvironment) -> Path:
        """Where the sandbox's control directory lives: a short path, because the
        Unix sockets in it must fit in 107 bytes whatever the state directory is."""
        assert self._services is not None
        return self._services.sockets_dir / hashlib.sha256(env.run_key.encode()).hexdigest()[:16]

    # -- wait ------------------------------------------------------------------------------
    async def _wait(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        env = self._env
        assert env is not None
        now = env.sim_now()
        if isinstance(msg.get("until_ns"), int):
            until = int(msg["until_ns"])
        elif isinstance(msg.get("for_ns"), int) and msg["for_ns"] >= 0:
            until = now + int(msg["for_ns"])
        else:
            raise InvalidArgument("wait needs until_ns or a non-negative for_ns (integers)", field="until_ns")
        until = max(until, now)
        lease = env.turn_lease()
        woke = await env.sleep_until(until, lease=lease, waiter="sandbox")
        if lease is not None:
            # The turn goes on after the wait: it is busy again.
            env.set_turn_lease(env.leases.acquire("turn:after-wait", "reference", sim_ns=woke))
        return {"woke_ns": woke}

    # -- AgentAdapter ---------------------------------------------------------------------
    def _harness(self) -> Any:
        if self._inner is None:
            raise FailedPrecondition("the sandboxed harness is not prepared")
        return self._inner

    async def start_session(self, session: str) -> None:
        await self._harness().start_session(session)

    async def stop_session(self) -> None:
        if self._inner is not None:
            await self._inner.stop_session()

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        result: TurnResult = await self._harness().deliver(prompt)
        return result

    async def save_state(self, dest: Path) -> None:
        await self._harness().save_state(dest)

    async def restore_state(self, src: Path) -> None:
        await self._harness().restore_state(src)

    def routines(self) -> Sequence[EventSource]:
        from adapters.reference_harness import CRONTAB, HarnessCronSource, parse_crontab
        from sclated.runtime import next_fire

        return [HarnessCronSource(parse_crontab(CRONTAB.read_text()), next_fire, name="reference:cron", holder="cron")]

    async def consolidate(self) -> None:
        # The harness consolidates from its own crontab (an event source of
        # this run); a benchmark's consolidation request is satisfied by it.
        if "consolidate" not in self._crontab_text:
            await self.run_job("python3 /opt/agent/agent.py consolidate", holder="benchmark", timeout_s=600)

    # -- commands inside ---------------------------------------------------------------
    async def exec_in_workspace(self, command: str, *, timeout_s: float = 120.0) -> tuple[int, str]:
        if self._sandbox is None:
            raise FailedPrecondition("the sandbox is not running")
        res = await self._sandbox.exec(["sh", "-c", command], workdir="/workspace", timeout_s=timeout_s)
        return res.exit_code, (res.stdout + res.stderr)[-8000:].decode(errors="replace")

    async def run_job(self, command: str, *, holder: str, timeout_s: float) -> tuple[int, str]:
        """A cron job: model calls go through the memory listener, so they are attributed to memory."""
        if self._sandbox is None:
            raise FailedPrecondition("the sandbox is not running")
        env = {"OPENAI_BASE_URL": f"http://127.0.0.1:{AGENT_PORTS['memory']}/v1"}
        res = await self._sandbox.exec(["sh", "-c", command], workdir="/workspace", env=env, timeout_s=timeout_s)
        if res.exit_code != 0:
            log.warning("job %r (%s) exited %s: %r", command, holder, res.exit_code, res.stderr[-500:])
        return res.exit_code, (res.stdout + res.stderr)[-8000:].decode(errors="replace")

    async def seed_workspace(self, src: Path, dest: str) -> None:
        """Copy a host directory's contents into the sandbox (a day's files)."""
        if self._sandbox is None:
            raise FailedPrecondition("the sandbox is not running")
        with tempfile.TemporaryDirectory(prefix="sclate-seed-") as tmp:
            tar_path = Path(tmp) / "seed.tar"
            await asyncio.to_thread(_tar_dir, src, tar_path)
            runtime = await self._services.runtime() if self._services else None
            assert runtime is not None
            await self._sandbox.sh(f"mkdir -p {shlex.quote(dest)}", timeout_s=30)
            await runtime.put_archive(self._sandbox.id, dest, tar_path)


def _tar_dir(src: Path, out: Path) -> None:
    if not src.is_dir():
        raise InvalidArgument(f"workspace seed {str(src)!r} is not a directory", field="workspace_seed")
    with tarfile.open(out, "w") as tar:
        for child in sorted(src.iterdir()):
            tar.add(child, arcname=child.name)


async def _image_ref(name: str) -> str:
    from adapters.reference_harness.image import register_image
    from sclated.runtime import image_ref

    register_image()
    try:
        ref: str = await image_ref(name)
    except SclateError as exc:
        raise FailedPrecondition(
            f"image {name!r} is not built: run `sclate images build` (make images). {exc.message}",
            reason="IMAGE_MISSING",
        ) from exc
    return ref
