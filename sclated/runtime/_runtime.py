"""The runtime interface: what the daemon needs from a container backend.

`DockerRuntime` is the only implementation today; the interface keeps the rest
of the daemon free of Docker so remote engines or Kubernetes can follow.
Containers are addressed by id; every call is a coroutine and none blocks the
event loop.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence, Set
from pathlib import Path

from sclated.runtime._exec_stream import ExecStream
from sclated.runtime._spec import ContainerInfo, ContainerStats, EngineFacts, ExecResult, SandboxSpec

__all__ = ["Runtime"]


class Runtime(abc.ABC):
    """A container backend scoped to one daemon id (every container it makes carries it)."""

    daemon_id: str

    @abc.abstractmethod
    async def create(self, spec: SandboxSpec) -> ContainerInfo:
        """Create (not start) a hardened, labelled container; NotFound for an unknown image."""

    @abc.abstractmethod
    async def start(self, container_id: str) -> None: ...

    @abc.abstractmethod
    async def exec(
        self,
        container_id: str,
        cmd: Sequence[str],
        *,
        user: str | None = None,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> ExecResult:
        """Run a command to completion; on timeout it is killed and `timed_out` set."""

    @abc.abstractmethod
    async def exec_stream(
        self,
        container_id: str,
        cmd: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
    ) -> ExecStream:
        """Start a process with stdin/stdout attached, for line-by-line conversation."""

    @abc.abstractmethod
    async def stop(self, container_id: str, *, grace_s: float = 10.0) -> None: ...

    @abc.abstractmethod
    async def pause(self, container_id: str) -> None: ...

    @abc.abstractmethod
    async def unpause(self, container_id: str) -> None: ...

    @abc.abstractmethod
    async def commit(self, container_id: str, repo: str, tag: str) -> str:
        """Commit the container's filesystem as ``repo:tag``; returns the image id."""

    @abc.abstractmethod
    async def get_archive(self, container_id: str, path: str, dest: Path) -> int:
        """Write a tar of ``path`` (inside) to the host file ``dest``; returns its size."""

    @abc.abstractmethod
    async def put_archive(self, container_id: str, path: str, src: Path) -> None:
        """Extract the host tar file ``src`` into the directory ``path`` (inside)."""

    @abc.abstractmethod
    async def remove(self, container_id: str) -> None:
        """Remove the container (killing it if needed); a missing one is not an error."""

    @abc.abstractmethod
    async def logs(self, container_id: str, *, tail: int | None = None) -> str: ...

    @abc.abstractmethod
    async def stats(self, container_id: str) -> ContainerStats: ...

    @abc.abstractmethod
    async def inspect(self, container_id: str) -> ContainerInfo: ...

    @abc.abstractmethod
    async def writable_layer_bytes(self, container_id: str) -> int:
        """Bytes in the container's writable layer (what it wrote outside its volumes and
        mounts). A walk of the layer on the engine's side: its cost grows with the files in it."""

    @abc.abstractmethod
    async def addresses(self, container_id: str) -> tuple[str, ...]:
        """The container's IP addresses on the engine's networks (none for network mode ``none``)."""

    @abc.abstractmethod
    async def engine_facts(self) -> EngineFacts:
        """Storage driver, where writable layers live, the host's bridge addresses."""

    @abc.abstractmethod
    async def list_containers(self, labels: Mapping[str, str]) -> list[ContainerInfo]:
        """Containers (any state) carrying all of ``labels``."""

    @abc.abstractmethod
    async def reap(self, daemon_id: str, keep: Set[str]) -> list[ContainerInfo]:
        """Remove the daemon's containers (and per-run networks and volumes) whose run is
        not in ``keep``; returns what was removed."""

    @abc.abstractmethod
    async def adopt(self, daemon_id: str, runs: Set[str]) -> list[ContainerInfo]:
        """The daemon's live (running or paused) containers of ``runs``."""

    @abc.abstractmethod
    async def remove_run_resources(self, spec: SandboxSpec) -> None:
        """Remove the per-run network and volumes ``spec`` uses, if nothing uses them."""

    @abc.abstractmethod
    async def image_exists(self, ref: str) -> bool: ...

    @abc.abstractmethod
    async def image_label(self, ref: str, key: str) -> str | None:
        """A label of a local image; None when it has no such label or there is no such image."""

    @abc.abstractmethod
    async def image_tags(self, pattern: str) -> list[str]:
        """``repo:tag`` references matching ``pattern`` (``*`` wildcards, e.g. ``x:run-*``)."""

    @abc.abstractmethod
    async def remove_image(self, ref: str) -> None:
        """Remove an image; a missing one is not an error, one in use is FailedPrecondition."""

    @abc.abstractmethod
    async def close(self) -> None: ...
