"""The faults `sclated bench faults` injects, each against real processes.

Each function drives one kind of fault on a :class:`Phase` (a daemon and the runs
it tracks) and returns how many faults it injected; the phase concludes the cases.
Random points come from the bench's seeded ``random.Random``.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from sclate_api.v1 import sclate_pb2 as pb

from sclated.bench._faults_check import CaseOutcome, StreamEvent, held_leases, turn_left_unleased
from sclated.bench._faults_daemon import RunWatch
from sclated.bench._faults_phase import Phase, Tracked

__all__ = [
    "container_kill",
    "container_pause",
    "control_close",
    "daemon_kills",
    "disk_full",
    "harness_kill",
    "metaclaw_run",
    "mitmdump_kill",
    "model_kill",
    "scripted_run",
    "sigterm_restore",
    "sigterm_snapshot",
    "synthetic_sandboxed_run",
]

FAST = {"max_tokens": 24, "max_steps": 2}
"""The reference harness's options for short sandboxed runs (as the e2e tests use)."""


def scripted_run(days: int, events: int = 3, turn_ms: int = 400) -> pb.Run:
    run = pb.Run(benchmark=pb.BenchmarkSpec(name="synthetic"), agent=pb.AgentSpec(harness="scripted"))
    run.benchmark.options.update({"days": days, "events_per_day": events})
    run.agent.options.update({"turn_ms": turn_ms, "turn_jitter": 0.5})
    return run


def synthetic_sandboxed_run(days: int = 1, events: int = 2, **options: Any) -> pb.Run:
    """The synthetic benchmark with the reference harness in a sandbox and the embedded model."""
    run = pb.Run(benchmark=pb.BenchmarkSpec(name="synthetic"), agent=pb.AgentSpec(harness="reference"))
    run.benchmark.options.update({"days": days, "events_per_day": events})
    run.agent.options.update({**FAST, **options})
    return run


def metaclaw_run(*days: str, **options: Any) -> pb.Run:
    """MetaClaw's ``tiny`` scenario (``days``: only these, e.g. ``day01``) with the reference
    harness and the embedded model."""
    run = pb.Run(
        benchmark=pb.BenchmarkSpec(name="metaclaw", scenario="tiny", subset=list(days)),
        agent=pb.AgentSpec(harness="reference"),
    )
    run.agent.options.update({**FAST, **options})
    return run


