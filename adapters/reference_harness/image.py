"""The ``sclate-reference-agent`` image recipe (folder ``images/reference-agent``).

The recipe folder holds only the Dockerfile; ``agent.py`` and ``crontab`` stay
in this package (one copy, tested here) and enter the build context as host
files, so changing either gives the image a new content tag.
"""

from __future__ import annotations

from adapters.reference_harness._adapter import AGENT_PY, CRONTAB
from sclated.runtime import HostFile, ImageRecipe, recipes, register

__all__ = ["IMAGE_NAME", "RECIPE", "register_image"]

IMAGE_NAME = "sclate-reference-agent"

RECIPE = ImageRecipe(
    name=IMAGE_NAME,
    folder="reference-agent",
    parent="sclate-sandbox",
    host_files=(HostFile("agent.py", lambda: AGENT_PY), HostFile("crontab", lambda: CRONTAB)),
)


def register_image() -> None:
    """Make the builder know the image (idempotent)."""
    if all(r.name != IMAGE_NAME for r in recipes()):
        register(RECIPE)
