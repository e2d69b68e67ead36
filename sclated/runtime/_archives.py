"""Directories out of a container: the engine's archive (a tar of one path) onto the host."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path

from sclated.errors import FailedPrecondition, InvalidArgument

__all__ = ["untar_dir"]


def untar_dir(tar_path: Path, dest: Path) -> None:
    """Unpack an engine archive of one directory into ``dest`` (made here; must not exist).

    The engine names every entry after the directory's own basename; ``dest`` gets
    what is under it. Unpacked with tarfile's ``data`` filter (no absolute paths, no
    links out of the tree, no devices), into a sibling temporary directory that is
    renamed into place, so ``dest`` is either complete or absent.
    """
    if dest.exists():
        raise InvalidArgument(f"{dest} already exists: copy a directory out into a new path", field="dest")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".untar-", dir=dest.parent) as tmp:
        with tarfile.open(tar_path) as tar:
            members = tar.getmembers()
            roots = {m.name.split("/", 1)[0] for m in members}
            if len(roots) != 1:
                tops = sorted(roots)[:5]
                raise FailedPrecondition(f"the archive {tar_path.name} is not one directory (tops: {tops})")
            top = members[0].name.split("/", 1)[0]
            if not any(m.name == top and m.isdir() for m in members):
                raise FailedPrecondition(f"the archive {tar_path.name} holds {top!r}, which is not a directory")
            tar.extractall(tmp, filter="data")
        shutil.move(str(Path(tmp) / top), dest)