async def _until(check: Callable[[], bool], timeout_s: float, every_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(every_s)
    return True


def _holding(watch: RunWatch, prefix: str) -> Callable[[], bool]:
    """True while the run holds a lease whose name starts with ``prefix`` (or it ended)."""

    def check() -> bool:
        return watch.ended.is_set() or any(name.startswith(prefix) for name in held_leases(watch.events))

    return check


def _ended_or(watch: RunWatch, check: Callable[[], bool]) -> Callable[[], bool]:
    return lambda: watch.ended.is_set() or check()


def _always(anomaly: str) -> Callable[[list[StreamEvent]], str | None]:
    """A check that found ``anomaly`` whatever the run's events say."""

    def check(events: list[StreamEvent]) -> str | None:
        return anomaly

    return check


# -- 1. the daemon SIGKILLed at random points ----------------------------------------------------


async def daemon_kills(
    phase: Phase,
    rng: random.Random,
    kills: int,
    *,
    sandboxed: Callable[[int], pb.Run] | None,
    prefix: str,
) -> int:
    """SIGKILL the daemon ``kills`` times at random moments, starting it again each time.

    Scripted synthetic runs are kept going (at least three at any time, so every kill
    finds some mid-way: in a turn, a grading, a flush); with ``sandboxed`` (the i-th
    sandboxed run's spec), one sandboxed run too (at most three in all), so kills land
    in sandbox starts, adoption and model calls as well."""
    daemon = phase.daemon
    made = 0
    sandboxed_made = 0
    for i in range(kills):
        active = [t for t in phase.tracked if not t.watch.ended.is_set()]
        while sum(1 for t in active if t.fault == "daemon_kill" and "scripted" in t.notes) < 3:
            t = await phase.create("daemon_kill", scripted_run(days=rng.randint(2, 4)), f"{prefix}-s{made}")
            t.notes.append("scripted")
            made += 1
            active.append(t)
        if sandboxed is not None and sandboxed_made < 3 and not any("sandboxed" in t.notes for t in active):
            t = await phase.create("daemon_kill", sandboxed(sandboxed_made), f"{prefix}-x{sandboxed_made}")
            t.notes.append("sandboxed")
            sandboxed_made += 1
            active.append(t)
        await asyncio.sleep(rng.uniform(0.2, 2.5))
        active = [t for t in active if not t.watch.ended.is_set()]
        await phase.acknowledge(*active)
        await daemon.kill()
        for t in active:
            t.injected += 1
        phase.progress(f"daemon kill {i + 1}/{kills}: {len(active)} run(s) running")
        try:
            await daemon.start()
        except RuntimeError as exc:
            # Not coming back after a crash is the worst end of all: every run it had says so.
            first, _, tail = str(exc).partition("\n")
            why = f"{first} {tail[-600:]}"
            phase.progress(f"the daemon did not start again after kill {i + 1}: {why}")
            for t in active:
                t.checks.append(_always(f"the daemon did not start again after a kill: {why}"))
            await daemon.start()  # as a supervisor would: once more
    return kills


# -- 7. the state directory's disk full ----------------------------------------------------------


def fill(path: Path) -> int:
    """Write zeros to ``path`` until the disk is full; the bytes written."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096, 1):  # whole MiBs, then what is left below one
            chunk = b"\0" * size
            while True:
                try:
                    n = os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
                written += n
                if n < size:
                    break
    finally:
        os.close(fd)
    return written


async def disk_full(phase: Phase, rng: random.Random, disk: Path, prefix: str) -> tuple[int, list[CaseOutcome]]:
    """Fill the state directory's disk during runs: new work must be refused naming the
    disk, running runs fail clearly or pause, and once space is freed (and the daemon
    restarted) nothing acknowledged is lost. Returns (faults injected, the refusals)."""
    daemon = phase.daemon
    runs = [await phase.create("disk_full", scripted_run(days=6, turn_ms=400), f"{prefix}-d{i}") for i in range(2)]
    await _until(lambda: all(t.watch.turns_ended() >= 2 for t in runs), 60)
    await asyncio.sleep(rng.uniform(0.0, 1.0))
    await phase.acknowledge(*runs)
    filler = disk / "fill"
    written = await asyncio.to_thread(fill, filler)
    for t in runs:
        t.injected += 1
    phase.progress(f"disk full: {written >> 20} MiB written to fill it")
    refusals: list[CaseOutcome] = []
    try:
        await asyncio.sleep(rng.uniform(1.0, 4.0))
        refusals.append(await _refused(phase, prefix))
        for t in runs:
            run = await daemon.stub.GetRun(pb.GetRunRequest(name=t.name), timeout=10)
            t.notes.append(f"while full: {pb.State.Name(run.state)} {run.state_reason[:160]}")
    finally:
        await asyncio.to_thread(filler.unlink)
    phase.progress("disk full: space freed")
    # Nothing acknowledged may be lost across a restart either.
    await asyncio.sleep(1.0)
    await daemon.terminate()
    await daemon.start()
    return 1, refusals


async def _refused(phase: Phase, prefix: str) -> CaseOutcome:
    """A CreateRun while the disk is full: refused naming the disk (RESOURCE_EXHAUSTED or
    UNAVAILABLE) is clear; accepted, or an answer that says nothing of the disk, is not."""
    name = f"{prefix}-refused"
    try:
        created = await phase.daemon.stub.CreateRun(
            pb.CreateRunRequest(run=scripted_run(days=1), run_id=name), timeout=10
        )
    except grpc.aio.AioRpcError as exc:
        code = exc.code()
        clear = code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE)
        return CaseOutcome(
            "disk_full",
            f"CreateRun {name}",
            1,
            "REFUSED" if clear else code.name,
            exc.details() or "",
            note=f"status {code.name}",
        )
    # Accepted while the disk was full: tracked like any run (it must still not lose anything).
    phase.track("disk_full", created.name).notes.append("accepted while the disk was full")
    return CaseOutcome("disk_full", f"CreateRun {name}", 1, "ACCEPTED", "created while the disk was full")


# -- 8. SIGTERM during a snapshot and during a restore -------------------------------------------


async def sigterm_snapshot(
    phase: Phase, rng: random.Random, run: pb.Run, run_id: str, *, at_turn_boundary: bool = True
) -> int:
    """SaveSnapshot while a turn is in flight, then SIGTERM while it waits for the turn
    boundary (``at_turn_boundary``) or while it saves (a sandbox: paused, committed,
    archived). The snapshot is whole (listed, its files there) or not there at all."""
    daemon = phase.daemon
    t = await phase.create("sigterm_snapshot", run, run_id)
    await _until(_ended_or(t.watch, lambda: t.watch.turns_ended() >= 1), 600)
    await _until(_holding(t.watch, "turn:"), 600)
    if t.watch.ended.is_set():
        t.notes.append("ended before a snapshot could be taken")
        return 0
    await phase.acknowledge(t)

    async def save() -> pb.Snapshot:
        req = pb.SaveSnapshotRequest(run=t.name, snapshot_id="faults", at_turn_boundary=at_turn_boundary)
        got: pb.Snapshot = await daemon.stub.SaveSnapshot(req, timeout=600)
        return got

    snap = asyncio.create_task(save())
    await asyncio.sleep(rng.uniform(0.05, 1.5 if at_turn_boundary else 0.6))
    t.injected += 1
    code = await daemon.terminate()
    saved: str
    try:
        got = await snap
        saved = f"saved {got.name}"
    except grpc.aio.AioRpcError as exc:
        saved = f"refused: {exc.code().name} {exc.details()}"
    t.notes.append(f"snapshot {saved[:200]}; daemon exit {code}")
    await daemon.start()
    listed = await daemon.stub.ListSnapshots(pb.ListSnapshotsRequest(run=t.name), timeout=60)
    names = [s.name for s in listed.snapshots]
    snap_dir = daemon.state_dir / "runs" / t.watch.key / "snapshots" / "faults"
    if saved.startswith("saved") and not names:
        t.lost.append("the saved snapshot is not listed after the restart")
    if not names and snap_dir.exists():
        phase.left_behind.setdefault("files", []).append(f"a half-made snapshot's files in {snap_dir}")
    return 1


async def sigterm_restore(phase: Phase, rng: random.Random, run: pb.Run, run_id: str) -> int:
    """A snapshot of a running run, restored into a new run; SIGTERM while it restores."""
    daemon = phase.daemon
    src = await phase.create("sigterm_restore", run, run_id)
    await _until(_ended_or(src.watch, lambda: src.watch.turns_ended() >= 1), 600)
    if src.watch.ended.is_set():
        src.notes.append("ended before a snapshot could be taken")
        return 0
    snap = await daemon.stub.SaveSnapshot(pb.SaveSnapshotRequest(run=src.name, snapshot_id="base"), timeout=600)
    branch = await daemon.stub.RestoreSnapshot(
        pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id=f"{run_id}-branch"), timeout=600
    )
    t = phase.track("sigterm_restore", branch.name)

    def restoring() -> bool:
        return any(ev.kind == "state" and ev.state == "RUNNING" for ev in t.watch.events)

    await _until(_ended_or(t.watch, restoring), 120)
    await asyncio.sleep(rng.uniform(0.0, 1.0))
    await phase.acknowledge(t, src)
    t.injected += 1
    src.injected += 1
    code = await daemon.terminate()
    t.notes.append(f"daemon exit {code} while it restored")
    await daemon.start()
    return 1


# -- the sandbox's own processes -------------------------------------------------------------------


async def _container(phase: Phase, t: Tracked) -> Any:
    import json

    import aiodocker

    from sclated.runtime import LABEL_DAEMON, LABEL_RUN

    run_id = t.name.removeprefix("runs/")
    label = json.dumps({"label": [f"{LABEL_DAEMON}={phase.daemon.daemon_id}", f"{LABEL_RUN}={run_id}"]})
    docker = aiodocker.Docker()
    try:
        found = await docker.containers.list(filters=label)
        if not found:
            raise RuntimeError(f"no running container for {t.name}")
        return found[0], docker
    except BaseException:
        await docker.close()
        raise


async def _host_pid(container: Any, needle: str) -> int | None:
    """The host pid of the container's process whose command line contains ``needle``:
    the process itself, not PID 1 (docker-init, whose arguments hold the whole command)
    nor a shell that started it."""
    top = await container.top()
    titles = top.get("Titles") or []
    col_pid, col_cmd = titles.index("PID"), len(titles) - 1
    for row in top.get("Processes") or []:
        cmd = str(row[col_cmd])
        if needle in cmd and not cmd.startswith(("/sbin/docker-init", "sh -c", "/bin/sh -c")):
            return int(row[col_pid])
    return None


Act = Callable[[Any, Tracked], Awaitable[str]]
"""What a case does to a run's container (the aiodocker container, the run's case): a note."""


async def _in_sandbox(phase: Phase, t: Tracked, act: Act) -> None:
    container, docker = await _container(phase, t)
    try:
        t.notes.append(await act(container, t))
    finally:
        await docker.close()


def _kill_process(needle: str) -> Act:
    """SIGKILL the sandbox's process whose command line holds ``needle``."""

    async def kill(container: Any, t: Tracked) -> str:
        pid = await _host_pid(container, needle)
        if pid is None:
            return f"no process {needle!r} in the sandbox"
        os.kill(pid, signal.SIGKILL)
        return f"SIGKILL {needle} (host pid {pid})"

    return kill


