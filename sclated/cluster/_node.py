"""What a sandboxed run's worker needs on its cluster node.

On one host the daemon's :class:`SandboxServices` hold the Docker engine, the
embedded model and the store the capture proxy hands calls to. On a node there is
no daemon: each run's actor builds its own services on the node's Docker engine,
with

* the node's one embedded model: a detached, named :class:`NodeModel` actor pinned
  to the node (its server a child of that actor, ``127.0.0.1`` on the node), started
  by the first run there that needs it and shared by every later one;
* a :class:`BufferedCalls` call store: captured calls go into the run's
  :class:`RecordBuffer` as ``call`` records, which the control plane stores (by
  call id, so a redelivery is not a duplicate) before it acknowledges them.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from sclated.cluster._records import RecordBuffer
from sclated.errors import InvalidArgument, ModelUnavailable, describe
from sclated.model import EmbeddedModel, ModelStatus
from sclated.sandbox import SandboxServices, short_sockets_dir

__all__ = [
    "BufferedCalls",
    "NodeModel",
    "NodeModelClient",
    "NodeSettings",
    "node_dirs",
    "node_services",
    "node_state_dir",
    "remove_run_dir",
]

NAMESPACE = "sclate"


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """What the control plane tells each worker about the services it builds on its node."""

    scope: str
    """The daemon's scope (names its actors and the node's directories)."""
    daemon_id: str
    """Labels the run's containers as the daemon's (``sclated.runtime``)."""
    model_n_ctx: int | None = None
    """The context of the node's embedded model (the daemon's ``model_n_ctx``)."""


def node_state_dir(scope: str, node_id: str) -> Path:
    """This node's directory for the daemon ``scope``: the model's log, run dirs, sockets.
    Named by the node too: nodes of a cluster on one machine share its temp dir."""
    return Path(tempfile.gettempdir()) / f"sclated-node-{scope}-{node_id[:16]}"


def node_dirs(node_id: str) -> list[Path]:
    """Every daemon scope's directory of node ``node_id`` on this machine."""
    return sorted(Path(tempfile.gettempdir()).glob(f"sclated-node-*-{node_id[:16]}"))


class NodeModelActor:
    """The node's embedded model server, kept by one detached actor on the node."""

    def __init__(self, log_path: str, n_ctx: int | None) -> None:
        self._model = EmbeddedModel(log_path=Path(log_path), n_ctx=n_ctx)

    async def url(self, timeout_s: float | None) -> str:
        return await self._model.url(timeout_s=timeout_s)

    async def explain_drop(self, wait_s: float) -> str | None:
        return await self._model.explain_drop(wait_s=wait_s)

    def status(self) -> ModelStatus:
        return self._model.status

    async def close(self) -> None:
        await self._model.close()


NodeModel: Any = ray.remote(max_restarts=0)(NodeModelActor)
"""The actor class (``NodeModel.options(name=..., get_if_exists=True)``): one per node and scope."""


class NodeModelClient:
    """A run's view of its node's model (``sclated.sandbox.ModelService``): the model
    actor is found, or created, on first use; closing the run leaves it to the others."""

    def __init__(self, settings: NodeSettings, node_id: str, state_dir: Path) -> None:
        self._settings = settings
        self._node_id = node_id
        self._log_path = state_dir / "model-server.log"
        self._actor: Any = None
        self._lock = asyncio.Lock()
        self._status = ModelStatus("stopped", None, None, 0, None, None, str(self._log_path))

    @property
    def name(self) -> str:
        return f"model-{self._settings.scope}-{self._node_id[:16]}"

    @property
    def status(self) -> ModelStatus:
        return self._status

    async def _get(self) -> Any:
        async with self._lock:
            if self._actor is None:
                options = {
                    "name": self.name,
                    "namespace": NAMESPACE,
                    "lifetime": "detached",
                    "get_if_exists": True,
                    "num_cpus": 0,
                    "scheduling_strategy": NodeAffinitySchedulingStrategy(self._node_id, soft=False),
                }
                args = (str(self._log_path), self._settings.model_n_ctx)
                # Named-actor creation waits for the head: off the event loop.
                self._actor = await asyncio.to_thread(lambda: NodeModel.options(**options).remote(*args))
            return self._actor

    async def url(self, *, timeout_s: float | None = None) -> str:
        actor = await self._get()
        try:
            url = str(await actor.url.remote(timeout_s))
            self._status = await actor.status.remote()
        except RayActorError as exc:
            self._actor = None  # found or made again on the next call
            raise ModelUnavailable(f"the node's embedded model actor {self.name} died: {describe(exc)}") from None
        return url

    async def endpoint(self) -> tuple[str, int, bool]:
        parts = urlsplit(await self.url())
        if parts.hostname is None or parts.port is None:
            raise ModelUnavailable(f"the node's embedded model answered with no address: {parts.geturl()!r}")
        return parts.hostname, parts.port, False

    async def explain_drop(self, *, wait_s: float = 2.0) -> str | None:
        actor = self._actor
        if actor is None:
            return None
        try:
            why = await actor.explain_drop.remote(wait_s)
        except RayActorError as exc:
            return f"the node's embedded model actor died ({describe(exc)})"
        return None if why is None else str(why)

    async def close(self) -> None:
        return None  # the node's model serves the node's other runs: it stays


class BufferedCalls:
    """The call store of one run's sandbox on a node (``sclated.sandbox.CallStore``):
    each first-seen call goes into the run's record stream as a ``call`` record."""

    def __init__(self, buffer: RecordBuffer, run_key: str) -> None:
        self._buffer = buffer
        self._run_key = run_key
        self._calls: dict[str, dict[str, Any]] = {}

    def _check(self, run: str) -> None:
        if run != self._run_key:
            raise InvalidArgument(f"a call of run {run!r} given to run {self._run_key!r}'s store", field="run")

    async def put_call(self, run: str, call_id: str, role: str, record: dict[str, Any]) -> bool:
        self._check(run)
        if call_id in self._calls:
            return False
        self._buffer.call(call_id, role, record)
        self._calls[call_id] = record
        return True

    async def calls(self, run: str) -> list[dict[str, Any]]:
        self._check(run)
        return list(self._calls.values())


def node_services(
    settings: NodeSettings, node_id: str, buffer: RecordBuffer, run_key: str, calls: BufferedCalls | None = None
) -> SandboxServices:
    """A run's sandbox services on this node (the engine is connected on first use);
    ``calls``: the run's call store when its worker reads it too (snapshots)."""
    state_dir = node_state_dir(settings.scope, node_id)
    state_dir.mkdir(parents=True, exist_ok=True)
    return SandboxServices(
        state_dir=state_dir,
        daemon_id=settings.daemon_id,
        store=calls if calls is not None else BufferedCalls(buffer, run_key),
        model=NodeModelClient(settings, node_id, state_dir),
        sockets_dir=short_sockets_dir(state_dir),
    )


def remove_run_dir(run_dir: Path, node_dir: Path) -> None:
    """Remove a run's directory under ``node_dir``, then its parents up to ``node_dir`` as they empty."""
    shutil.rmtree(run_dir, ignore_errors=True)
    parent = run_dir.parent
    while parent != node_dir.parent and parent.is_relative_to(node_dir):
        try:
            parent.rmdir()  # only when empty: other runs, the model's log
        except OSError:
            return
        parent = parent.parent
