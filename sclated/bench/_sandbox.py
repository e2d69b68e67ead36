"""Runtime benchmark: ``await bench_sandbox()`` (or ``python -m sclated.bench._sandbox``).

Figures (all measured in the same process against the local engine):

* ``create_start_probe_ms_p50``: a sandbox as a run starts one: SandboxManager.create
  (directory layout, time file, hardened labelled container, start) and the
  start-up time probe (simulated time checked inside: date and Python, a 3-day
  jump); ``create_start_ms_p50`` and ``time_probe_ms_p50`` are its two parts.
* ``raw_docker_run_ms_p50``: the same image created and started through the raw
  engine API with a minimal config and the same network mode (none), in
  alternating order with the above (ABBA over ``rounds`` rounds, default 20) so
  both see the same machine load. ``ratio_with_probe`` and ``ratio`` = the p50s
  with and without the probe over this one.
  ``raw_docker_run_bridge_ms_p50``: the same with the engine's default network
  (what a bare ``docker run`` does; a veth pair makes it slower).
* ``time_probe_ms_p50``: the start-up time probe alone (date, Python, 3-day jump).
* ``concurrent_20_s``: 20 sandboxes created and started at once (4 with ``quick``).
* ``snapshot_s`` / ``restore_s``: with 100 MB of state in /workspace.
* ``time_publish_ms_p50`` / ``_max``: from publish_time to a long-running process
  inside reporting the new time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sclated.errors import SclateError
from sclated.runtime import DockerRuntime, Sandbox, SandboxManager, build_all, image_ref
from sclated.runtime._snapshot import SNAPSHOT_REPO, restore, snapshot
from sclated.runtime._spec import LABEL_DAEMON, Limits

__all__ = ["bench_sandbox", "measure_publish_latency"]

_NS = 1_000_000_000
_DAY_NS = 86400 * _NS
_SIM_START_NS = 1_893_456_000 * _NS  # 2030-01-01T00:00:00Z

# Runs inside the sandbox: report every time jump (> 1 h) as soon as time() shows it.
_WATCHER = r"""
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
last = time.time()
s.sendall(("%r\n" % last).encode())
while True:
    t = time.time()
    if abs(t - last) > 3600:
        s.sendall(("%r\n" % t).encode())
    last = t
    time.sleep(0.001)
