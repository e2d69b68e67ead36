"""The built-in scripted agent (in-daemon, no container)."""

from adapters.scripted._scripted import ScriptedAgent

__all__ = ["ScriptedAgent"]
