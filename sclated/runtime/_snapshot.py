"""Save and restore a sandbox: the building blocks the run's save/restore uses.

snapshot = pause, commit the container filesystem to ``sclate-snap:<run>-<n>``,
archive the state directories to tar files on the host, unpause.
restore = a fresh container from the committed image with the archives put
back, created but started only once the state is in place.

The archives are redundant with the commit for directories in the container's
own filesystem, but not for volumes (a commit skips them), and they are the
part a trainer can inspect or branch without the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sclated.errors import InvalidArgument, NotFound, SclateError
from sclated.runtime._runtime import Runtime
from sclated.runtime._spec import ContainerInfo, SandboxSpec, check_name

__all__ = ["SNAPSHOT_REPO", "STATE_DIRS", "SnapshotInfo", "restore", "snapshot"]

SNAPSHOT_REPO = "sclate-snap"
STATE_DIRS = ("/workspace", "/memory")
_META = "snapshot.json"


@dataclass(frozen=True)
class SnapshotInfo:
    run: str
    n: int
    image: str  # sclate-snap:<run>-<n>
    image_id: str
    archives: tuple[tuple[str, str], ...]  # (path inside, host tar file)
    created_ns: int
    pause_ms: float  # how long the sandbox was frozen
    bytes: int

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> SnapshotInfo:
        data: dict[str, Any] = json.loads(text)
        data["archives"] = tuple(tuple(a) for a in data["archives"])
        return cls(**data)

    @classmethod
    async def load(cls, snapshot_dir: Path) -> SnapshotInfo:
        path = Path(snapshot_dir) / _META
        try:
            text = await asyncio.to_thread(path.read_text)
        except FileNotFoundError:
            raise NotFound(
                f"no snapshot in {snapshot_dir} (missing {_META}); list the run's snapshots and pick one that exists"
            ) from None
        return cls.from_json(text)


def _archive_name(path: str) -> str:
    return path.strip("/").replace("/", "__") + ".tar"


async def _next_n(runtime: Runtime, run: str) -> int:
    # n counts up per run name across tenants and daemons, so a commit never
    # moves another snapshot's tag.
    prefix = f"{SNAPSHOT_REPO}:{run}-"
    used = [int(tag[len(prefix) :]) for tag in await runtime.image_tags(f"{prefix}*") if tag[len(prefix) :].isdigit()]
    return max(used, default=0) + 1


async def snapshot(
    runtime: Runtime,
    container: ContainerInfo,
    dest_dir: Path,
    *,
    state_dirs: Sequence[str] = STATE_DIRS,
    on_paused: Callable[[], Awaitable[None]] | None = None,
) -> SnapshotInfo:
    """Freeze ``container``, commit it and archive ``state_dirs`` into ``dest_dir``.

    A state directory that does not exist in the container is skipped. The
    container is unpaused whatever happens; on failure the commit and archives
    made so far are removed. ``on_paused`` runs once the container is frozen,
    before the commit: the moment the caller records what goes with the
    filesystem (a run's journal position); if it raises, nothing is kept.
    """
    run = check_name(container.run, "run")
    for d in state_dirs:
        if not d.startswith("/") or d == "/":
            raise InvalidArgument(f"state dir {d!r} must be absolute and not /", field="state_dirs")
    dest = Path(dest_dir)
    await asyncio.to_thread(dest.mkdir, parents=True, exist_ok=True)
    n = await _next_n(runtime, run)
    tag = f"{run}-{n}"
    image = f"{SNAPSHOT_REPO}:{tag}"
    archives: list[tuple[str, str]] = []
    total = 0
    image_id = ""
    t0 = time.monotonic()
    await runtime.pause(container.id)
    try:
        if on_paused is not None:
            await on_paused()
        image_id = await runtime.commit(container.id, SNAPSHOT_REPO, tag)
        for d in state_dirs:
            target = dest / _archive_name(d)
            try:
                total += await runtime.get_archive(container.id, d, target)
            except NotFound:
                with contextlib.suppress(FileNotFoundError):
                    await asyncio.to_thread(target.unlink)
                continue
            archives.append((d, str(target)))
    except BaseException:
        for _, tar in archives:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(Path(tar).unlink)
        if image_id:
            with contextlib.suppress(SclateError):
                await runtime.remove_image(image)
        raise
    finally:
        with contextlib.suppress(SclateError):
            await asyncio.shield(runtime.unpause(container.id))
    pause_ms = (time.monotonic() - t0) * 1000
    info = SnapshotInfo(
        run=run,
        n=n,
        image=image,
        image_id=image_id,
        archives=tuple(archives),
        created_ns=time.time_ns(),
        pause_ms=pause_ms,
        bytes=total,
    )
    await asyncio.to_thread((dest / _META).write_text, info.to_json())
    return info


async def restore(runtime: Runtime, info: SnapshotInfo, spec: SandboxSpec) -> ContainerInfo:
    """A fresh, started container from ``info`` (spec.image is replaced by the snapshot's).

    NotFound if the image or an archive is gone; nothing is left behind on failure.
    """
    missing = [tar for _, tar in info.archives if not await asyncio.to_thread(Path(tar).is_file)]
    if missing:
        raise NotFound(
            f"snapshot {info.image}: archive(s) {', '.join(missing)} are gone; "
            "the snapshot cannot be restored, take or pick another"
        )
    if not await runtime.image_exists(info.image):
        raise NotFound(
            f"snapshot image {info.image} is not on this engine (removed or taken on "
            "another host); pick another snapshot"
        )
    fresh = dataclasses.replace(spec, image=info.image)
    created = await runtime.create(fresh)
    try:
        for path, tar in info.archives:
            parent = str(Path(path).parent)
            await runtime.put_archive(created.id, parent, Path(tar))
        await runtime.start(created.id)
    except BaseException:
        with contextlib.suppress(SclateError):
            await asyncio.shield(runtime.remove(created.id))
        raise
    return dataclasses.replace(created, state="running")