"""


async def measure_publish_latency(sandbox: Sandbox, jumps: int = 20) -> list[float]:
    """Milliseconds from publish_time to a process inside seeing each of ``jumps`` jumps."""
    sock = sandbox.paths.root / f"watch-{secrets.token_hex(3)}.sock"
    lines: asyncio.Queue[float] = asyncio.Queue()

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            await lines.put(float(line))
        writer.close()

    server = await asyncio.start_unix_server(on_conn, path=str(sock))
    await asyncio.to_thread(sock.chmod, 0o666)
    try:
        inner = f"/run/sclate/{sock.name}"
        script = _WATCHER.replace("'", "'\"'\"'")
        started = await sandbox.sh(f"nohup python3 -c '{script}' {inner} >/dev/null 2>&1 &", timeout_s=10)
        if not started.ok:
            raise SclateError(f"could not start the watcher: {started.stderr!r}")
        async with asyncio.timeout(10):
            await lines.get()  # the watcher is up
        sim = await sandbox.sim_now_ns()
        out: list[float] = []
        for i in range(jumps):
            target = sim + (i + 1) * _DAY_NS
            t0 = time.perf_counter()
            await sandbox.publish_time(target)
            async with asyncio.timeout(10):
                while True:
                    seen = await lines.get()
                    if seen >= target / _NS - 5:
                        break
            out.append((time.perf_counter() - t0) * 1000)
            # Let the watcher settle so jumps do not queue behind each other.
            await asyncio.sleep(0.05)
        return out
    finally:
        with contextlib.suppress(SclateError):
            await sandbox.sh(f"pkill -f '[w]{sock.name[1:]}' || true", timeout_s=10)
        server.close()
        await server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(sock.unlink)


async def _raw_create_start(rt: DockerRuntime, image: str, label: str, network: str | None = None) -> tuple[float, str]:
    config: dict[str, Any] = {
        "Image": image,
        "Cmd": ["sleep", "infinity"],
        "Labels": {LABEL_DAEMON: label},  # only so the final reap removes it
    }
    if network is not None:
        config["HostConfig"] = {"NetworkMode": network}
    t0 = time.perf_counter()
    container = await rt.docker.containers.create(config)
    await container.start()
    return (time.perf_counter() - t0) * 1000, container.id


async def _timed_create(
    manager: SandboxManager, spec: Any, run_dir: Path, *, probe: bool
) -> tuple[Sandbox, float, float]:
    """``manager.create`` as a run calls it (start, then the time probe), timed in
    two parts: ms to a started container, ms of the probe (0 without it)."""
    t0 = time.perf_counter()
    sb = await manager.create(spec, run_dir, sim_ns=_SIM_START_NS, probe=False)
    t1 = time.perf_counter()
    if probe:
        try:
            await sb.probe_time()
        except BaseException:
            with contextlib.suppress(SclateError):
                await asyncio.shield(sb.remove())
            raise
    t2 = time.perf_counter()
    return sb, (t1 - t0) * 1000, (t2 - t1) * 1000


async def bench_sandbox(rounds: int = 20, jumps: int = 20, *, quick: bool = False) -> dict[str, Any]:
    """Run the benchmark; every container, snapshot image and temporary directory it
    makes is removed, also when it fails or is cancelled (SIGINT/SIGTERM in the CLI).

    Containers carry the label ``sclate.daemon=bench-<pid>-<random>``; they are
    removed by that label at the end. ``quick``: fewer jumps, 4 concurrent
    sandboxes instead of 20, 10 MB of state instead of 100 MB."""
    if rounds < 1:
        raise SclateError(f"rounds must be >= 1, not {rounds}")
    concurrent = 4 if quick else 20
    state_mb = 10 if quick else 100
    jumps = min(jumps, 5) if quick else jumps
    await build_all(names=["sclate-sandbox"])
    image = await image_ref("sclate-sandbox")
    daemon = f"bench-{os.getpid()}-{secrets.token_hex(3)}"
    snap_run = f"snap-{daemon}"
    rt = await DockerRuntime.connect(daemon)
    manager = SandboxManager(rt)
    limits = Limits(memory_bytes=512 << 20, pids=256)
    result: dict[str, Any] = {"quick": quick, "rounds": rounds}
    # The directory goes last, after the containers that mount parts of it.
    with tempfile.TemporaryDirectory(prefix="sc-bench-") as tmp_s:
        try:
            tmp = Path(tmp_s)

            def spec(run: str) -> Any:
                return manager.spec_for(image=image, run=run, tenant="bench", run_dir=tmp / run, limits=limits)

            # Warm the engine's caches for both paths before timing anything.
            warm = await manager.create(spec("warm"), tmp / "warm", sim_ns=_SIM_START_NS, probe=True)
            await warm.remove()
            _, raw_id = await _raw_create_start(rt, image, daemon)
            await rt.remove(raw_id)

            ours: list[float] = []
            probes: list[float] = []
            with_probe: list[float] = []
            raw: list[float] = []
            raw_bridge: list[float] = []

            async def one_ours(i: int) -> None:
                sb, start_ms, probe_ms = await _timed_create(manager, spec(f"r{i}"), tmp / f"r{i}", probe=True)
                ours.append(start_ms)
                probes.append(probe_ms)
                with_probe.append(start_ms + probe_ms)
                await sb.remove()

            async def one_raw(i: int) -> None:
                ms, raw_id = await _raw_create_start(rt, image, daemon, "none")
                raw.append(ms)
                await rt.remove(raw_id)

            async def one_raw_bridge(i: int) -> None:
                ms, raw_id = await _raw_create_start(rt, image, daemon)
                raw_bridge.append(ms)
                await rt.remove(raw_id)

            # Alternating order (ABBA): a drift in machine load favours no side.
            steps = [one_ours, one_raw, one_raw_bridge]
            for i in range(rounds):
                for step in steps if i % 2 == 0 else reversed(steps):
                    await step(i)
            result["create_start_probe_ms_p50"] = statistics.median(with_probe)
            result["create_start_probe_ms_p90"] = _p90(with_probe)
            result["create_start_ms_p50"] = statistics.median(ours)
            result["time_probe_ms_p50"] = statistics.median(probes)
            result["raw_docker_run_ms_p50"] = statistics.median(raw)
            result["raw_docker_run_ms_p90"] = _p90(raw)
            result["raw_docker_run_bridge_ms_p50"] = statistics.median(raw_bridge)
            result["ratio_with_probe"] = result["create_start_probe_ms_p50"] / result["raw_docker_run_ms_p50"]
            result["ratio"] = result["create_start_ms_p50"] / result["raw_docker_run_ms_p50"]

            t0 = time.perf_counter()
            many = await asyncio.gather(
                *(
                    manager.create(spec(f"c{i}"), tmp / f"c{i}", sim_ns=_SIM_START_NS, probe=False)
                    for i in range(concurrent)
                )
            )
            result[f"concurrent_{concurrent}_s"] = time.perf_counter() - t0
            await asyncio.gather(*(sb.remove() for sb in many))

            sb = await manager.create(spec(snap_run), tmp / snap_run, sim_ns=_SIM_START_NS, probe=False)
            fill = await sb.sh(f"head -c {state_mb}M /dev/urandom > /workspace/state.bin && sync", timeout_s=120)
            if not fill.ok:
                raise SclateError(f"could not write the {state_mb} MB state: {fill.stderr!r}")
            t0 = time.perf_counter()
            info = await snapshot(rt, sb.info, tmp / "snapshots" / "1")
            result["snapshot_s"] = time.perf_counter() - t0
            result["snapshot_state_mb"] = state_mb
            result["snapshot_pause_ms"] = info.pause_ms
            await sb.remove()
            t0 = time.perf_counter()
            restored = await restore(rt, info, sb.spec)
            result["restore_s"] = time.perf_counter() - t0
            await rt.remove(restored.id)

            sb = await manager.create(spec("pub"), tmp / "pub", sim_ns=_SIM_START_NS, probe=False)
            latencies = await measure_publish_latency(sb, jumps)
            result["time_publish_ms_p50"] = statistics.median(latencies)
            result["time_publish_ms_max"] = max(latencies)
            await sb.remove()
        finally:
            # Shielded: a second interrupt must not leave containers or images behind.
            await asyncio.shield(_cleanup(rt, daemon, snap_run))
    return {k: round(float(v), 3) if isinstance(v, float) else v for k, v in result.items()}


def _p90(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


async def _cleanup(rt: DockerRuntime, daemon: str, snap_run: str) -> None:
    try:
        await rt.reap(daemon, keep=set())
        for ref in await rt.image_tags(f"{SNAPSHOT_REPO}:{snap_run}-*"):
            with contextlib.suppress(SclateError):
                await rt.remove_image(ref)
    finally:
        await rt.close()


if __name__ == "__main__":
    figures = asyncio.run(bench_sandbox())
    json.dump(figures, sys.stdout, indent=2)
    print()
