"""Snapshots of runs that may move: kept in a directory every node reads.

A node saves a snapshot into a temporary directory next to its final one in the
shared ``cluster_snapshot_dir`` (``<tenant>/<run>/.<snapshot>.tmp-<hex>``): the
agent's files as the local path saves them, the committed sandbox image exported
with ``docker save`` (``sandbox/image.tar``), every archive path written as it will
be once the directory is renamed into place. The control plane adds the journal and
the calls and renames it (see ``sclated.runs.Snapshots.save_remote``), so a crash
mid-save leaves a temporary directory, never half a snapshot.

A node that restores one loads the image from there unless its engine already has
it (checked by image id), then restores as the local path does.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from sclated.errors import FailedPrecondition, NotFound

__all__ = ["IMAGE_ARCHIVE", "ensure_image", "export_image", "shared_dir", "temp_dir"]

IMAGE_ARCHIVE = "image.tar"
"""The exported image, in the snapshot's ``sandbox/`` directory."""
_META = "snapshot.json"
_DOCKER_TIMEOUT_S = 900.0


def shared_dir(root: Path, run_key: str, snapshot_id: str) -> Path:
    """``<root>/<tenant>/<run>/<snapshot>``."""
    return root / run_key / snapshot_id


def temp_dir(final: Path) -> Path:
    """Where a snapshot is written before it is renamed to ``final`` (same directory: one rename)."""
    return final.parent / f".{final.name}.tmp-{uuid.uuid4().hex[:8]}"


async def _docker(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "docker", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), _DOCKER_TIMEOUT_S)
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    return int(proc.returncode or 0), out.decode(errors="replace").strip()


def _fsync(path: Path) -> None:
    """A file's bytes on disk (the rename that publishes the snapshot comes later)."""
    with path.open("rb") as f:
        os.fsync(f.fileno())


def _relocate(tmp: Path, final: Path, sandbox: dict[str, Any]) -> dict[str, Any]:
    """The sandbox's SnapshotInfo with its paths as they will be under ``final``, written back."""

    def moved(p: str) -> str:
        path = Path(p)
        return str(final / path.relative_to(tmp)) if path.is_relative_to(tmp) else p

    out = dict(sandbox)
    out["archives"] = [[inside, moved(str(tar))] for inside, tar in sandbox.get("archives", ())]
    meta = tmp / "sandbox" / _META
    info = json.loads(meta.read_text())
    info["archives"] = out["archives"]
    meta.write_text(json.dumps(info, indent=2))
    for p in [meta, *(tmp / Path(tar).relative_to(final) for _, tar in out["archives"])]:
        _fsync(p)
    return out


async def export_image(tmp: Path, final: Path, sandbox: dict[str, Any]) -> dict[str, Any]:
    """Export the snapshot's committed image into ``tmp``; the sandbox info the row keeps."""
    out = await asyncio.to_thread(_relocate, tmp, final, sandbox)
    target = tmp / "sandbox" / IMAGE_ARCHIVE
    code, text = await _docker("save", "-o", str(target), str(sandbox["image"]))
    if code != 0:
        raise FailedPrecondition(
            f"docker save of snapshot image {sandbox['image']} into {target} failed: {text}", reason="EXPORT_FAILED"
        )
    # docker save writes it 0600: nodes that run as other users must read it too.
    await asyncio.to_thread(target.chmod, 0o644)
    await asyncio.to_thread(_fsync, target)
    out["image_archive"] = str(final / "sandbox" / IMAGE_ARCHIVE)
    return out


async def ensure_image(snapshot_dir: Path) -> bool:
    """Have the snapshot's image on this node's engine; True when it was loaded from the
    shared directory (False: the engine had that image id already)."""
    meta = snapshot_dir / "sandbox" / _META
    try:
        info = json.loads(await asyncio.to_thread(meta.read_text))
    except FileNotFoundError:
        raise NotFound(f"no snapshot in {snapshot_dir} (missing sandbox/{_META})") from None
    image, image_id = str(info["image"]), str(info["image_id"])
    code, _ = await _docker("image", "inspect", "--format", "{{.Id}}", image_id)
    loaded = False
    if code != 0:
        archive = snapshot_dir / "sandbox" / IMAGE_ARCHIVE
        code, text = await _docker("load", "-i", str(archive))
        if code != 0:
            raise NotFound(f"docker load of snapshot image {image} from {archive} failed: {text}")
        loaded = True
    # The tag restores use (a node where the id is known under no tag, or another one).
    code, tagged = await _docker("image", "inspect", "--format", "{{.Id}}", image)
    if code != 0 or tagged != image_id:
        code, text = await _docker("tag", image_id, image)
        if code != 0:
            raise NotFound(f"tagging snapshot image {image_id} as {image} failed: {text}")
    return loaded
