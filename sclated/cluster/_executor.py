"""The Ray executor: admitted runs' workers run in actors on a Ray cluster.

The daemon stays the control plane (API, tenants, admission, quotas, the store).
For each admitted run it creates a detached :class:`RunActor` that needs one
``sandbox`` slot (a custom resource each node declares) plus the run's cpus and
memory, and pulls the actor's records: it stores them, then acknowledges them, so
the actor drops only what is durable. When the actor or its node dies, the run is
resumed from its stored journal in a new actor on another node; a run that cannot
be resumed ends FAILED naming the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError

from adapters import Judge
from sclated.cluster._actor import RunActor
from sclated.cluster._node import NAMESPACE, NodeSettings
from sclated.cluster._records import Record
from sclated.cluster._snapshots import shared_dir, temp_dir
from sclated.errors import FailedPrecondition, InvalidArgument, SclateError, Unavailable, describe
from sclated.runs import Registry, RunOutcome
from sclated.runs._executor import AdmittedRun, Execution, RecordSink, RemoteSnapshot
from sclated.runs._worker import Capture

__all__ = ["NAMESPACE", "PLACEMENTS", "ClusterConfig", "RayExecutor", "actor_name"]

log = logging.getLogger("sclated.cluster")

PLACEMENTS = ("spread", "pack")
_PULL_WAIT_S = 0.5
"""How long one pull waits in the actor for a record (a long poll)."""
_CONNECT_TIMEOUT_S = 10.0
_REPLACE_WAIT_S = 2.0
"""Between placing a worker whose node died under it and placing it again."""
_NAME_FREE_S = 60.0
"""How long a new worker waits for the name of the one it replaces to be free."""
_CALL_TIMEOUT_S = 30.0
"""A call to a live actor answers well within this; past it the actor counts as lost."""
_SNAPSHOT_TIMEOUT_S = 900.0
"""A snapshot on a node: a commit and a ``docker save`` of the image (hundreds of MB)."""


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    address: str
    """The Ray cluster (``HOST:PORT`` of its head, ``auto``, or ``ray://...``)."""
    scope: str
    """Names this daemon's actors (several daemons may share a cluster)."""
    placement: str = "spread"
    """``spread``: runs over as many nodes as possible; ``pack``: fill a node first."""
    snapshot_dir: Path | None = None
    """A directory every node reads and writes: snapshots of runs that may move."""
    sandbox_slots: float = 1.0
    """``sandbox`` resource units one run takes."""
    max_moves: int = 3
    """How many times a run is resumed on another node before it ends FAILED."""
    placement_timeout_s: float = 300.0
    """How long a run's actor may wait for a node with room before the run fails."""
    model_n_ctx: int | None = None
    """The context of each node's embedded model (the daemon's ``model_n_ctx``)."""

    def __post_init__(self) -> None:
        if not self.address:
            raise InvalidArgument("ray_address must name the cluster (HOST:PORT or auto)", field="ray_address")
        if self.placement not in PLACEMENTS:
            raise InvalidArgument(
                f"ray_placement {self.placement!r} is not one of {', '.join(PLACEMENTS)}", field="ray_placement"
            )
        if self.sandbox_slots <= 0:
            raise InvalidArgument("sandbox_slots must be positive", field="sandbox_slots")


def actor_name(scope: str, key: str) -> str:
    """The detached actor of run ``key`` of the daemon ``scope`` (a restarted daemon finds it)."""
    return f"run-{scope}-{hashlib.sha256(key.encode()).hexdigest()[:24]}"


class RayExecutor:
    def __init__(self, config: ClusterConfig, registry: Registry, daemon_id: Callable[[], str]) -> None:
        """``daemon_id``: the daemon's id once it started (labels the runs' containers)."""
        self.config = config
        self._registry = registry
        self._daemon_id = daemon_id

    @property
    def name(self) -> str:
        return "ray"

    async def start(self) -> None:
        def connect() -> None:
            ray.init(
                address=self.config.address,
                namespace=NAMESPACE,
                log_to_driver=False,
                configure_logging=False,
                ignore_reinit_error=True,
            )

        await _check_reachable(self.config.address)
        try:
            await asyncio.to_thread(connect)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise Unavailable(
                f"cannot reach the Ray cluster at ray_address {self.config.address!r}: {exc}", reason="NO_CLUSTER"
            ) from exc
        resources = await asyncio.to_thread(ray.cluster_resources)
        log.info(
            "executor ray: cluster %s, %s sandbox slot(s), placement %s",
            self.config.address,
            resources.get("sandbox", 0),
            self.config.placement,
        )

    async def prepare(self, run: AdmittedRun, sink: RecordSink, judge: Judge | None) -> Execution:
        root = self.config.snapshot_dir
        if run.restore_from is not None and (root is None or not run.restore_from.is_relative_to(root)):
            # Taken by the local executor: its image is in the daemon's engine only.
            raise FailedPrecondition(
                f"snapshot {run.restore_from} is not in cluster_snapshot_dir ({root or 'not set'}): only "
                "snapshots taken on the cluster can be restored on it",
                reason="EXECUTOR_UNSUPPORTED",
            )
        settings = NodeSettings(self.config.scope, self._daemon_id(), self.config.model_n_ctx)
        return _RayExecution(self.config, run, sink, settings)

    async def close(self) -> None:
        # Only this driver disconnects: detached actors (running runs) go on.
        await asyncio.to_thread(ray.shutdown)


class _RayExecution:
    def __init__(self, config: ClusterConfig, run: AdmittedRun, sink: RecordSink, settings: NodeSettings) -> None:
        self._config = config
        self._settings = settings
        self._run = run
        self._sink = sink
        self._name = actor_name(config.scope, run.key)
        self._actor: Any = None
        self._node = ""
        self._capture: dict[str, Any] | None = None
        self._latest: Path | None = run.restore_from
        """The newest shared snapshot of the run known here: a lost node's run resumes from it."""

    @property
    def worker(self) -> None:
        return None

    @property
    def snapshots(self) -> _RayExecution:
        return self

    # -- snapshots (sclated.runs.RemoteCapture) ---------------------------------------------
    async def capture(self, tenant: str, snapshot_id: str, *, at_turn_boundary: bool) -> RemoteSnapshot:
        root = self._config.snapshot_dir
        if root is None:
            raise FailedPrecondition(
                f"run {self._run.key!r} runs on the ray executor (node {self._node or 'unknown'}): its snapshots "
                "must be kept where every node reads them; set cluster_snapshot_dir",
                reason="NO_SNAPSHOT_DIR",
            )
        actor = self._actor
        if actor is None:
            raise FailedPrecondition(
                f"run {self._run.key!r} has no worker on a node yet; take the snapshot once it is running",
                reason="RUN_NOT_READY",
            )
        final = shared_dir(root, self._run.key, snapshot_id)
        tmp = temp_dir(final)
        await asyncio.to_thread(final.parent.mkdir, parents=True, exist_ok=True)
        try:
            got = await asyncio.wait_for(
                actor.snapshot.remote(str(tmp), str(final), at_turn_boundary), _SNAPSHOT_TIMEOUT_S
            )
        except (RayActorError, TimeoutError) as exc:
            await asyncio.to_thread(shutil.rmtree, tmp, True)
            raise Unavailable(
                f"run {self._run.key!r}: its worker on node {self._node} was lost during the snapshot "
                f"({type(exc).__name__}); nothing was kept",
                reason="WORKER_LOST",
            ) from None
        capture = Capture(int(got["journal_length"]), int(got["sim_ns"]), got["sandbox"], bool(got["agent_state"]))
        self._latest = final
        return RemoteSnapshot(tmp, final, capture, list(got["calls"]))

    async def discard(self, taken: RemoteSnapshot) -> None:
        if self._latest == taken.final_dir:
            self._latest = self._run.restore_from
        actor = self._actor
        if actor is not None:
            with contextlib.suppress(RayActorError, TimeoutError):
                await asyncio.wait_for(actor.discard.remote(str(taken.tmp_dir), taken.capture.sandbox), _CALL_TIMEOUT_S)
        await asyncio.to_thread(shutil.rmtree, taken.tmp_dir, True)

    @property
    def survives_shutdown(self) -> bool:
        return True

    def capture_at_close(self) -> dict[str, Any] | None:
        return self._capture

    async def cancel(self) -> None:
        actor = self._actor
        if actor is None:
            return
        with contextlib.suppress(RayActorError, TimeoutError):
            await asyncio.wait_for(actor.stop.remote(), _CALL_TIMEOUT_S)
        await asyncio.to_thread(_kill, actor)

    # -- placing the actor ---------------------------------------------------------------
    async def _adopt(self) -> Any:
        """The run's actor left by an earlier daemon process, if it is still there."""
        try:
            actor = await asyncio.to_thread(ray.get_actor, self._name, NAMESPACE)
        except ValueError:
            return None
        try:
            self._node = await asyncio.wait_for(actor.node.remote(), _CALL_TIMEOUT_S)
        except (RayActorError, TimeoutError):
            await asyncio.to_thread(_kill, actor)
            return None
        log.info("run %s: adopted its worker on node %s", self._run.key, self._node)
        return actor

    async def _launch(self, journal: list[dict[str, Any]] | None, reason: str, restore_from: Path | None = None) -> Any:
        """A new actor for the run, started from ``journal`` (None: from the beginning) and,
        with ``restore_from``, the agent's files of that snapshot."""
        with contextlib.suppress(ValueError):
            stale = await asyncio.to_thread(ray.get_actor, self._name, NAMESPACE)
            await asyncio.to_thread(_kill, stale)
        # The run enters RUNNING before its worker numbers any event (no other worker is live).
        self._sink.running(reason)
        await self._sink.commit()
        resources = self._run.spec.agent.resources
        options: dict[str, Any] = {
            "name": self._name,
            "namespace": NAMESPACE,
            "lifetime": "detached",
            "num_cpus": float(resources.cpus or 0),
            "resources": {"sandbox": self._config.sandbox_slots},
            "scheduling_strategy": "SPREAD" if self._config.placement == "spread" else "DEFAULT",
        }
        if resources.memory_bytes:
            options["memory"] = resources.memory_bytes
        args = (
            self._run.key,
            self._run.spec.to_dict(),
            journal,
            self._sink.next_event_seq(),
            self._settings,
            str(restore_from) if restore_from is not None else None,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.placement_timeout_s
        while True:
            actor = await self._create(options, args)
            try:
                self._node = await asyncio.wait_for(actor.start.remote(), max(1.0, deadline - loop.time()))
                break
            except TimeoutError:
                await asyncio.to_thread(_kill, actor)
                raise FailedPrecondition(
                    f"no node of the cluster offered a sandbox slot (and {resources.cpus or 0} cpus) within "
                    f"{self._config.placement_timeout_s:.0f} s",
                    reason="NO_CAPACITY",
                ) from None
            except RayActorError as exc:
                # Placed on a node that died before the worker started: the head has not
                # noticed yet (its health checks take seconds). Again, once it has.
                await asyncio.to_thread(_kill, actor)
                if loop.time() > deadline:
                    raise
                log.warning("run %s: its new worker died before it started (%s); placing it again", self._run.key, exc)
                await asyncio.sleep(_REPLACE_WAIT_S)
        self._sink.placed(self._node)
        log.info("run %s: worker on node %s (%s)", self._run.key, self._node, reason)
        return actor

    async def _create(self, options: dict[str, Any], args: tuple[Any, ...]) -> Any:
        """Create the named actor. Creating a named actor waits for the cluster's head
        (off the event loop); the name of a worker just lost is free again only once
        the head has marked it dead, which takes a moment: wait for it."""
        deadline = asyncio.get_running_loop().time() + _NAME_FREE_S
        while True:
            try:
                return await asyncio.to_thread(lambda: RunActor.options(**options).remote(*args))
            except ValueError as exc:
                if "already" not in str(exc) or asyncio.get_running_loop().time() > deadline:
                    raise
                with contextlib.suppress(ValueError):
                    stale = await asyncio.to_thread(ray.get_actor, self._name, NAMESPACE)
                    await asyncio.to_thread(_kill, stale)
                await asyncio.sleep(0.5)

    # -- the pump ------------------------------------------------------------------------
    async def run(self) -> RunOutcome:
        actor = await self._adopt() if self._run.journal is not None else None
        if actor is None:
            actor = await self._launch(self._run.journal, self._run.running_reason, self._run.restore_from)
        else:
            self._sink.placed(self._node)
        self._actor = actor
        moves = 0
        after = 0
        while True:
            try:
                outcome, after = await self._pull(actor, after)
            except (RayActorError, TimeoutError) as exc:
                lost = self._node
                moves += 1
                if moves > self._config.max_moves:
                    return RunOutcome(
                        "FAILED",
                        f"its worker was lost on node {lost} ({type(exc).__name__}) and it was already resumed "
                        f"{self._config.max_moves} time(s)",
                    )
                log.warning("run %s: its worker on node %s was lost (%s); resuming elsewhere", self._run.key, lost, exc)
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(_kill, actor)
                try:
                    journal = await self._sink.durable_journal()
                    latest = self._latest
                    if latest is not None and not await asyncio.to_thread(latest.is_dir):
                        latest = None
                    how = f"its snapshot {latest.name} and its journal" if latest is not None else "its journal"
                    actor = await self._launch(
                        journal, f"resumed from {how} on another node: node {lost} was lost", latest
                    )
                except (SclateError, RayActorError, ValueError, TimeoutError) as failed:
                    log.exception("run %s: resuming it after node %s was lost failed", self._run.key, lost)
                    why = describe(failed)
                    return RunOutcome("FAILED", f"its node {lost} was lost and it could not be resumed: {why}")
                self._actor = actor
                after = 0
                continue
            if outcome is not None:
                await asyncio.to_thread(_kill, actor)
                self._actor = None
                return outcome

    async def _pull(self, actor: Any, after: int) -> tuple[RunOutcome | None, int]:
        """One pull: store what came, acknowledge it; the outcome once the end came."""
        batch = await asyncio.wait_for(actor.next_batch.remote(after, _PULL_WAIT_S), _CALL_TIMEOUT_S)
        if not batch.records:
            return None, after
        outcome = await self._apply(batch.records)
        await self._sink.commit()
        last = batch.records[-1].rseq
        await asyncio.wait_for(actor.ack.remote(last), _CALL_TIMEOUT_S)
        return outcome, last

    async def _apply(self, records: list[Record]) -> RunOutcome | None:
        outcome: RunOutcome | None = None
        for record in records:
            d = record.data
            if record.kind == "event":
                self._sink.put_event(int(d["seq"]), str(d["kind"]), d["payload"], int(d["sim_ns"]), int(d["wall_ns"]))
            elif record.kind == "journal":
                self._sink.put_journal(d)
            elif record.kind == "call":
                # Its own transaction, by call id: stored before the batch is acknowledged,
                # and a call delivered again is not stored twice.
                await self._sink.put_call(str(d["call_id"]), str(d["role"]), d["record"])
            elif record.kind == "progress":
                self._sink.progress(int(d["sim_ns"]))
            elif record.kind == "end":
                results = dict(d["results"])
                self._capture = results.pop("_capture_at_close", None)
                outcome = RunOutcome(str(d["state"]), str(d["reason"]), results)
        return outcome


async def _check_reachable(address: str) -> None:
    """A HOST:PORT head that does not accept connections is refused now: ray.init
    would retry it for minutes, holding the daemon's start-up."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or address.startswith("ray://"):
        return  # "auto" and client addresses: ray.init says what is wrong with them
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), int(port)), _CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise Unavailable(
            f"cannot reach the Ray cluster's head at ray_address {address!r}: {describe(exc)}", reason="NO_CLUSTER"
        ) from None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


def _kill(actor: Any) -> None:
    with contextlib.suppress(Exception):
        ray.kill(actor, no_restart=True)
