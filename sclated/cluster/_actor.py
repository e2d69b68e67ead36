"""The Ray actor that runs one run's worker on a cluster node.

It holds a :class:`RunWorker` reporting to a :class:`RecordBuffer`; the control
plane (the daemon) pulls the records, stores them and acknowledges them. The actor
is detached: it outlives the daemon process that created it, so a daemon that
restarts adopts it (by its name) and pulls from where the records were last
acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import socket
from pathlib import Path
from typing import Any

import ray

from sclated.cluster._node import BufferedCalls, NodeSettings, node_services, remove_run_dir
from sclated.cluster._records import Batch, RecordBuffer
from sclated.cluster._snapshots import ensure_image, export_image
from sclated.errors import SclateError, describe
from sclated.runs import RunOutcome, RunSpec, RunWorker, default_registry
from sclated.sandbox import SandboxServices

__all__ = ["RunActor", "RunWorkerActor", "node_label"]

log = logging.getLogger("sclated.cluster")


def node_label() -> str:
    """This node as GetRun shows it: the Ray node id (short) and the host name."""
    node_id = ray.get_runtime_context().get_node_id()
    return f"{node_id[:16]}@{socket.gethostname()}"


def _jsonable(value: dict[str, Any]) -> dict[str, Any]:
    """Results cross the wire and are stored as JSON: keep what JSON carries."""
    out = json.loads(json.dumps(value, default=str))
    return out if isinstance(out, dict) else {}


class RunWorkerActor:
    """One run's worker on this node; its methods are coroutines (an async actor)."""

    def __init__(
        self,
        key: str,
        spec: dict[str, Any],
        journal: list[dict[str, Any]] | None,
        next_event_seq: int,
        settings: NodeSettings,
        restore_from: str | None = None,
    ) -> None:
        """``restore_from``: a snapshot in the shared directory the agent starts from."""
        self._key = key
        self._restore_from = Path(restore_from) if restore_from else None
        self._spec = RunSpec.from_dict(spec)
        self._journal = journal
        self._settings = settings
        self._buffer = RecordBuffer(next_event_seq)
        self._calls = BufferedCalls(self._buffer, key)
        self._task: asyncio.Task[None] | None = None
        self._worker: RunWorker | None = None
        self._services: SandboxServices | None = None
        self._run_dir: Path | None = None

    async def start(self) -> str:
        """Build the worker and start it; the node it runs on."""
        if self._task is None:
            node_id = ray.get_runtime_context().get_node_id()
            # This node's sandbox services: its Docker engine, its one embedded model, and
            # captured calls into the record stream (see sclated.cluster._node).
            self._services = await asyncio.to_thread(
                node_services, self._settings, node_id, self._buffer, self._key, self._calls
            )
            restore = self._restore_from
            # A snapshot taken on some node: its image comes from the shared directory.
            sandboxed = restore is not None and await asyncio.to_thread((restore / "sandbox").is_dir)
            if restore is not None and sandboxed and await ensure_image(restore):
                log.info("run %s: its snapshot's image was loaded from %s", self._key, restore)
            run_dir = self._services.state_dir / "runs" / self._key
            await asyncio.to_thread(run_dir.mkdir, parents=True, exist_ok=True)
            self._run_dir = run_dir
            registry = default_registry(self._services)
            # No judge on a node yet: a benchmark whose rounds need one fails them, naming it.
            self._worker = await asyncio.to_thread(
                RunWorker,
                self._key,
                self._spec,
                registry,
                self._buffer,
                journal=self._journal,
                judge=None,
                run_dir=run_dir,
            )
            self._worker.restore_from = self._restore_from
            self._task = asyncio.get_running_loop().create_task(self._run(self._worker), name=f"run:{self._key}")
        return node_label()

    async def _run(self, worker: RunWorker) -> None:
        try:
            outcome = await worker.run()
        except asyncio.CancelledError:
            outcome = RunOutcome("CANCELLED", "cancelled by the user")
        except SclateError as exc:
            outcome = RunOutcome("FAILED", exc.message)
        except Exception as exc:
            log.exception("run %s failed", self._key)
            outcome = RunOutcome("FAILED", f"internal error: {describe(exc)}")
        if self._services is not None:
            # The engine connection (the node's model stays for the node's other runs).
            try:
                await self._services.close()
            except Exception:
                log.exception("run %s: closing its sandbox services failed", self._key)
            if self._run_dir is not None:
                # Nothing reads a node's run directory once the run ended (its records went
                # to the control plane): it goes, and the node's directory once it is empty.
                await asyncio.to_thread(remove_run_dir, self._run_dir, self._services.state_dir)
        capture = worker.capture_at_close()
        results = dict(outcome.results)
        if capture:
            results["_capture_at_close"] = capture
        self._buffer.end(outcome.state, outcome.reason, _jsonable(results))

    def node(self) -> str:
        return node_label()

    async def snapshot(self, tmp: str, final: str, at_turn_boundary: bool) -> dict[str, Any]:
        """Save the run into ``tmp`` (shared storage) as it will be once renamed to ``final``."""
        worker = self._worker
        if worker is None:
            raise SclateError(f"run {self._key!r} has not started on this node")
        tmp_dir, final_dir = Path(tmp), Path(final)
        before: list[dict[str, Any]] = []

        async def paused() -> None:
            before.extend(await self._calls.calls(self._key))

        sandbox: dict[str, Any] | None = None
        try:
            await asyncio.to_thread(tmp_dir.mkdir, parents=True)
            cap = await worker.capture(tmp_dir, on_paused=paused, at_turn_boundary=at_turn_boundary)
            sandbox = cap.sandbox
            shared = await export_image(tmp_dir, final_dir, sandbox) if sandbox is not None else None
        except BaseException:
            await self._discard(tmp_dir, sandbox)
            raise
        return {
            "journal_length": cap.journal_length,
            "sim_ns": cap.sim_ns,
            "sandbox": shared,
            "agent_state": cap.agent_state,
            "calls": _jsonable({"calls": before})["calls"],
        }

    async def discard(self, tmp: str, sandbox: dict[str, Any] | None) -> None:
        """A snapshot the control plane could not record: its files and committed image go."""
        await self._discard(Path(tmp), sandbox)

    async def _discard(self, tmp: Path, sandbox: dict[str, Any] | None) -> None:
        await asyncio.to_thread(shutil.rmtree, tmp, True)
        files = self._worker.agent.files if self._worker is not None else None
        if sandbox is not None and files is not None:
            try:
                await asyncio.shield(files.discard(sandbox))
            except SclateError as exc:
                log.warning("run %s: removing a half-made snapshot failed: %s", self._key, exc.message)

    async def next_batch(self, after: int, wait_s: float) -> Batch:
        """Records after stream number ``after``, waiting up to ``wait_s`` for one."""
        return await self._buffer.wait_batch(after, wait_s)

    def ack(self, upto: int) -> int:
        """The control plane stored the records up to ``upto``: drop them."""
        return self._buffer.ack(upto)

    async def stop(self) -> None:
        """Stop the worker (CancelRun): its sandbox closes, its end is the last record."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


RunActor: Any = ray.remote(max_restarts=0)(RunWorkerActor)
"""The actor class Ray places (``RunActor.options(...).remote(...)``)."""
