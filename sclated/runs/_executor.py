"""Where an admitted run's worker executes: the seam between admission and execution.

The manager admits a run (tenants, quotas, the durable store) and hands it to an
:class:`Executor`. The default, :class:`LocalExecutor`, runs the worker in the
daemon's own event loop, as it always did. A remote executor (``sclated.cluster``,
on Ray) runs it elsewhere and hands its records back through a :class:`RecordSink`,
which applies each record at most once and says when they are stored, so that the
remote side drops only what is durable.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from adapters import Judge
from sclated.runs._observe import NO_RUNS_OBSERVER, RunsObserver
from sclated.runs._registry import Registry
from sclated.runs._spec import RunSpec
from sclated.runs._worker import Capture, RunOutcome, RunSink, RunWorker

__all__ = ["AdmittedRun", "Execution", "Executor", "LocalExecutor", "RecordSink", "RemoteCapture", "RemoteSnapshot"]


@dataclass(frozen=True, slots=True)
class AdmittedRun:
    """One run the manager admitted, with what its worker starts from."""

    key: str
    """``tenant/run_id``."""
    spec: RunSpec
    journal: list[dict[str, Any]] | None
    """The durable journal to replay (a resumed run), or None for a fresh start."""
    run_dir: Path | None
    running_reason: str
    """The reason of the RUNNING state the run enters once its worker starts."""
    restore_from: Path | None = None
    """A snapshot directory the agent starts from (RestoreSnapshot, a branch)."""


class RecordSink(RunSink, Protocol):
    """The manager's side of one run, for an executor whose worker is elsewhere.

    Records come with the numbers the worker gave them (event and journal sequence
    numbers), so a record delivered twice (the pull that carried it was not
    acknowledged before a crash) is recognised and applied once."""

    def running(self, reason: str) -> None:
        """The run enters RUNNING (its worker is about to start); no worker is live now."""

    def next_event_seq(self) -> int:
        """The sequence number the run's next event takes."""

    def put_event(self, seq: int, kind: str, payload: dict[str, Any], sim_ns: int, wall_ns: int) -> bool:
        """Apply a worker's event; False (and nothing done) when it was applied before."""

    def put_journal(self, entry: dict[str, Any]) -> bool:
        """Apply a worker's journal entry; False when it was applied before."""

    async def put_call(self, call_id: str, role: str, record: dict[str, Any]) -> bool:
        """Store a captured model call of the run; False when that call id was stored before."""

    def placed(self, node: str) -> None:
        """The node the run's worker now runs on (shown by GetRun)."""

    async def commit(self) -> None:
        """Return once every record applied so far is stored."""

    async def durable_journal(self) -> list[dict[str, Any]]:
        """The run's stored journal (to resume it elsewhere)."""


@dataclass(frozen=True, slots=True)
class RemoteSnapshot:
    """A snapshot a remote worker took: its files in ``tmp_dir`` (the final directory's
    sibling, on storage the daemon reads too), not yet published as ``final_dir``."""

    tmp_dir: Path
    final_dir: Path
    capture: Capture
    calls: list[dict[str, Any]]
    """The run's call records captured before the agent was frozen, as the worker saw them."""


class RemoteCapture(Protocol):
    """Snapshots of a run whose worker is elsewhere (``Execution.snapshots``)."""

    async def capture(self, tenant: str, snapshot_id: str, *, at_turn_boundary: bool) -> RemoteSnapshot:
        """Have the worker save the run into a temporary directory next to the snapshot's."""

    async def discard(self, taken: RemoteSnapshot) -> None:
        """Remove what ``capture`` made (the snapshot could not be recorded)."""


class Execution(Protocol):
    """One admitted run being executed; ``run`` is called once."""

    @property
    def worker(self) -> RunWorker | None:
        """The worker when it is in this process (snapshots, reports); None when remote."""

    @property
    def survives_shutdown(self) -> bool:
        """Whether the worker goes on when the daemon stops (the next daemon adopts it)."""

    @property
    def snapshots(self) -> RemoteCapture | None:
        """How a remote worker's run is snapshotted; None when the worker is here."""

    async def run(self) -> RunOutcome:
        """Execute to the end; cancelling the caller stops (or, at shutdown, leaves) the worker."""

    def capture_at_close(self) -> dict[str, Any] | None:
        """What the agent's capture proxy handed over when its sandbox closed."""

    async def cancel(self) -> None:
        """After ``run`` was cancelled (CancelRun, a pause, a shutdown it does not survive):
        stop the worker wherever it is."""


class Executor(Protocol):
    """Runs admitted runs' workers: in the daemon (local) or on a cluster."""

    @property
    def name(self) -> str: ...

    async def start(self) -> None:
        """Connect what the executor needs (before the manager resumes runs)."""

    async def prepare(self, run: AdmittedRun, sink: RecordSink, judge: Judge | None) -> Execution:
        """Build the run's execution (not started yet); errors fail the run."""

    async def close(self) -> None:
        """Let go of what ``start`` connected (workers that survive shutdown go on)."""


class _LocalExecution:
    def __init__(self, worker: RunWorker, sink: RecordSink, reason: str) -> None:
        self._worker = worker
        self._sink = sink
        self._reason = reason

    @property
    def worker(self) -> RunWorker:
        return self._worker

    @property
    def survives_shutdown(self) -> bool:
        return False

    @property
    def snapshots(self) -> None:
        return None

    async def run(self) -> RunOutcome:
        self._sink.running(self._reason)
        return await self._worker.run()

    def capture_at_close(self) -> dict[str, Any] | None:
        return self._worker.capture_at_close()

    async def cancel(self) -> None:
        return None  # the worker ran in the cancelled task: it stopped with it


class LocalExecutor:
    """The worker runs in the daemon's own event loop (the default; one host)."""

    def __init__(self, registry: Registry, observer: RunsObserver = NO_RUNS_OBSERVER) -> None:
        self._registry = registry
        self._observer = observer

    @property
    def name(self) -> str:
        return "local"

    async def start(self) -> None:
        return None

    async def prepare(self, run: AdmittedRun, sink: RecordSink, judge: Judge | None) -> Execution:
        # Loading a scenario reads its upstream files: off the event loop.
        worker = await asyncio.to_thread(
            RunWorker,
            run.key,
            run.spec,
            self._registry,
            sink,
            journal=run.journal,
            judge=judge,
            run_dir=run.run_dir,
            observer=self._observer,
        )
        worker.restore_from = run.restore_from
        return _LocalExecution(worker, sink, run.running_reason)

    async def close(self) -> None:
        return None
