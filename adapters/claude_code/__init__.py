"""Claude Code (npm ``@anthropic-ai/claude-code``), unmodified, as a sclate harness.

:class:`ClaudeCodeHarness` declares it on the harness contract (``DECLARATION``);
``bridge.py`` runs inside its sandbox (image ``sclate-claude-code``, see ``image.py``).
"""

from adapters.claude_code._harness import BRIDGE, DECLARATION, DEFAULT_TOOLS, HOME, ClaudeCodeHarness

__all__ = ["BRIDGE", "DECLARATION", "DEFAULT_TOOLS", "HOME", "ClaudeCodeHarness"]
