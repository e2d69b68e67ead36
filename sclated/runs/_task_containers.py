"""Containers of a benchmark's own images for one run (``adapters.TaskContainers``).

A SWE-bench instance is graded in its own environment image, apart from the
agent's sandbox: the run gives its scenario these containers, labelled with the
run (so a daemon restart reaps any left over, as it reaps sandboxes), on no
network, with the sandboxes' hardened host config. Images are local; one a
benchmark can build offline it builds on a daemon image recipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import posixpath
import secrets
import tarfile
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from adapters import ExecOutput
from sclated.errors import FailedPrecondition, InvalidArgument, SclateError
from sclated.runtime import Limits, Runtime, SandboxSpec, build_derived, untar_dir

__all__ = ["TASK_ROLE_PREFIX", "EngineTaskContainers"]

TASK_ROLE_PREFIX = "task-"
"""The role label of a run's task containers (its sandbox's is ``agent``)."""


class _Container:
    def __init__(self, owner: EngineTaskContainers, runtime: Runtime, container_id: str, image: str) -> None:
        self._owner = owner
        self._runtime = runtime
        self.id = container_id
        self.image = image

    async def exec(self, argv: Sequence[str], *, timeout_s: float = 1800.0) -> ExecOutput:
        result = await self._runtime.exec(self.id, argv, user="root", timeout_s=timeout_s)
        out = (result.stdout + result.stderr).decode("utf-8", "replace")
        return ExecOutput(124 if result.timed_out else result.exit_code, out)

    async def put_file(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        if not path.startswith("/") or path.endswith("/"):
            raise InvalidArgument(f"put_file: {path!r} is not an absolute file path", field="path")
        directory, name = posixpath.split(path)
        with tempfile.TemporaryDirectory(prefix="sclate-put-") as tmp:
            tar_path = Path(tmp) / "file.tar"

            def write() -> None:
                with tarfile.open(tar_path, "w") as tar:
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    info.mode = mode
                    tar.addfile(info, io.BytesIO(data))

            await asyncio.to_thread(write)
            mkdir = await self._runtime.exec(self.id, ["mkdir", "-p", directory], user="root", timeout_s=30)
            if mkdir.exit_code != 0:
                raise FailedPrecondition(f"making {directory} in {self.image}: {mkdir.stderr.decode(errors='replace')}")
            await self._runtime.put_archive(self.id, directory, tar_path)

    async def copy_out(self, path: str, dest: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="sclate-copy-") as tmp:
            tar_path = Path(tmp) / "out.tar"
            await self._runtime.get_archive(self.id, path, tar_path)
            await asyncio.to_thread(untar_dir, tar_path, dest)

    async def close(self) -> None:
        await self._owner.discard(self)


class EngineTaskContainers:
    """``adapters.TaskContainers`` on the daemon's Docker engine, for one run."""

    def __init__(
        self,
        runtime: Callable[[], Awaitable[Runtime]],
        tenant: str,
        run_id: str,
        *,
        limits: Limits | None = None,
    ) -> None:
        """``runtime``: the daemon's engine, connected on first use (``SandboxServices.runtime``)."""
        self._get_runtime = runtime
        self._tenant = tenant
        self._run_id = run_id
        self._limits = limits or Limits()
        self._open: dict[str, _Container] = {}

    async def _runtime(self) -> Runtime:
        return await self._get_runtime()

    async def image_exists(self, ref: str) -> bool:
        return await (await self._runtime()).image_exists(ref)

    async def image_label(self, ref: str, key: str) -> str | None:
        return await (await self._runtime()).image_label(ref, key)

    async def build_image(
        self, ref: str, dockerfile: str, *, base_recipe: str, labels: Mapping[str, str] | None = None
    ) -> None:
        await build_derived(ref, dockerfile, base_recipe=base_recipe, labels=labels)

    async def open(self, image: str, *, purpose: str) -> _Container:
        runtime = await self._runtime()
        if not await runtime.image_exists(image):
            raise FailedPrecondition(f"image {image} is not on this engine (images are local, never pulled)")
        spec = SandboxSpec(
            image=image,
            run=self._run_id,
            tenant=self._tenant,
            limits=self._limits,
            network_mode="none",
            working_dir="/",
            command=("sleep", "infinity"),
            user="root",
            role=f"{TASK_ROLE_PREFIX}{purpose}"[:40] + f"-{secrets.token_hex(2)}",
        )
        info = await runtime.create(spec)
        container = _Container(self, runtime, info.id, image)
        self._open[info.id] = container
        try:
            await runtime.start(info.id)
        except BaseException:
            await self.discard(container)
            raise
        return container

    async def discard(self, container: _Container) -> None:
        self._open.pop(container.id, None)
        runtime = await self._runtime()
        with contextlib.suppress(SclateError):
            await runtime.remove(container.id)

    async def close(self) -> None:
        """Remove every container still open (the run ended, or failed mid-grade)."""
        for container in list(self._open.values()):
            await self.discard(container)
