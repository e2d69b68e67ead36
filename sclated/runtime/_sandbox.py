"""A run's sandbox: its host directory, its container and its simulated time.

Host layout, mounted read-only at ``/run/sclate`` inside (the directory, never
single files: a rename replaces an inode and a file bind mount would keep
showing the old one)::

    <run_dir>/sandbox/
        time/faketime.rc    libfaketime timestamp file (+offset), rewritten by rename
        time/probe.rc       scratch clock for the start-up probe (never the run's clock)
        sclate.sock         control socket (served by sclated.runs)
        model.sock          model path (served by ModelBridge)

Read-only because the agent must not be able to move its own clock; connecting
to a Unix socket on a read-only mount works (sockets are not written through
the filesystem).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sclated.errors import FailedPrecondition, InvalidArgument, SclateError
from sclated.runtime._runtime import Runtime
from sclated.runtime._simtime import (
    FAKETIME_ENV,
    SANDBOX_DIR,
    freeze_time,
    publish_time,
)
from sclated.runtime._snapshot import SnapshotInfo, restore
from sclated.runtime._spec import (
    ContainerInfo,
    ExecResult,
    Limits,
    Mount,
    SandboxSpec,
    VolumeMount,
)

__all__ = [
    "PROBE_JUMP_NS",
    "Sandbox",
    "SandboxManager",
    "SandboxPaths",
    "TimeProbe",
]

_NS = 1_000_000_000
PROBE_JUMP_NS = 3 * 86400 * _NS
# Inside vs expected: exec round trips and `date`'s whole seconds.
_PROBE_TOLERANCE_S = 2.0
_PROBE_FILE = f"{SANDBOX_DIR}/time/probe.rc"

# One exec: `date` (a C program: the libc path) then Python (the interpreter the
# harnesses use), including a sleep, which Debian's libfaketime 0.9.10 breaks.
_PROBE_SCRIPT = (
    "date -u +%s; "
    'python3 -c "import time; t = time.time(); time.sleep(0.01); '
    'print(repr(t)); print(repr(time.time() - t))"'
)


@dataclass(frozen=True)
class SandboxPaths:
    root: Path

    @property
    def time_dir(self) -> Path:
        return self.root / "time"

    @property
    def time_file(self) -> Path:
        return self.time_dir / "faketime.rc"

    @property
    def probe_file(self) -> Path:
        return self.time_dir / "probe.rc"

    @property
    def control_socket(self) -> Path:
        return self.root / "sclate.sock"

    @property
    def model_socket(self) -> Path:
        return self.root / "model.sock"

    def create(self) -> None:
        self.time_dir.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        self.time_dir.chmod(0o755)


@dataclass(frozen=True)
class TimeProbe:
    """What the start-up probe saw (seconds since the epoch, simulated)."""

    expected_s: float
    date_s: int
    python_s: float
    sleep_s: float
    jump_expected_s: float
    jump_date_s: int
    jump_python_s: float
    seconds: float

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in dataclasses.asdict(self).items()}


class Sandbox:
    """One started container of a run, with its host directory."""

    def __init__(self, runtime: Runtime, info: ContainerInfo, spec: SandboxSpec, paths: SandboxPaths) -> None:
        self.runtime = runtime
        self.info = info
        self.spec = spec
        self.paths = paths
        self.last_sim_ns: int | None = None

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def run(self) -> str:
        return self.spec.run

    async def publish_time(self, sim_ns: int) -> None:
        """Set the sandbox's simulated time (takes effect at the next time() call inside)."""
        await publish_time(self.paths.time_file, sim_ns)
        self.last_sim_ns = sim_ns

    async def freeze_time(self, sim_ns: int) -> None:
        """Set the sandbox's simulated time and hold it still (a DISCRETE run between jumps)."""
        await freeze_time(self.paths.time_file, sim_ns)
        self.last_sim_ns = sim_ns

    async def sim_now_ns(self) -> int:
        """The sandbox's current simulated time as last published (flowing at wall rate, or frozen)."""
        text = (await asyncio.to_thread(self.paths.time_file.read_text)).strip()
        if text[:1] not in "+-":
            return _parse_frozen_ns(text)
        return time.time_ns() + _parse_offset_ns(text)

    async def exec(
        self,
        cmd: Sequence[str],
        *,
        user: str | None = None,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> ExecResult:
        return await self.runtime.exec(self.id, cmd, user=user, workdir=workdir, env=env, timeout_s=timeout_s)

    async def sh(self, script: str, *, timeout_s: float | None = None) -> ExecResult:
        return await self.exec(["sh", "-c", script], timeout_s=timeout_s)

    async def pause(self) -> None:
        await self.runtime.pause(self.id)

    async def unpause(self) -> None:
        await self.runtime.unpause(self.id)

    async def stop(self, *, grace_s: float = 10.0) -> None:
        await self.runtime.stop(self.id, grace_s=grace_s)

    async def remove(self) -> None:
        """Remove the container, and the run's network and volumes unless still in use."""
        await self.runtime.remove(self.id)
        await self.runtime.remove_run_resources(self.spec)

    async def probe_time(self) -> TimeProbe:
        """Check that processes inside follow simulated time; FailedPrecondition if not.

        The run's clock is only read (time never goes backwards for the agent);
        the 3-day jump is exercised on a scratch timestamp file in the same
        mounted directory, which proves the same path: rename, re-read, jump.
        """
        started = time.monotonic()
        offset_ns = await asyncio.to_thread(lambda: _parse_offset_ns(self.paths.time_file.read_text().strip()))
        first = await self._probe_once(None)
        expected = (time.time_ns() + offset_ns) / _NS
        date_s, py_s, sleep_s = first
        self._check("date", date_s, expected, first)
        self._check("Python time.time()", py_s, expected, first)

        base_ns = time.time_ns() + offset_ns
        await publish_time(self.paths.probe_file, base_ns + PROBE_JUMP_NS)
        jumped = await self._probe_once(_PROBE_FILE)
        jump_expected = (time.time_ns() + offset_ns + PROBE_JUMP_NS) / _NS
        self._check("date after a 3-day jump", jumped[0], jump_expected, jumped)
        self._check("Python time.time() after a 3-day jump", jumped[1], jump_expected, jumped)
        return TimeProbe(
            expected_s=expected,
            date_s=int(date_s),
            python_s=py_s,
            sleep_s=sleep_s,
            jump_expected_s=jump_expected,
            jump_date_s=int(jumped[0]),
            jump_python_s=jumped[1],
            seconds=time.monotonic() - started,
        )

    async def _probe_once(self, time_file: str | None) -> tuple[float, float, float]:
        env = {"FAKETIME_TIMESTAMP_FILE": time_file} if time_file else None
        result = await self.exec(["sh", "-c", _PROBE_SCRIPT], env=env, timeout_s=20)
        lines = result.stdout.decode(errors="replace").split()
        if not result.ok or len(lines) != 3:
            raise FailedPrecondition(
                f"time probe in sandbox {self.info.name}: the probe command failed "
                f"(exit {result.exit_code}): {result.stderr.decode(errors='replace')[-400:]!r}. "
                "If Python's time.sleep fails with EINVAL the image has Debian's libfaketime "
                "0.9.10; rebuild the images with `sclated images build`.",
                reason="TIME_PROBE_FAILED",
            )
        try:
            values = (float(lines[0]), float(lines[1]), float(lines[2]))
        except ValueError:
            raise FailedPrecondition(
                f"time probe in sandbox {self.info.name}: unreadable output {lines!r}",
                reason="TIME_PROBE_FAILED",
            ) from None
        if not 0.005 <= values[2] < 5:
            raise FailedPrecondition(
                f"time probe in sandbox {self.info.name}: time.sleep(0.01) took "
                f"{values[2]:.3f} simulated seconds; libfaketime is faking the sleep clock. "
                "Keep DONT_FAKE_MONOTONIC=1 in the sandbox environment.",
                reason="TIME_PROBE_FAILED",
            )
        return values

    def _check(self, what: str, got: float, expected: float, raw: tuple[float, float, float]) -> None:
        if abs(got - expected) > _PROBE_TOLERANCE_S:
            raise FailedPrecondition(
                f"time probe in sandbox {self.info.name}: {what} reads {got:.3f} but the "
                f"run's simulated time is {expected:.3f} (off by {got - expected:+.1f} s; "
                f"raw {raw}). Check that the image has {FAKETIME_ENV['LD_PRELOAD']} "
                f"(libfaketime's MT build, see sclated/runtime/_images.py), that {self.paths.time_dir} is mounted at "
                f"{SANDBOX_DIR}/time, and that the program is not statically linked "
                "(Go and static binaries ignore libfaketime).",
                reason="TIME_PROBE_FAILED",
            )


def _parse_frozen_ns(text: str) -> int:
    stamp, _, frac = text.partition(".")
    try:
        whole = dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.UTC)
        return int(whole.timestamp()) * _NS + int((frac or "0").ljust(9, "0")[:9])
    except ValueError:
        raise InvalidArgument(f"unreadable faketime time {text!r}") from None


