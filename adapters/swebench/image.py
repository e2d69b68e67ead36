"""The images of the project's own SWE-bench environments.

``sclate-swe-env`` is a Debian root filesystem with Python, git and patch
(``images/swe-env``); ``sclate-swe-own`` adds pytest and the own repositories'
git bundles (``images/swe-own``, bundles from ``adapters/swebench/own/repos`` as
host files, so a changed bundle gives the image a new content tag). Instance
images are built on ``sclate-swe-own`` by the adapter (``_environment.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sclated.runtime import Debootstrap, HostFile, ImageRecipe, recipes, register

__all__ = ["OWN_IMAGE", "OWN_REPOS_DIR", "register_images"]

ENV_IMAGE = "sclate-swe-env"
OWN_IMAGE = "sclate-swe-own"
OWN_REPOS_DIR = Path(__file__).resolve().parent / "own" / "repos"


def _at(path: Path) -> Callable[[], Path]:
    return lambda: path


def register_images() -> None:
    """Make the image builder know the SWE images (idempotent)."""
    names = {r.name for r in recipes()}
    if ENV_IMAGE not in names:
        register(ImageRecipe(name=ENV_IMAGE, folder="swe-env", debootstrap=Debootstrap()))
    if OWN_IMAGE not in names:
        bundles = sorted(OWN_REPOS_DIR.glob("*.bundle"))
        register(
            ImageRecipe(
                name=OWN_IMAGE,
                folder="swe-own",
                parent=ENV_IMAGE,
                wheel_requirements="requirements.txt",
                host_files=tuple(HostFile(f"repos/{b.name}", _at(b)) for b in bundles),
            )
        )
