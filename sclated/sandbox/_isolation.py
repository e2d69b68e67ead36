"""Sandbox escape checks: attempts from inside a sandbox set up as a run's, each expected to fail.

Two sandboxes are started the way :class:`SandboxSession` starts a run's (the
same :meth:`SandboxManager.spec_for` spec: hardened host config, the run's
limits, its control directory with the control socket and the model socket
mounted read-only at ``/run/sclate``, network ``none``); the first one, *A*,
tries to get out, the second, *B*, is "another run" for A to reach. The host
side starts real listeners (on 127.0.0.1, on the engine's bridge gateway, on
all addresses), each answering with a token of its own, so a connection counts
as a breach only when it really reached the host.

From A: the Docker socket (paths, mounted sockets, TCP 2375/2376), the host's
loopback and addresses, B (its listener, its control socket), the outside
(TCP, DNS), writes to the control directory, kernel settings and the host's
files and disk, B's control directory, capabilities, setuid programs,
namespaces and mounts, raw sockets, chown, the clock; then a fork bomb, a
memory hog and a disk fill, each bounded just past the limit it tests (where
the engine sets no disk size, the disk fill meets a run's disk watchdog, with a
small limit). The model path is checked to work: the one way out a sandbox has.

Each check gives an :class:`IsolationResult`; ``sclated doctor`` lists them.
The in-sandbox side is ``_isolation_probe`` (standard library only).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sclated.errors import NotFound, SclateError
from sclated.runtime import SANDBOX_DIR as CONTROL_DIR_INSIDE
from sclated.runtime import (
    DockerRuntime,
    EngineFacts,
    ExecResult,
    Limits,
    ModelBridge,
    Runtime,
    Sandbox,
    SandboxManager,
    image_ref,
)
from sclated.sandbox import _isolation_probe
from sclated.sandbox._control import ControlServer
from sclated.sandbox._disk_watch import DiskVerdict, DiskWatchdog, SandboxDiskMeter, size_text

__all__ = ["CHECKS", "IsolationResult", "judge_attempts", "run_isolation", "run_isolation_checks"]

_MIB = 1 << 20
NOBODY = "65534:65534"
_PROBE_SOURCE = Path(_isolation_probe.__file__).read_text()
_DISK_UNBOUNDED_WRITE = 32 * _MIB
"""What the disk check writes when nothing bounds the disk: enough to show it, no more."""
WATCHDOG_DISK_LIMIT = 64 * _MIB
WATCHDOG_INTERVAL_S = 1.0
"""The disk check's watchdog: a run's (SandboxSession's), with a small limit and a short interval."""
_WATCHDOG_OVERSHOOT = 64 * _MIB
"""How far past the watchdog's limit the writer goes (then it holds what it wrote)."""
_WATCHDOG_HOLD_S = 20.0
"""How long the writer holds it: the watchdog must have stopped the sandbox by then."""
_OUTSIDE = (("1.1.1.1", 443), ("8.8.8.8", 53), ("9.9.9.9", 443))
_OUTSIDE_NAMES = ("pypi.org", "registry-1.docker.io")


@dataclass(frozen=True)
class IsolationResult:
    """One escape check: what was expected, what was seen, and what to do if it failed."""

    name: str
    expected: str
    observed: str
    passed: bool
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Check:
    name: str
    expected: str
    fix: str


_HARDENING = "sandboxes must keep sclated.runtime's hardened_host_config; report this as a bug"
CHECKS: tuple[_Check, ...] = (
    _Check(
        "model path", "the model socket reaches the run's model endpoint", "check the model bridge (`sclated doctor`)"
    ),
    _Check(
        "docker socket",
        "no Docker socket (paths, mounted sockets, TCP 2375/2376 on the host) is reachable",
        "never mount the engine's socket into a sandbox, and do not expose the engine on TCP",
    ),
    _Check(
        "host loopback",
        "a service on the host's 127.0.0.1 is not reachable",
        "keep sandboxes on network mode none (never host)",
    ),
    _Check(
        "host addresses",
        "a service on the host's bridge gateway and other addresses is not reachable",
        "keep sandboxes on network mode none; a bridge network reaches the host",
    ),
    _Check(
        "other sandbox",
        "another run's sandbox (its addresses, its control socket) is not reachable",
        "keep sandboxes on network mode none, each with only its own control directory",
    ),
    _Check(
        "outside",
        "no outside address is reachable and no name resolves",
        "keep sandboxes on network mode none; the model path is the only way out",
    ),
    _Check(
        "control directory read-only",
        f"{CONTROL_DIR_INSIDE} (the clock file, the sockets) cannot be written",
        "mount the control directory read-only (SandboxManager.spec_for does)",
    ),
    _Check(
        "kernel settings",
        "/proc/sys, /proc/sysrq-trigger, /sys and the sandbox's cgroup limits cannot be written",
        _HARDENING,
    ),
    _Check(
        "host files",
        "host paths are not visible or writable, and no block device of the host can be made or read",
        _HARDENING,
    ),
    _Check(
        "other control directory",
        "another run's control directory is not visible",
        "mount each run's own control directory only, never a directory holding several",
    ),
    _Check(
        "capabilities",
        "no capabilities (effective, permitted, bounding, ambient), no-new-privileges set, seccomp on",
        _HARDENING,
    ),
    _Check(
        "setuid",
        "a setuid-root program run by an unprivileged user does not get uid 0",
        "keep no-new-privileges in the sandbox's security options",
    ),
    _Check("namespaces and mounts", "unshare and mount are refused", _HARDENING),
    _Check("raw sockets", "raw and packet sockets are refused (no CAP_NET_RAW)", _HARDENING),
    _Check("ownership", "root cannot give a file away (no CAP_CHOWN)", _HARDENING),
    _Check("clock", "settimeofday is refused (no CAP_SYS_TIME): the host's clock is safe", _HARDENING),
    _Check(
        "fork bomb",
        "forking stops at the sandbox's pids limit and the host still starts processes",
        "set a pids limit on every sandbox (Limits.pids)",
    ),
    _Check(
        "memory hog",
        "a process allocating past the sandbox's memory limit is OOM-killed; the sandbox lives on",
        "set a memory limit with no swap on every sandbox (Limits.memory_bytes)",
    ),
    _Check(
        "disk",
        "writing past the sandbox's disk limit is stopped: by the engine's size limit, or the disk watchdog",
        "every sandbox needs a disk limit: the engine's per-container size (Limits.disk_bytes, which needs its "
        "data root on xfs mounted with pquota) or sclate's disk watchdog (a run's disk_limit_gb), which needs "
        "the engine to report the writable layer's size (inspect with size: SizeRw)",
    ),
)
_BY_NAME = {c.name: c for c in CHECKS}
# The in-sandbox probe behind each attempt-based check (the rest are judged here).
_PROBE_OF = {
    "model path": "model_path",
    "docker socket": "docker_socket",
    "host loopback": "host_loopback",
    "host addresses": "host_addresses",
    "other sandbox": "other_sandbox",
    "outside": "outside",
    "control directory read-only": "control_dir_read_only",
    "kernel settings": "kernel_settings",
    "host files": "host_files",
    "other control directory": "other_control_dir",
    "capabilities": "capabilities",
    "namespaces and mounts": "namespaces",
    "raw sockets": "raw_sockets",
    "ownership": "ownership",
    "clock": "clock",
}


def _result(name: str, passed: bool, observed: str, detail: str) -> IsolationResult:
    check = _BY_NAME[name]
    return IsolationResult(name, check.expected, observed[:1500], passed, detail[:1500], "" if passed else check.fix)


def judge_attempts(name: str, attempts: Sequence[Mapping[str, Any]]) -> IsolationResult:
    """A check from its attempts: passed when there were some and none got through."""
    observed = "; ".join(f"{a.get('what')}: {a.get('outcome')}" for a in attempts)
    breaches = [a for a in attempts if a.get("breach")]
    if not attempts:
        return _result(name, False, "nothing was attempted", "the probe made no attempt: it cannot have passed")
    if breaches and name == "model path":
        return _result(
            name, False, observed, "the model socket does not reach the endpoint: the other checks prove less"
        )
    if breaches:
        got = "; ".join(f"{a.get('what')} -> {a.get('outcome')}" for a in breaches)
        return _result(name, False, observed, f"{len(breaches)} of {len(attempts)} attempt(s) got through: {got}")
    if name == "model path":
        return _result(name, True, observed, "the model socket answered with the endpoint's token")
    return _result(name, True, observed, f"all {len(attempts)} attempt(s) refused")


def judge_fork_bomb(
    out: Mapping[str, Any] | None, *, pids_limit: int, peak_pids: int, host_spawn_ms: float | None
) -> IsolationResult:
    """``out``: the bomb's own report (None if it printed none); ``peak_pids``: the container's
    highest pid count seen; ``host_spawn_ms``: how long the host took to start a process meanwhile."""
    name = "fork bomb"
    if out is None:
        return _result(name, False, "the bomb reported nothing", "the probe did not run to its report")
    forks, stopped = int(out.get("forks", 0)), str(out.get("stopped_by", ""))
    spawn = "not measured" if host_spawn_ms is None else f"{host_spawn_ms:.0f} ms"
    observed = (
        f"{forks} forks, stopped by {stopped}; the sandbox held at most {peak_pids} pids "
        f"(limit {pids_limit}); the host started a process in {spawn} meanwhile"
    )
    problems = []
    if stopped != "EAGAIN" or forks >= pids_limit:
        problems.append(f"forking was not stopped by the pids limit ({forks} forks, {stopped})")
    if peak_pids > pids_limit:
        problems.append(f"the sandbox reached {peak_pids} pids, past its limit of {pids_limit}")
    if host_spawn_ms is None or host_spawn_ms > 5000:
        problems.append(f"the host did not start a process within 5 s ({spawn})")
    return _result(name, not problems, observed, "; ".join(problems) or "contained")


def judge_memory_hog(result: ExecResult, *, memory_limit: int, still_running: bool) -> IsolationResult:
    name = "memory hog"
    lines = [ln for ln in result.stdout.decode(errors="replace").split() if ln.isdigit()]
    allocated = int(lines[-1]) if lines else 0
    killed = result.exit_code == 137
    observed = (
        f"exit {result.exit_code} after {allocated // _MIB} MiB allocated "
        f"(limit {memory_limit // _MIB} MiB); the sandbox {'still runs' if still_running else 'is gone'}"
    )
    problems = []
    if not killed:
        problems.append("the hog was not OOM-killed")
    if allocated > memory_limit:
        problems.append(f"it held {allocated // _MIB} MiB, past the limit")
    if not still_running:
        problems.append("the whole sandbox died, not just the hog")
    return _result(name, not problems, observed, "; ".join(problems) or "the OOM killer stopped it within the limit")


def judge_disk(
    out: Mapping[str, Any] | None, *, disk_bytes: int | None, facts: EngineFacts, free_bytes: int | None
) -> IsolationResult:
    """Passed only with a disk limit that stopped the writer; with none, unbounded (failed)."""
    name = "disk"
    where = f"{facts.storage_driver} on {facts.backing_filesystem or 'an unknown file system'} in {facts.root_dir}"
    free = "" if free_bytes is None else f", {free_bytes / (1 << 30):.1f} GiB free there"
    if out is None:
        return _result(name, False, "the writer reported nothing", "the probe did not run to its report")
    written, error = int(out.get("written", 0)), str(out.get("error", ""))
    observed = f"wrote {written // _MIB} MiB to the writable layer" + (f", then {error}" if error else "")
    if disk_bytes is None:
        return _result(
            name,
            False,
            observed,
            f"unbounded: no disk limit is set on sandboxes, so one can write until the engine's disk is full "
            f"({where}{free}); only {_DISK_UNBOUNDED_WRITE // _MIB} MiB were written to show it",
        )
    if error in ("ENOSPC", "EDQUOT") and written <= disk_bytes:
        return _result(name, True, observed, f"stopped within the limit of {disk_bytes // _MIB} MiB ({where})")
    return _result(
        name, False, observed, f"the limit of {disk_bytes // _MIB} MiB did not stop the writer ({where}{free})"
    )


def judge_disk_watchdog(
    lines: Sequence[Mapping[str, Any]],
    verdict: DiskVerdict | None,
    *,
    limit_bytes: int,
    stopped_after_s: float | None,
    still_running: bool,
    facts: EngineFacts,
    free_bytes: int | None,
) -> IsolationResult:
    """A writer past ``limit_bytes``, with the engine bounding nothing: passed only when the disk
    watchdog saw it (``verdict``), and the sandbox was stopped before the writer, done writing,
    had held what it wrote for long (its own report, the last of ``lines``, says it had)."""
    name = "disk"
    engine = (
        f"engine cannot enforce: {facts.storage_driver} on {facts.backing_filesystem or 'an unknown file system'}"
        if facts.storage_driver == "overlay2" and facts.backing_filesystem != "xfs"
        else f"engine limit not used: {facts.storage_driver} on {facts.backing_filesystem or 'unknown'}"
    )
    free = "" if free_bytes is None else f", {free_bytes / (1 << 30):.1f} GiB free in {facts.root_dir}"
    written = max([int(x.get("progress", 0)) for x in lines] + [int(x.get("written", 0)) for x in lines] + [0])
    report = next((x for x in reversed(lines) if "written" in x), None)
    limit = size_text(limit_bytes)
    if verdict is not None:
        when = "" if stopped_after_s is None else f" after {stopped_after_s:.1f} s"
        at = size_text(verdict.usage.total_bytes)
        observed = f"stopped by the disk watchdog at {at} of a {limit} limit{when} ({engine})"
    else:
        observed = (
            f"wrote {size_text(written)} past a {limit} limit"
            + (f" and held it {report.get('held_s', 0):.0f} s" if report is not None else "")
            + f"; the disk watchdog never stopped it ({engine})"
        )
    problems = []
    if verdict is None:
        problems.append(
            f"the disk watchdog did not stop a sandbox that wrote {size_text(written)} past its {limit} limit: "
            f"one can write until the engine's disk is full{free}"
        )
    elif verdict.usage.total_bytes <= limit_bytes:
        problems.append(f"the watchdog stopped it at {size_text(verdict.usage.total_bytes)}, within its limit")
    if still_running:
        problems.append("the sandbox still runs")
    if report is not None and verdict is not None:
        problems.append(
            f"the writer ran to its end (it held {report.get('held_s', 0):.0f} s) before the sandbox was stopped"
        )
    return _result(name, not problems, observed, "; ".join(problems) or f"the disk watchdog bounds it ({engine})")


# ------------------------------------------------------------------------- the host's side


@dataclass
class _Listener:
    """A TCP listener on the host answering each connection with its token."""

    host: str
    token: str = field(default_factory=lambda: f"sclate-listener-{secrets.token_hex(8)}")
    port: int = 0
    server: asyncio.Server | None = None

    async def start(self) -> bool:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                writer.write(self.token.encode() + b"\n")
                await writer.drain()
            writer.close()

        try:
            self.server = await asyncio.start_server(answer, self.host, 0)
        except OSError:
            return False  # not an address of this host (a remote engine's gateway)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return True

    def target(self, host: str | None = None) -> dict[str, Any]:
        return {"host": host or self.host, "port": self.port, "token": self.token}

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await self.server.wait_closed()


def _primary_address() -> str | None:
    """The host's address on its default route (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            addr = str(s.getsockname()[0])
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def _nameservers() -> list[str]:
    found = ["8.8.8.8"]
    with contextlib.suppress(OSError):
        for line in Path("/etc/resolv.conf").read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "nameserver" and ":" not in parts[1]:
                found.append(parts[1])
    return sorted(set(found))


def _fs_path(path: Path) -> str:
    """``path`` within its own file system (as /proc/self/mountinfo names a bind mount's root)."""
    path = path.resolve()
    top = path
    while not os.path.ismount(top):
        top = top.parent
    return "/" + str(path.relative_to(top)).strip(".")


def _free_bytes(root_dir: str) -> int | None:
    try:
        st = os.statvfs(root_dir)
    except OSError:
        return None  # a remote engine's
    return st.f_bavail * st.f_frsize


@dataclass
class _Run:
    """One sandbox set up as a run's: control directory, control socket, model bridge, container."""

    control_dir: Path
    bridge: ModelBridge | None = None
    control: ControlServer | None = None
    sandbox: Sandbox | None = None

    async def close(self) -> None:
        if self.sandbox is not None:
            with contextlib.suppress(SclateError):
                await self.sandbox.remove()
        for part in (self.control, self.bridge):
            if part is not None:
                with contextlib.suppress(Exception):
                    await part.close()


async def _open_run(
    manager: SandboxManager,
    control_dir: Path,
    *,
    image: str,
    run: str,
    limits: Limits,
    model: _Listener,
    command: Sequence[str],
) -> _Run:
    # As SandboxSession._open: the control directory, its model bridge and control socket, then
    # the container from SandboxManager.spec_for (the only command differs: no capture proxy).
    opened = _Run(control_dir)
    paths = manager.paths_for(control_dir)
    await asyncio.to_thread(paths.create)
    opened.bridge = ModelBridge(paths.model_socket, "127.0.0.1", model.port)
    await opened.bridge.start()

    async def hello(msg: Mapping[str, Any]) -> dict[str, Any]:
        return {"run": run}

    opened.control = ControlServer(paths.control_socket, {"hello": hello})
    await opened.control.start()
    spec = manager.spec_for(
        image=image, run=run, tenant="isolation", run_dir=control_dir, limits=limits, command=list(command)
    )
    opened.sandbox = await manager.create(spec, control_dir, sim_ns=time.time_ns(), probe=False)
    return opened


def _json_line(result: ExecResult) -> dict[str, Any] | None:
    found = _json_lines(result)
    return found[-1] if found else None


def _json_lines(result: ExecResult) -> list[dict[str, Any]]:
    found = []
    for line in result.stdout.decode(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            item = json.loads(line)
            if isinstance(item, dict):
                found.append(item)
    return found


async def _probe(
    sandbox: Sandbox, config: Mapping[str, Any], *, user: str | None = None, timeout_s: float = 90
) -> ExecResult:
    return await sandbox.exec(
        ["python3", "-c", _PROBE_SOURCE, json.dumps(config)], user=user, workdir="/", timeout_s=timeout_s
    )


async def _wait_listening(sandbox: Sandbox, port: int) -> bool:
    script = (
        "import socket,sys,time\n"
        "for _ in range(100):\n"
        "    try:\n"
        f"        socket.create_connection(('127.0.0.1', {port}), 0.2).close(); sys.exit(0)\n"
        "    except OSError: time.sleep(0.05)\n"
        "sys.exit(1)\n"
    )
    return (await sandbox.exec(["python3", "-c", script], timeout_s=20)).ok


async def _host_spawn_ms() -> float:
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec("true")
    await proc.wait()
    return (time.monotonic() - started) * 1000


async def _fork_bomb(runtime: Runtime, sandbox: Sandbox, limits: Limits) -> IsolationResult:
    bomb = asyncio.create_task(_probe(sandbox, {"exhaust": "fork_bomb", "pids": limits.pids, "hold_s": 2.0}))
    peak, spawn_ms = 0, None
    try:
        while not bomb.done():
            with contextlib.suppress(SclateError):
                peak = max(peak, (await runtime.stats(sandbox.id)).pids)
            if spawn_ms is None and peak >= limits.pids * 0.9:
                spawn_ms = await _host_spawn_ms()  # while the sandbox is full
            await asyncio.sleep(0.2)
        result = await bomb
    finally:
        if not bomb.done():
            bomb.cancel()
    if spawn_ms is None:
        spawn_ms = await _host_spawn_ms()
    return judge_fork_bomb(_json_line(result), pids_limit=limits.pids, peak_pids=peak, host_spawn_ms=spawn_ms)


async def _memory_hog(sandbox: Sandbox, limits: Limits) -> IsolationResult:
    result = await _probe(sandbox, {"exhaust": "memory_hog", "memory_bytes": limits.memory_bytes}, timeout_s=120)
    alive = await sandbox.exec(["true"], timeout_s=20)
    return judge_memory_hog(result, memory_limit=limits.memory_bytes, still_running=alive.ok)


async def _disk(runtime: Runtime, sandbox: Sandbox, limits: Limits, facts: EngineFacts) -> IsolationResult:
    """With a size the engine enforces (``limits.disk_bytes``): the writer must meet ENOSPC within
    it. Without (a run's sandbox where the engine cannot): the disk watchdog a run's session
    starts, with a small limit and a short interval, must stop the sandbox (the last check: A dies)."""
    free = await asyncio.to_thread(_free_bytes, facts.root_dir)
    if limits.disk_bytes is not None:
        bound = limits.disk_bytes + 64 * _MIB
        result = await _probe(sandbox, {"exhaust": "disk_fill", "bytes": bound}, timeout_s=300)
        return judge_disk(_json_line(result), disk_bytes=limits.disk_bytes, facts=facts, free_bytes=free)
    stopped: list[float] = []

    async def stop(verdict: DiskVerdict) -> None:
        await runtime.stop(sandbox.id, grace_s=0)
        stopped.append(time.monotonic())

    watchdog = DiskWatchdog(
        SandboxDiskMeter(runtime, sandbox.id),
        limit_bytes=WATCHDOG_DISK_LIMIT,
        interval_s=WATCHDOG_INTERVAL_S,
        on_over=stop,
        name=f"isolation sandbox {sandbox.run}",
        option="the disk check's limit",
        timeout_s=10,
    )
    started = time.monotonic()
    watchdog.start()
    try:
        config = {
            "exhaust": "disk_fill",
            "bytes": WATCHDOG_DISK_LIMIT + _WATCHDOG_OVERSHOOT,
            "hold_s": _WATCHDOG_HOLD_S,
        }
        lines: list[dict[str, Any]] = []
        with contextlib.suppress(SclateError):  # the exec of a killed container may end either way
            lines = _json_lines(await _probe(sandbox, config, timeout_s=300))
        if watchdog.verdict is not None and watchdog.task is not None:
            # The writer died as the kill began: let the stop finish before looking.
            await asyncio.wait([watchdog.task], timeout=30)
    finally:
        await watchdog.close()
    try:
        running = (await runtime.inspect(sandbox.id)).state == "running"
    except SclateError:
        running = False
    return judge_disk_watchdog(
        lines,
        watchdog.verdict,
        limit_bytes=WATCHDOG_DISK_LIMIT,
        stopped_after_s=stopped[0] - started if stopped else None,
        still_running=running,
        facts=facts,
        free_bytes=free,
    )


async def run_isolation(runtime: Runtime, image: str, *, limits: Limits | None = None) -> list[IsolationResult]:
    """Every escape check, against sandboxes of ``image`` with a run's ``limits`` (default: a run's
    defaults). Leaves nothing behind: containers, listeners, sockets and directories are removed."""
    limits = limits or Limits()
    manager = SandboxManager(runtime)
    facts = await runtime.engine_facts()
    root = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="sci-"))
    tag = secrets.token_hex(3)
    # Named as a daemon names control directories: a hash of the run key under one directory.
    dir_a = root / hashlib.sha256(f"isolation-{tag}-a".encode()).hexdigest()[:16]
    dir_b = root / hashlib.sha256(f"isolation-{tag}-b".encode()).hexdigest()[:16]
    host_marker = root / f"host-marker-{secrets.token_hex(4)}"
    model = _Listener("127.0.0.1")
    loopback = _Listener("127.0.0.1")
    everywhere = _Listener("0.0.0.0")
    gateways = [_Listener(g) for g in facts.gateways if ":" not in g]
    listeners = [model, loopback, everywhere, *gateways]
    runs: list[_Run] = []
    other_token = f"sclate-other-{secrets.token_hex(8)}"
    other_port = 20000 + secrets.randbelow(20000)
    try:
        for listener in listeners[:3]:
            if not await listener.start():
                raise OSError(f"cannot listen on {listener.host}")
        gateways = [g for g in gateways if await g.start()]
        await asyncio.to_thread(host_marker.mkdir)
        other_listener = (
            "import socket\n"
            "s = socket.socket()\n"
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('0.0.0.0', {other_port}))\n"
            "s.listen()\n"
            "while True:\n"
            f"    c, _ = s.accept(); c.sendall(b'{other_token}\\n'); c.close()\n"
        )
        run_a = f"isolation-{tag}-a"
        runs.append(
            await _open_run(manager, dir_a, image=image, run=run_a, limits=limits, model=model,
                            command=["sleep", "infinity"])
        )  # fmt: skip
        runs.append(
            await _open_run(manager, dir_b, image=image, run=f"isolation-{tag}-b", limits=limits, model=model,
                            command=["python3", "-c", other_listener])
        )  # fmt: skip
        a, b = runs[0].sandbox, runs[1].sandbox
        assert a is not None and b is not None
        other_up = await _wait_listening(b, other_port)
        host_addresses = sorted({"127.0.0.1", *facts.gateways, *filter(None, [_primary_address()])} - {""})
        paths_b = manager.paths_for(dir_b)
        root_st = await asyncio.to_thread(os.stat, "/")
        config: dict[str, Any] = {
            "probes": [p for p in _PROBE_OF.values()] + ["prepare_setuid"],
            "control_dir": CONTROL_DIR_INSIDE,
            "model_socket": f"{CONTROL_DIR_INSIDE}/model.sock",
            "model_token": model.token,
            "allowed_sockets": [f"{CONTROL_DIR_INSIDE}/model.sock", f"{CONTROL_DIR_INSIDE}/sclate.sock"],
            "host_addresses": [h for h in host_addresses if ":" not in h],
            "loopback": [loopback.target()],
            "host_listeners": [g.target() for g in gateways]
            + [everywhere.target(h) for h in host_addresses if ":" not in h and not h.startswith("127.")],
            "other": {
                "port": other_port,
                "token": other_token,
                "addresses": list(await runtime.addresses(b.id)),
                "sockets": [str(paths_b.control_socket), str(paths_b.model_socket)],
                "control_dirs": [
                    {"host_path": str(p), "fs_path": await asyncio.to_thread(_fs_path, p)}
                    for p in (paths_b.root, dir_b)
                ],
            },
            "outside": [{"host": h, "port": p} for h, p in _OUTSIDE],
            "names": list(_OUTSIDE_NAMES),
            "nameservers": _nameservers(),
            "host_paths": [str(host_marker), str(root)],
            "host_write": str(host_marker / "written-from-inside"),
            "host_root_device": [os.major(root_st.st_dev), os.minor(root_st.st_dev)],
        }
        as_root = await _probe(a, config)
        as_nobody = await _probe(a, {"probes": ["setuid"]}, user=NOBODY)
        seen = _json_line(as_root) or {}
        seen_nobody = _json_line(as_nobody) or {}
        results: list[IsolationResult] = []
        for name, probe in _PROBE_OF.items():
            attempts = list(seen.get(probe) or [])
            if not seen:
                attempts = [
                    {
                        "what": "run the probes",
                        "outcome": f"exit {as_root.exit_code}: {as_root.stderr[-300:]!r}",
                        "breach": True,
                    }
                ]
            if probe == "host_files" and await asyncio.to_thread((host_marker / "written-from-inside").exists):
                attempts.append(
                    {"what": "write a host file from inside", "outcome": "it is on the host", "breach": True}
                )
            result = judge_attempts(name, attempts)
            if probe == "other_sandbox" and not other_up:
                result = _result(name, False, result.observed, "the other sandbox's listener never came up: not tested")
            results.append(result)
        setuid = list(seen_nobody.get("setuid") or []) or [
            {
                "what": "run as nobody",
                "outcome": f"exit {as_nobody.exit_code}: {as_nobody.stderr[-300:]!r}",
                "breach": True,
            }
        ]
        results.insert(list(_PROBE_OF).index("capabilities") + 1, judge_attempts("setuid", setuid))
        results.append(await _fork_bomb(runtime, a, limits))
        results.append(await _memory_hog(a, limits))
        results.append(await _disk(runtime, a, limits, facts))
        return results
    finally:
        for opened in runs:
            await opened.close()
        for listener in listeners:
            await listener.close()
        await asyncio.to_thread(shutil.rmtree, root, True)


async def run_isolation_checks(
    *, sandbox_image: str = "sclate-sandbox", limits: Limits | None = None
) -> list[IsolationResult]:
    """:func:`run_isolation` on the local engine (what ``sclated doctor`` runs); a failed
    result naming the cause when the engine or the image is missing."""
    try:
        runtime = await DockerRuntime.connect(f"isolation-{secrets.token_hex(4)}")
    except SclateError as exc:
        return [IsolationResult("sandbox isolation", "sandboxes can be started", exc.message, False, exc.message,
                                "start the engine: `make system` (runs scripts/setup-system.sh)")]  # fmt: skip
    try:
        try:
            ref = await image_ref(sandbox_image)
            if not await runtime.image_exists(ref):
                raise NotFound(f"image {ref} is not on this engine")
            return await run_isolation(runtime, ref, limits=limits)
        except SclateError as exc:
            return [IsolationResult("sandbox isolation", "sandboxes can be started", exc.message, False, exc.message,
                                    "build the images: `make images` (or `sclated images build`)")]  # fmt: skip
    finally:
        with contextlib.suppress(SclateError):
            await runtime.reap(runtime.daemon_id, keep=set())
        await runtime.close()
