"""A sandboxed harness as a run's agent: its declaration on a sandbox session.

The harness (``adapters.SandboxHarness``) says what it is and how it is driven;
the sandbox room (:class:`sclated.sandbox.SandboxSession`) wires container,
model bridge, capture and time. This puts the two together behind the
:class:`adapters.AgentAdapter` a run talks to, with the facets every sandbox
gives: a workspace, jobs (attributed to the memory role), and files that
snapshots keep. A run's memory system (``adapters.memory``) rides along: the
pair's image, the system's server started before the harness and stopped
after it, its calls sent to the memory listener.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from adapters import (
    AgentEnvironment,
    AgentFiles,
    Capability,
    ExecOutput,
    HarnessDeclaration,
    Jobs,
    LineChannel,
    ProxyEndpoints,
    SandboxHarness,
    SeededSessions,
    SessionSeed,
    TurnResult,
    Workspace,
)
from adapters.memory import MemorySystem, memory_environment, memory_image, memory_routines, memory_system
from sclated.errors import FailedPrecondition, InvalidArgument, RuntimeUnavailable, describe
from sclated.runtime import Limits
from sclated.sandbox import SandboxOptions, SandboxServices, SandboxSession, SessionConfig, SessionStart
from sclated.scheduler import DeliverPrompt, EventSource, EventSpec

__all__ = ["SANDBOX_CAPABILITIES", "SandboxedAgent", "sandboxed_factory"]

SANDBOX_CAPABILITIES = frozenset({Capability.WORKSPACE, Capability.JOBS, Capability.FILE_SNAPSHOTS})
"""What every sandbox gives a harness, whatever it declares."""


HarnessMaker = Callable[[Mapping[str, Any], MemorySystem | None], SandboxHarness]


def sandboxed_factory(
    make: HarnessMaker, declaration: HarnessDeclaration, services: SandboxServices | None
) -> Callable[[Mapping[str, Any], str], SandboxedAgent]:
    """An agent factory: run options split between the sandbox's and the harness's own,
    the memory system checked against what the harness offers."""
    declared = declaration.options

    def factory(options: Mapping[str, Any], memory: str) -> SandboxedAgent:
        unknown = set(options) - SandboxOptions.KEYS - declared
        if unknown:
            raise InvalidArgument(
                f"unknown option(s) {', '.join(sorted(unknown))}; this harness takes "
                f"{', '.join(sorted(SandboxOptions.KEYS | declared))}",
                field="run.agent.options",
            )
        system = memory_system(memory, declaration.memory_systems, declaration.name)
        own = {k: v for k, v in options.items() if k not in SandboxOptions.KEYS}
        return SandboxedAgent(make(own, system), SandboxOptions.parse(options), services, memory=system)

    return factory


class _HarnessAccess:
    """What a harness is given (adapters.SandboxAccess): its sandbox session, and
    the run's scheduler for the work it schedules itself. The sandbox room knows
    nothing of schedulers; this joins the two."""

    def __init__(self, session: SandboxSession, schedule: Callable[[Sequence[EventSpec]], None] | None) -> None:
        self._session = session
        self._schedule = schedule

    @property
    def endpoints(self) -> ProxyEndpoints:
        return self._session.endpoints

    async def exec(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout_s: float = 120.0
    ) -> ExecOutput:
        return await self._session.exec(argv, env=env, timeout_s=timeout_s)

    async def open_channel(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> LineChannel:
        return await self._session.open_channel(argv, env=env)

    def schedule(self, specs: Sequence[EventSpec]) -> None:
        if self._schedule is None:
            raise FailedPrecondition("this agent runs outside a run: nothing can be scheduled", reason="NO_RUN")
        self._schedule(specs)


class SandboxedAgent:
    """Implements :class:`adapters.AgentAdapter` and its Workspace, Jobs and AgentFiles facets."""

    def __init__(
        self,
        harness: SandboxHarness,
        options: SandboxOptions,
        services: SandboxServices | None,
        *,
        memory: MemorySystem | None = None,
    ) -> None:
        self.harness = harness
        self.declaration = harness.declaration
        self.memory = memory
        self._options = options
        self._services = services
        self._session: SandboxSession | None = None
        self._embedded_model = False

    @property
    def image(self) -> str:
        d = self.declaration
        return d.image if self.memory is None else memory_image(d.image, self.memory)

    def _environment(self, endpoints: ProxyEndpoints) -> Mapping[str, str]:
        """The harness's environment, and where its memory system's calls go (the memory
        listener; the capture proxy reads the system's name from it too)."""
        env = dict(self.harness.environment(endpoints))
        if self.memory is not None:
            env.update(memory_environment(self.memory, endpoints, embedded_model=self._embedded_model))
        return env

    # -- declared -----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.declaration.name

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self.declaration.capabilities | SANDBOX_CAPABILITIES

    @property
    def workspace(self) -> Workspace:
        return self

    @property
    def jobs(self) -> Jobs:
        return self

    @property
    def files(self) -> AgentFiles:
        return self

    @property
    def sessions(self) -> SeededSessions | None:
        return self if Capability.SEEDED_SESSIONS in self.declaration.capabilities else None

    # -- around the run -----------------------------------------------------------------
    async def prepare(self, env: AgentEnvironment) -> None:
        if self._services is None:
            raise RuntimeUnavailable("this daemon has no sandbox runtime configured")
        r = env.resources
        self._embedded_model = not env.model_base_url
        config = SessionConfig(
            run_key=env.run_key,
            tenant=env.tenant,
            run_id=env.run_id,
            image=self.image,
            model_base_url=env.model_base_url,
            model_name=env.model_name,
            model_api_key_env=env.model_api_key_env,
            model_skip_token_ids=env.model_skip_token_ids,
            model_sampling_seed=env.model_sampling_seed,
            limits=Limits(
                memory_bytes=r.memory_bytes or 2 * 1024**3,
                nano_cpus=int((r.cpus or 1.0) * 1e9),
                pids=r.pids or 512,
            ),
            options=self._options,
            state_dirs=self.declaration.state_dirs,
        )
        session = SandboxSession(
            self._services,
            config,
            clock=env.clock,
            leases=env.leases,
            on_wait=env.wait,
            fail_run=env.fail_run,
            on_world=env.world,
        )
        if env.restore_from is not None:
            start = SessionStart.RESTORE
        elif env.resume:
            start = SessionStart.ADOPT
        else:
            start = SessionStart.FRESH
        await session.open(start, env=self._environment, snapshot_dir=env.restore_from)
        self._session = session
        try:
            if start is SessionStart.FRESH and env.workspace_seed is not None:
                await session.put_dir(env.workspace_seed, "/workspace")
            await self._start_memory_server(session)
            await self.harness.start(_HarnessAccess(session, env.schedule))
            await self._probe_process(session)
        except BaseException:
            self._session = None
            await session.close()
            raise

    async def _start_memory_server(self, session: SandboxSession) -> None:
        server = self.memory.server if self.memory is not None else None
        if server is None:
            return
        env = self._environment(session.endpoints)
        out = await session.exec(
            server.start, env=env, workdir="/", timeout_s=server.start_timeout_s, user=server.user or None
        )
        if out.exit_code != 0:
            raise FailedPrecondition(
                f"memory system {self.memory.name if self.memory else ''} did not start "
                f"(exit {out.exit_code}): {out.output[-800:]}",
                reason="MEMORY_SYSTEM",
            )

    async def _stop_memory_server(self, session: SandboxSession) -> None:
        server = self.memory.server if self.memory is not None else None
        if server is not None:
            await session.exec(server.stop, workdir="/", timeout_s=120, user=server.user or None)

    async def close(self, *, keep: bool = False) -> None:
        session, self._session = self._session, None
        try:
            await self.harness.stop()
            if session is not None and not keep:
                # Its database is shut down cleanly: the files a last look finds are whole.
                await self._stop_memory_server(session)
        finally:
            if session is not None:
                await session.close(keep=keep)
                self._capture_report = session.capture_report

    _capture_report: dict[str, Any] | None = None

    def capture_report(self) -> Mapping[str, Any] | None:
        return self._capture_report

    async def _probe_process(self, session: SandboxSession) -> None:
        d = self.declaration
        report: dict[str, Any] = {"harness": d.name, "version": d.version, "process_clock": d.process_clock}
        if d.executable:
            probe = await session.probe_process(d.executable)
            report["probe"] = probe.as_dict()
            if probe.clock != d.process_clock:
                report["warning"] = (
                    f"{d.name} is declared to read the {d.process_clock} clock, but its executable "
                    f"{probe.executable} is {probe.linked}ly linked ({probe.clock} clock)"
                )
        self._process_report = report

    _process_report: dict[str, Any] | None = None

    def process_report(self) -> Mapping[str, Any] | None:
        return self._process_report

    def _live(self) -> SandboxSession:
        if self._session is None:
            raise FailedPrecondition("the sandbox is not running", reason="NO_SANDBOX")
        return self._session

    # -- the conversation -----------------------------------------------------------------
    async def start_session(self, session: str) -> None:
        try:
            await self.harness.start_session(session)
        except Exception as exc:
            raise await self._explained(exc) from exc

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        try:
            return await self.harness.deliver(prompt)
        except TimeoutError as exc:
            # A harness's own turn limit runs out as a bare TimeoutError: say which turn ended so.
            timed_out = FailedPrecondition(
                f"harness {self.declaration.name!r}: the turn did not end within its time limit "
                "(the harness's turn_timeout_s): a model or memory call may have been too slow",
                reason="TURN_TIMEOUT",
            )
            raise await self._explained(timed_out) from exc
        except Exception as exc:
            raise await self._explained(exc) from exc

    async def _explained(self, exc: Exception) -> Exception:
        """The harness failed: when the sandbox says why (its container is not running, the
        harness process died), the error names that first; otherwise it is left as it is."""
        session = self._session
        why = await session.explain() if session is not None else None
        if why is None:
            return exc
        detail = describe(exc)
        return FailedPrecondition(f"{why}; {detail}", reason="SANDBOX_FAILED")

    async def stop_session(self) -> None:
        await self.harness.stop_session()

    async def seed_session(self, seed: SessionSeed) -> None:
        if Capability.SEEDED_SESSIONS not in self.declaration.capabilities:
            raise FailedPrecondition(
                f"harness {self.declaration.name!r} cannot take a recorded session history", reason="UNSUPPORTED"
            )
        await self.harness.seed_session(seed)

    async def save_state(self, dest: Path) -> None:
        if Capability.SESSION_STATE in self.declaration.capabilities:
            await self.harness.save_state(dest)

    async def restore_state(self, src: Path) -> None:
        if Capability.SESSION_STATE in self.declaration.capabilities:
            await self.harness.restore_state(src)

    def routines(self) -> Sequence[EventSource]:
        return [*self.harness.routines(), *memory_routines(self.memory)]

    # -- Workspace --------------------------------------------------------------------------
    async def exec(self, command: str, *, timeout_s: float = 120.0) -> tuple[int, str]:
        out = await self._live().exec(["sh", "-c", command], workdir="/workspace", timeout_s=timeout_s)
        return out.exit_code, out.output

    async def seed(self, src: Path, dest: str) -> None:
        await self._live().put_dir(src, dest)

    async def export(self, src: str, dest: Path) -> None:
        await self._live().get_dir(src, dest)

    async def clear(self) -> None:
        keep = " ".join(f"! -name {shlex.quote(name)}" for name in self.declaration.workspace_memory)
        out = await self._live().exec(
            ["sh", "-c", f"find /workspace -mindepth 1 -maxdepth 1 {keep} -exec rm -rf {{}} +"],
            workdir="/",
            timeout_s=120,
        )
        if out.exit_code != 0:
            raise FailedPrecondition(f"clearing the workspace failed: {out.output[-400:]}", reason="WORKSPACE")

    # -- Jobs ----------------------------------------------------------------------------------
    async def run_job(self, command: str, *, holder: str, timeout_s: float) -> tuple[int, str]:
        """A job of the harness: its model calls go to the memory listener, so they count as memory."""
        session = self._live()
        env = self.harness.environment(session.endpoints.as_role("memory"))
        out = await session.exec(["sh", "-c", command], env=env, workdir="/workspace", timeout_s=timeout_s)
        await self.harness.job_ended(command, out)
        return out.exit_code, out.output

    async def consolidate(self) -> None:
        command = self.harness.consolidate_command()
        if command is not None:
            await self.run_job(command, holder="benchmark", timeout_s=600)
        server = self.memory.server if self.memory is not None else None
        if server is not None and server.consolidate:
            await self.run_job(shlex.join(server.consolidate), holder="benchmark", timeout_s=900)

    # -- AgentFiles ---------------------------------------------------------------------------
    async def snapshot(self, dest: Path, *, on_paused: Callable[[], Awaitable[None]] | None = None) -> dict[str, Any]:
        info = await self._live().snapshot(dest, on_paused=on_paused)
        saved: dict[str, Any] = json.loads(info.to_json())
        return saved

    async def check_restorable(self, snapshot_dir: Path) -> None:
        if self._services is None:
            raise RuntimeUnavailable("this daemon has no sandbox runtime configured")
        await SandboxSession.check_restorable(await self._services.runtime(), snapshot_dir)

    async def discard(self, saved: Mapping[str, Any]) -> None:
        image = str(saved.get("image", ""))
        if image and self._services is not None:
            runtime = await self._services.runtime()
            await runtime.remove_image(image)
