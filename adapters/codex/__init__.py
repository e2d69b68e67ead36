"""The Codex CLI (npm ``@openai/codex``), unmodified, as a sclate harness.

:class:`CodexHarness` declares it on the harness contract (``DECLARATION``);
``bridge.py`` runs inside its sandbox (image ``sclate-codex``, see ``image.py``).
"""

from adapters.codex._harness import BRIDGE, DECLARATION, HOME, OPTIONAL_TOOLS, CodexHarness

__all__ = ["BRIDGE", "DECLARATION", "HOME", "OPTIONAL_TOOLS", "CodexHarness"]
