"""The ``sclate-hermes`` image recipe (folder ``images/hermes``).

Hermes Agent from PyPI at a pinned version (``images/hermes/requirements.txt``),
its wheels downloaded on the host and installed offline; ``bridge.py`` stays in
this package (one copy, tested here) and enters the build context as a host
file, so changing it gives the image a new content tag.
"""

from __future__ import annotations

from pathlib import Path

from sclated.runtime import HostFile, ImageRecipe, recipes, register

__all__ = ["BRIDGE_PY", "HERMES_VERSION", "IMAGE_NAME", "RECIPE", "register_image"]

IMAGE_NAME = "sclate-hermes"
HERMES_VERSION = "0.19.0"
"""Kept equal to the pin in images/hermes/requirements.txt (a test checks)."""
BRIDGE_PY = Path(__file__).resolve().parent / "bridge.py"

RECIPE = ImageRecipe(
    name=IMAGE_NAME,
    folder="hermes",
    parent="sclate-sandbox",
    wheel_requirements="requirements.txt",
    host_files=(HostFile("bridge.py", lambda: BRIDGE_PY),),
)


def register_image() -> None:
    """Make the builder know the image (idempotent)."""
    if all(r.name != IMAGE_NAME for r in recipes()):
        register(RECIPE)