async def _during(phase: Phase, t: Tracked, prefix: str, timeout_s: float = 600) -> bool:
    """Wait until the run holds a lease named ``prefix``...; False if it ended first."""
    await _until(_holding(t.watch, prefix), timeout_s)
    return not t.watch.ended.is_set()


async def _fault_in_sandbox(
    phase: Phase, fault: str, run: pb.Run, run_id: str, *, during: str, delay_s: float, act: Act
) -> int:
    """A run, and once it holds a lease named ``during``... (and ``delay_s`` later), what
    its client holds is noted and ``act`` done to its container. How many faults were
    injected (0: the run ended before the moment came)."""
    t = await phase.create(fault, run, run_id)
    if not await _during(phase, t, during):
        t.notes.append(f"ended before it held a {during} lease")
        return 0
    await asyncio.sleep(delay_s)
    await phase.acknowledge(t)
    await _in_sandbox(phase, t, act)
    t.injected += 1
    return 1


async def mitmdump_kill(phase: Phase, rng: random.Random, run: pb.Run, run_id: str) -> int:
    """SIGKILL the capture proxy (mitmdump) in the sandbox during a model call."""
    kill = _kill_process("mitmdump")
    return await _fault_in_sandbox(phase, "mitmdump_kill", run, run_id, during="model-call:", delay_s=0, act=kill)