def _parse_offset_ns(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    whole, _, frac = body.partition(".")
    try:
        return sign * (int(whole or "0") * _NS + int((frac + "000000000")[:9]))
    except ValueError:
        raise InvalidArgument(f"unreadable faketime offset {text!r}") from None


class SandboxManager:
    """Creates sandboxes with the run directory layout, simulated time and hardening."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    @staticmethod
    def paths_for(run_dir: Path) -> SandboxPaths:
        return SandboxPaths(Path(run_dir) / "sandbox")

    def spec_for(
        self,
        *,
        image: str,
        run: str,
        tenant: str,
        run_dir: Path,
        env: Mapping[str, str] | None = None,
        mounts: Sequence[Mount] = (),
        limits: Limits | None = None,
        volumes: Sequence[VolumeMount] = (),
        network_mode: str = "none",
        working_dir: str = "/workspace",
        command: Sequence[str] | None = None,
        user: str | None = None,
        role: str = "agent",
    ) -> SandboxSpec:
        """The full spec: the caller's plus the control directory mount and libfaketime env."""
        paths = self.paths_for(run_dir)
        for m in mounts:
            if m.target == SANDBOX_DIR or m.target.startswith(SANDBOX_DIR + "/"):
                raise InvalidArgument(
                    f"mount target {m.target} is reserved for sclate's control directory",
                    field="mounts",
                )
        merged = dict(env or {})
        reserved = sorted(set(merged) & set(FAKETIME_ENV))
        if reserved:
            raise InvalidArgument(
                f"env {', '.join(reserved)} is set by sclate (simulated time); remove it",
                field="env",
            )
        merged.update(FAKETIME_ENV)
        merged.setdefault("TZ", "UTC")
        return SandboxSpec(
            image=image,
            run=run,
            tenant=tenant,
            env=merged,
            mounts=(Mount(str(paths.root), SANDBOX_DIR, read_only=True), *mounts),
            limits=limits or Limits(),
            volumes=tuple(volumes),
            network_mode=network_mode,
            working_dir=working_dir,
            command=None if command is None else tuple(command),
            user=user,
            role=role,
        )

    async def create(
        self,
        spec: SandboxSpec,
        run_dir: Path,
        *,
        sim_ns: int,
        probe: bool = True,
    ) -> Sandbox:
        """Lay out ``run_dir/sandbox``, publish ``sim_ns``, create and start the container,
        then (``probe``) check simulated time inside. Nothing is left behind on failure."""
        paths = await self._prepared(spec, run_dir, sim_ns)
        info = await self.runtime.create(spec)
        return await self._ready(Sandbox(self.runtime, info, spec, paths), sim_ns, start=True, probe=probe)

    async def restore(
        self, snapshot: SnapshotInfo, spec: SandboxSpec, run_dir: Path, *, sim_ns: int, probe: bool = True
    ) -> Sandbox:
        """A fresh, started container from a snapshot (its committed image and archives), seeing
        ``sim_ns`` from its first process; then (``probe``) simulated time is checked inside."""
        paths = await self._prepared(spec, run_dir, sim_ns)
        info = await restore(self.runtime, snapshot, spec)  # started already
        return await self._ready(Sandbox(self.runtime, info, spec, paths), sim_ns, start=False, probe=probe)

    async def _ready(self, sandbox: Sandbox, sim_ns: int, *, start: bool, probe: bool) -> Sandbox:
        """Start it (``start``) and check simulated time inside (``probe``); removed on failure."""
        sandbox.last_sim_ns = sim_ns
        try:
            if start:
                await self.runtime.start(sandbox.id)
            if probe:
                await sandbox.probe_time()
        except BaseException:
            with contextlib.suppress(SclateError):
                await asyncio.shield(sandbox.remove())
            raise
        return sandbox

    async def _prepared(self, spec: SandboxSpec, run_dir: Path, sim_ns: int) -> SandboxPaths:
        paths = self.paths_for(run_dir)
        if not any(m.source == str(paths.root) and m.target == SANDBOX_DIR for m in spec.mounts):
            raise InvalidArgument(
                "spec does not mount the run's sandbox directory at /run/sclate; "
                "build it with SandboxManager.spec_for(...)",
                field="mounts",
            )
        await asyncio.to_thread(paths.create)
        # Before start: the first process inside must already see simulated time.
        await publish_time(paths.time_file, sim_ns)
        return paths

    async def attach(self, info: ContainerInfo, spec: SandboxSpec, run_dir: Path) -> Sandbox:
        """A Sandbox for an adopted container (after a daemon restart)."""
        return Sandbox(self.runtime, info, spec, self.paths_for(run_dir))
