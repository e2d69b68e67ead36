"""The real processes `sclated bench faults` injects faults into, and how it watches runs.

:class:`FaultDaemon` is one state directory served by successive `sclated`
processes (killed, stopped, started again); :class:`RunWatch` follows one run's
events across those processes, resuming its stream after the last event it got, so
every event it holds was delivered (committed) by some process. :func:`leftovers`
finds what the daemon left behind once its runs ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench._cli import end_group
from sclated.bench._daemon import start_daemon_process
from sclated.bench._faults_check import StreamEvent
from sclated.bench._procs import children

__all__ = ["ENDED", "FaultDaemon", "RunWatch", "leftovers", "stored_calls", "stream_event"]

ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "INTERRUPTED"})
"""States in which a run's event stream ends."""


def stream_event(ev: pb.RunEvent) -> StreamEvent:
    kind = ev.WhichOneof("kind") or ""
    if kind == "lease":
        return StreamEvent(ev.seq, kind, ev.SerializeToString(), lease=ev.lease.lease, change=ev.lease.change)
    if kind == "state":
        return StreamEvent(
            ev.seq, kind, ev.SerializeToString(), state=pb.State.Name(ev.state.state), reason=ev.state.reason
        )
    if kind == "fire":
        return StreamEvent(ev.seq, kind, ev.SerializeToString(), event_id=ev.fire.event_id)
    if kind == "turn":
        return StreamEvent(ev.seq, kind, ev.SerializeToString(), phase=ev.turn.phase)
    return StreamEvent(ev.seq, kind, ev.SerializeToString())


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in the process group ``pgid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry))
    return out


class FaultDaemon:
    """One state directory, served by one `sclated` process at a time."""

    def __init__(self, state_dir: Path, *extra: str) -> None:
        self.state_dir = state_dir
        self.extra = extra
        self.proc: asyncio.subprocess.Process | None = None
        self.ready: dict[str, Any] = {}
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.SclateStub | None = None
        self._up = asyncio.Event()
        self.starts = 0
        self.left_behind: list[str] = []
        """Processes of its process group alive after the daemon process exited."""

    @property
    def stub(self) -> pb_grpc.SclateStub:
        if self._stub is None:
            raise RuntimeError("the daemon is not up")
        return self._stub

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def daemon_id(self) -> str:
        return (self.state_dir / "daemon-id").read_text().strip()

    async def start(self) -> None:
        self.proc, self.ready = await start_daemon_process(self.state_dir, *self.extra, timeout_s=60)
        self.starts += 1
        self._channel = grpc.aio.insecure_channel(self.ready["tcp"])
        self._stub = pb_grpc.SclateStub(self._channel)
        self._up.set()

    async def wait_up(self, timeout_s: float = 120.0) -> None:
        await asyncio.wait_for(self._up.wait(), timeout_s)

    async def _down(self) -> None:
        self._up.clear()
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close(grace=None)

    def model_pid(self) -> int | None:
        """The embedded model server serving now (a child of the daemon process), if any."""
        if self.proc is None or self.proc.returncode is not None:
            return None
        for child in children(self.proc.pid):
            if "sclated.model" in _cmdline(child):  # `python -m sclated.model` (see EmbeddedModel)
                return child
        return None

    async def kill(self) -> None:
        """SIGKILL the daemon process alone (not its group): what a crash does."""
        assert self.proc is not None
        await self._down()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        await self.proc.wait()
        await self._gone()

    async def terminate(self, timeout_s: float = 120.0) -> int:
        """SIGTERM (the daemon drains, interrupts the rest, persists and exits)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout_s)
        finally:
            await self._down()
        await self._gone()
        return code

    async def _gone(self, grace_s: float = 3.0) -> None:
        """The daemon process exited: what it started and left alive (its model server) is
        noted as left behind, then its process group is ended, now, while its id cannot
        have been given to another process (a group id is only reused once it is empty)."""
        proc = self.proc
        assert proc is not None
        members = _group_members(proc.pid)
        for _ in range(int(grace_s / 0.1)):  # /proc has no event to wait on
            if not members:
                break
            await asyncio.sleep(0.1)
            members = _group_members(proc.pid)
        self.left_behind.extend(f"pid {pid}: {_cmdline(pid)[:120]}" for pid in members)
        await end_group(proc, sig=signal.SIGKILL, grace_s=0)

    async def close(self) -> None:
        """The last stop: SIGTERM, then whatever is left of its process group is ended."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(self.terminate())
        await self._down()
        if self.proc is not None:
            await asyncio.shield(end_group(self.proc, grace_s=5))

    def orphans(self) -> list[str]:
        """Processes a daemon process left alive when it exited (a model server that outlived it)."""
        return list(self.left_behind)

    # -- reading the store (read-only, beside the daemon) --------------------------------
    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.state_dir / 'sclated.db'}?mode=ro", uri=True, timeout=30)

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with contextlib.closing(self._db()) as db:
            return list(db.execute(sql, args))