async def harness_kill(phase: Phase, rng: random.Random, run: pb.Run, run_id: str) -> int:
    """SIGKILL the harness process (``agent.py serve``) in the sandbox during a turn."""
    kill = _kill_process("agent.py serve")
    delay = rng.uniform(0.0, 1.0)
    return await _fault_in_sandbox(phase, "harness_kill", run, run_id, during="turn:", delay_s=delay, act=kill)


async def container_kill(phase: Phase, rng: random.Random, run: pb.Run, run_id: str) -> int:
    """The sandbox's container killed (SIGKILL from the engine) during a turn."""

    async def kill(container: Any, t: Tracked) -> str:
        await container.kill(signal="SIGKILL")
        return "container killed"

    delay = rng.uniform(0.0, 1.0)
    return await _fault_in_sandbox(phase, "container_kill", run, run_id, during="turn:", delay_s=delay, act=kill)


async def container_pause(phase: Phase, rng: random.Random, run: pb.Run, run_id: str, pause_s: float) -> int:
    """The sandbox's container paused during a model call for longer than the call's lease TTL."""

    async def pause(container: Any, t: Tracked) -> str:
        await container.pause()
        try:
            await asyncio.sleep(pause_s)
        finally:
            await container.unpause()
        return f"container paused {pause_s:.0f} s"

    delay = rng.uniform(0.0, 0.2)
    return await _fault_in_sandbox(
        phase, "container_pause", run, run_id, during="model-call:", delay_s=delay, act=pause
    )


