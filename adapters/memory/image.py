"""Images with a memory system: a harness's image plus the system's layer.

``<harness image>-<system>`` (``sclate-reference-agent-mem0``) is built from the
recipe folder ``images/memory-<system>/`` on top of the harness's own image, its
wheels downloaded on the host like every image's, and the system's files of this
repository (``MemorySystem.image_files``, such as ``mem0_tools.py``) put into the
build context as host files (a change to one gives the image a new content tag).
Registered for each pair a harness declares, so ``sclated images build`` and the
doctor know them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from adapters.memory._systems import MemorySystem
from sclated.runtime import HostFile, ImageRecipe, recipes, register

__all__ = ["memory_image", "register_memory_image"]


def memory_image(harness_image: str, system: MemorySystem) -> str:
    return f"{harness_image}-{system.name}"


def _at(path: Path) -> Callable[[], Path]:
    return lambda: path


def register_memory_image(harness_image: str, system: MemorySystem) -> str:
    """Make the builder know the pair's image (idempotent); returns its name."""
    name = memory_image(harness_image, system)
    if all(r.name != name for r in recipes()):
        register(
            ImageRecipe(
                name=name,
                folder=system.image_folder,
                parent=harness_image,
                wheel_requirements="requirements.txt",
                host_files=tuple(HostFile(dest, _at(path)) for dest, path in system.image_files),
            )
        )
    return name
