"""Why a call starts a new branch, read from what an unmodified harness sends.

A harness that knows sclate says so in ``x-sclate-branch``; the ones that do
not (Claude Code, Codex) leave marks of their own when they start a sub-agent
or continue after compacting their context. Each mark below was read from the
pinned version's binary and its recorded requests; a harness that changes its
wording loses the hint, never the call (the trajectory then records
``new_thread`` or ``prefix_mismatch``, which is still a new branch).

Hints only matter for a call that extends no earlier branch: a compaction
request that appends its summarising instruction to the conversation still
extends it, and the trajectory keeps it there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "CLAUDE_CODE_COMPACTED",
    "CLAUDE_CODE_SUBAGENT",
    "CODEX_COMPACTED",
    "from_body",
    "from_headers",
]

CLAUDE_CODE_SUBAGENT = "You are an agent for Claude Code"
"""How Claude Code's sub-agents' system prompt opens (its main one: "You are Claude Code")."""
CLAUDE_CODE_COMPACTED = "This session is being continued from a previous conversation"
"""The opening of the first user message of a Claude Code session after compaction."""
CODEX_COMPACTED = "Another language model started to solve this problem"
"""The opening of the summary Codex puts into the history it rebuilds after compacting."""

_CODEX_COMPACT_SUBAGENTS = frozenset({"compact", "compaction"})

Header = Callable[[str], "str | None"]


def from_headers(header: Header) -> tuple[str | None, str | None]:
    """``(branch_hint, parent_thread)`` from a harness's own headers.

    Codex marks calls it makes for something other than the user's turn with
    ``x-openai-subagent`` (a compaction, a review, a spawned agent) and names the
    thread that spawned one in ``x-codex-parent-thread-id``.
    """
    kind = (header("x-openai-subagent") or "").strip().lower()
    parent = (header("x-codex-parent-thread-id") or "").strip() or None
    if not kind:
        return (("subagent" if parent else None), parent)
    return ("compaction" if kind in _CODEX_COMPACT_SUBAGENTS else "subagent"), parent


def from_body(api: str, body: Any) -> str | None:
    """``subagent``, ``compaction`` or None from a request body's own marks."""
    if not isinstance(body, dict):
        return None
    if api == "anthropic_messages":
        if any(t.lstrip().startswith(CLAUDE_CODE_SUBAGENT) for t in _texts(body.get("system"))):
            return "subagent"
        first = _first_user_text(body.get("messages"))
        if first is not None and CLAUDE_CODE_COMPACTED in first:
            return "compaction"
    elif api == "openai_responses":
        items = body.get("input")
        if isinstance(items, list):
            for item in items:
                if (
                    isinstance(item, dict)
                    and item.get("role") == "user"
                    and any(t.lstrip().startswith(CODEX_COMPACTED) for t in _texts(item.get("content")))
                ):
                    return "compaction"
    return None


def _texts(content: Any) -> list[str]:
    """The text parts of a system field or message content (a string or blocks)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    out: list[str] = []
    for part in content:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            out.append(part["text"])
    return out


def _first_user_text(messages: Any) -> str | None:
    if not isinstance(messages, list):
        return None
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "user":
            return "\n".join(_texts(m.get("content")))
    return None
