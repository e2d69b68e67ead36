"""`sclated doctor`'s runtime checks: engine, images, simulated time and isolation inside."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sclated.errors import SclateError
from sclated.runtime._docker import DockerRuntime
from sclated.runtime._images import image_ref, recipes
from sclated.runtime._sandbox import Sandbox, SandboxManager
from sclated.runtime._spec import Limits

__all__ = ["Check", "run_doctor"]


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


_BUILD_FIX = "build them: `make images` (or `sudo .venv/bin/sclated images build`)"


async def run_doctor(*, sandbox_image: str = "sclate-sandbox") -> list[Check]:
    """Every check runs even if an earlier one fails, except those that need the engine."""
    checks: list[Check] = []
    try:
        runtime = await DockerRuntime.connect(f"doctor-{secrets.token_hex(4)}")
    except SclateError as exc:
        return [
            Check(
                "docker engine",
                False,
                exc.message,
                "start the engine: `make system` (runs scripts/setup-system.sh)",
            )
        ]
    try:
        version = await runtime.docker.version()
        checks.append(
            Check(
                "docker engine",
                True,
                f"Docker {version.get('Version')} (API {version.get('ApiVersion')})",
            )
        )
        missing = []
        for recipe in recipes():
            ref = await image_ref(recipe.name)
            present = await runtime.image_exists(ref)
            if not present:
                missing.append(ref)
            checks.append(
                Check(
                    f"image {recipe.name}",
                    present,
                    ref if present else f"{ref} is missing (or its recipe changed)",
                    "" if present else _BUILD_FIX,
                )
            )
        sandbox_ref = await image_ref(sandbox_image)
        if sandbox_ref in missing:
            checks.append(Check("simulated time in a sandbox", False, "skipped: no sandbox image", _BUILD_FIX))
        else:
            checks.extend(await _sandbox_checks(runtime, sandbox_ref))
    finally:
        await runtime.close()
    return checks


async def _sandbox_checks(runtime: DockerRuntime, image: str) -> list[Check]:
    manager = SandboxManager(runtime)
    tmp = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="sclate-doctor-"))
    run = f"doctor-{secrets.token_hex(3)}"
    # A fixed, recognisable simulated date far from today.
    sim_ns = 1_767_225_600 * 1_000_000_000  # 2026-01-01T00:00:00Z
    checks: list[Check] = []
    try:
        spec = manager.spec_for(
            image=image,
            run=run,
            tenant="doctor",
            run_dir=tmp,
            limits=Limits(memory_bytes=256 << 20, pids=128),
        )
        t0 = time.monotonic()
        try:
            sandbox = await manager.create(spec, tmp, sim_ns=sim_ns, probe=False)
        except SclateError as exc:
            return [Check("sandbox start", False, exc.message, _BUILD_FIX)]
        try:
            checks.append(Check("sandbox start", True, f"{(time.monotonic() - t0) * 1000:.0f} ms"))
            try:
                probe = await sandbox.probe_time()
                checks.append(
                    Check(
                        "simulated time in a sandbox",
                        True,
                        f"date and Python follow the run's clock (off by "
                        f"{probe.python_s - probe.expected_s:+.2f} s), see a 3-day jump, and "
                        f"time.sleep(0.01) takes {probe.sleep_s * 1000:.1f} ms",
                    )
                )
            except SclateError as exc:
                checks.append(
                    Check(
                        "simulated time in a sandbox",
                        False,
                        exc.message,
                        "rebuild the images (`sclated images build`); the sandbox image must "
                        "carry libfaketime's thread-safe build (from PyPI's libfaketime 3.0.1 source) at "
                        "/usr/local/lib/faketime",
                    )
                )
            checks.append(await _isolation_check(sandbox))
        finally:
            await sandbox.remove()
    finally:
        await asyncio.to_thread(shutil.rmtree, tmp, True)
    return checks


async def _isolation_check(sandbox: Sandbox) -> Check:
    script = (
        "grep CapEff /proc/self/status | tr -d '\\t'; "
        "ls /sys/class/net | tr '\\n' ' '; echo; "
        "test -S /var/run/docker.sock && echo docker-socket || echo no-docker-socket"
    )
    result = await sandbox.exec(["sh", "-c", script], timeout_s=20)
    out = result.stdout.decode(errors="replace")
    lines = out.splitlines()
    caps_ok = bool(lines) and lines[0].strip() == "CapEff:0000000000000000"
    net_ok = len(lines) > 1 and lines[1].split() == ["lo"]
    sock_ok = "no-docker-socket" in out
    ok = caps_ok and net_ok and sock_ok
    return Check(
        "sandbox isolation",
        ok,
        "no capabilities, loopback only, no Docker socket" if ok else f"saw: {out!r}",
        "" if ok else "the sandbox is not hardened as expected; report this as a bug",
    )