def stored_calls(daemon: FaultDaemon, run_key: str) -> dict[str, str]:
    """The run's call records the daemon acknowledged (committed), by call id."""
    return {str(r[0]): str(r[1]) for r in daemon.read("SELECT call_id, record FROM calls WHERE run=?", (run_key,))}


class RunWatch:
    """One run's events, across daemon restarts; ``ended`` is set once its stream ended
    with the run in an ending state (INTERRUPTED included: a resume starts ``follow`` again)."""

    def __init__(self, daemon: FaultDaemon, name: str) -> None:
        self.daemon = daemon
        self.name = name
        self.events: list[StreamEvent] = []
        self.ended = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def key(self) -> str:
        return "local/" + self.name.removeprefix("runs/")

    @property
    def last_seq(self) -> int:
        return self.events[-1].seq if self.events else 0

    @property
    def state(self) -> tuple[str, str]:
        """The last state event's (state, reason)."""
        for ev in reversed(self.events):
            if ev.kind == "state":
                return ev.state, ev.reason
        return "", ""

    def follow(self) -> None:
        """Start (or restart, after a resume) following the run."""
        self.ended.clear()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._follow(), name=f"watch:{self.name}")

    async def _follow(self) -> None:
        while True:
            try:
                await self.daemon.wait_up()
                async for ev in self.daemon.stub.WatchRun(pb.WatchRunRequest(name=self.name, after_seq=self.last_seq)):
                    self.events.append(stream_event(ev))
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                # Closing the channel of a killed daemon cancels its calls: follow the next process.
                await asyncio.sleep(0.2)
                continue
            except (grpc.aio.AioRpcError, RuntimeError, asyncio.InvalidStateError):
                # The daemon went away (killed, stopping): follow its next process.
                await asyncio.sleep(0.2)
                continue
            if self.state[0] in ENDED:
                self.ended.set()
                return
            await asyncio.sleep(0.2)

    async def wait(self, timeout_s: float) -> bool:
        """Until the run's stream ended (True) or ``timeout_s`` passed (False)."""
        try:
            await asyncio.wait_for(self.ended.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def turns_ended(self) -> int:
        return sum(1 for ev in self.events if ev.kind == "turn" and ev.phase == "ended")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def full_history(daemon: FaultDaemon, name: str) -> dict[int, bytes]:
    """Every event of the run as the daemon serves it now, by seq."""
    return {
        ev.seq: ev.SerializeToString() async for ev in daemon.stub.WatchRun(pb.WatchRunRequest(name=name, after_seq=0))
    }


async def leftovers(daemon_id: str, state_dir: Path, referenced_images: set[str]) -> dict[str, list[str]]:
    """What a daemon left once its runs ended: containers labelled with its id, snapshot
    images of its not referenced by a kept snapshot, control sockets of its runs."""
    import aiodocker

    from sclated.runtime import LABEL_DAEMON
    from sclated.sandbox import short_sockets_dir

    out: dict[str, list[str]] = {"containers": [], "images": [], "sockets": []}
    async with aiodocker.Docker() as docker:
        label = json.dumps({"label": [f"{LABEL_DAEMON}={daemon_id}"]})
        for c in await docker.containers.list(all=True, filters=label):
            out["containers"].append(f"{c.id[:12]} {c._container.get('State', '')}")
        for image in await docker.images.list(filters=label):
            tags = [t for t in image.get("RepoTags") or [] if t not in referenced_images]
            if tags or not image.get("RepoTags"):
                out["images"].extend(tags or [str(image.get("Id", ""))[:19]])
    sockets = short_sockets_dir(state_dir)
    if sockets.is_dir():
        out["sockets"] = sorted(str(p) for p in sockets.rglob("*") if p.is_socket())
    return out


def referenced_images(daemon: FaultDaemon) -> set[str]:
    """Snapshot images the store's snapshots still name (kept by design until DeleteRun)."""
    images = set()
    for (info,) in daemon.read("SELECT info FROM snapshots"):
        sandbox = json.loads(info).get("sandbox") or {}
        if sandbox.get("image"):
            images.add(str(sandbox["image"]))
    return images


def run_rows(daemon: FaultDaemon) -> Mapping[str, tuple[dict[str, Any], str, str]]:
    """Every run in the store: key -> (spec, state, reason)."""
    return {
        str(name): (json.loads(spec), str(state), str(reason))
        for name, spec, state, reason in daemon.read("SELECT name, spec, state, reason FROM runs")
    }


def journal_of(daemon: FaultDaemon, run_key: str) -> list[dict[str, Any]]:
    return [json.loads(e) for (e,) in daemon.read("SELECT entry FROM journal WHERE run=? ORDER BY seq", (run_key,))]