_WAIT_CLIENT = "sclate-wait"


async def control_close(phase: Phase, rng: random.Random, run: pb.Run, run_id: str) -> int:
    """During a turn, a process in the sandbox waits (``sclate-wait --for 2h``) and is
    killed mid-wait: the control socket is closed from inside with the wait pending."""

    async def wait_and_close(container: Any, t: Tracked) -> str:
        began = t.watch.last_seq
        ex = await container.exec(["sh", "-c", f"{_WAIT_CLIENT} --for 2h"], stdout=True, stderr=True)
        async with ex.start(detach=False):
            pid = None
            deadline = time.monotonic() + 10
            while pid is None and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                pid = await _host_pid(container, f"{_WAIT_CLIENT} --for")
            if pid is None:
                return "the wait client did not start"
            await asyncio.sleep(rng.uniform(0.2, 1.0))
            os.kill(pid, signal.SIGKILL)
        t.checks.append(lambda events: turn_left_unleased(events, began))
        return f"{_WAIT_CLIENT} killed mid-wait (host pid {pid})"

    return await _fault_in_sandbox(phase, "control_close", run, run_id, during="turn:", delay_s=0, act=wait_and_close)


_STREAM_CLIENT = r"""
import json, os, sys, urllib.request
body = {"model": os.environ.get("AGENT_MODEL", "default"), "stream": True, "max_tokens": 400,
        "messages": [{"role": "user", "content": "Count from 1 to 300, one number per line."}]}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
chunks, done = 0, False
try:
    with urllib.request.urlopen(req, timeout=300) as resp:
        for line in resp:
            done = done or line.strip() == b"data: [DONE]"
            chunks += 1
            print("CHUNK", len(line), flush=True)
    print("END", chunks, "lines,", "complete" if done else "cut short (no [DONE])", flush=True)
except Exception as exc:
    print("END", chunks, "lines, then", type(exc).__name__, exc, flush=True)
"""


async def model_kill(phase: Phase, rng: random.Random, run: pb.Run, run_id: str) -> int:
    """SIGKILL the embedded model server during the harness's (non-streaming) call, then
    again during a streaming call made through the sandbox's capture proxy."""
    daemon = phase.daemon
    t = await phase.create("model_kill", run, run_id)
    injected = 0
    for _ in range(5):  # a call may end before the kill lands: try the next one
        if not await _during(phase, t, "model-call:"):
            break
        pid = daemon.model_pid()
        if pid is None:
            break
        await phase.acknowledge(t)
        os.kill(pid, signal.SIGKILL)
        t.injected += 1
        injected += 1
        t.notes.append(f"model server (pid {pid}) killed during a harness call")
        break
    ts = phase.track("model_kill_stream", t.name)
    await _until(lambda: daemon.model_pid() is not None or t.watch.ended.is_set(), 120)
    if t.watch.ended.is_set():
        ts.notes.append("the run ended before a streaming call could be made")
        return injected

    async def stream_and_kill(container: Any, _: Tracked) -> str:
        ex = await container.exec(["python3", "-c", _STREAM_CLIENT], stdout=True, stderr=True)
        out: list[str] = []
        async with ex.start(detach=False) as stream:
            killed = ""
            while (msg := await stream.read_out()) is not None:
                out.append(msg.data.decode(errors="replace"))
                if not killed and "".join(out).count("CHUNK") >= 3:
                    pid = daemon.model_pid()
                    if pid is not None:
                        await phase.acknowledge(ts)
                        os.kill(pid, signal.SIGKILL)
                        killed = f"model server (pid {pid}) killed during a streaming call"
        tail = "".join(out).strip().splitlines()[-1:] or ["(no output)"]
        return f"{killed or 'the streaming call ended before the kill'}; the client saw: {tail[0][:160]}"

    await _in_sandbox(phase, ts, stream_and_kill)
    if "killed during" in ts.notes[-1]:
        ts.injected += 1
        injected += 1
    return injected
