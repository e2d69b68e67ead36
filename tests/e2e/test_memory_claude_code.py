"""Claude Code with Mem0, for real: a daemon process, the ``sclate-claude-code-mem0``
sandbox image, the embedded model (Anthropic Messages for Claude Code, chat and
embeddings for Mem0), capture, snapshots and a branch.

Mem0 is attached the way Claude Code users attach a memory (adapters/claude_code):
``sclate-mem0`` hooks in Claude Code's settings recall before each prompt
(``UserPromptSubmit``) and store after each reply (``Stop``), and its MCP server
offers ``search_memories`` and ``add_memory`` to the model. The mechanics are
asserted, not the tiny model's quality: what a haystack session stored is in
Mem0's own store (read from a snapshot's archive of the memory volume), the
question's turn recalled it and Claude Code put it before the model, every memory
call is captured and attributed to ``memory:mem0`` or ``memory:embeddings``, and a
branch starts from its snapshot's store (that two runs never share a store is the
reference harness's pairs' to show). Shares its helpers with tests/e2e/test_memory.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .test_claude_code import FAST, MODEL_LIMITS
from .test_memory import CAT, RECALL_HEADING, _texts, check_accounting, mem0_answers, mem0_store, run_pair

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.model]

MCP_TOOLS = {"mcp__mem0__search_memories", "mcp__mem0__add_memory"}
# Claude Code's turn now holds Mem0's work too: a recall (an embedding) before the
# model, a store after it (Mem0's extraction prompt alone is several thousand tokens).
OPTIONS: dict[str, Any] = {**FAST, "turn_timeout_s": 900}


def _agent_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in calls if c["role"] == "agent"]


def _tools_offered(call: dict[str, Any]) -> set[str]:
    request = call.get("request") or {}
    return {str(t.get("name")) for t in request.get("tools", []) if isinstance(t, dict)}


async def test_claude_code_with_mem0(tmp_path: Path) -> None:
    got = await run_pair(tmp_path, "claude-code", "mem0", OPTIONS, neighbour=False, branch=False)
    assert set(got.runs) == {"cat"}
    # Every turn reached the model; a turn may only have failed by a model limit.
    assert all(any(limit in why for limit in MODEL_LIMITS) for _, _, why in got.errors), got.errors
    for key in got.runs:
        check_accounting(got.runs[key], got.calls[key], "mem0")

    before = mem0_store(got.snapshots["before-cat"], tmp_path / "before")
    after = mem0_store(got.snapshots["after-cat"], tmp_path / "after")
    # The Stop hook stored the cat session in Mem0's own store, and only after it happened.
    assert any("Biscuit" in m for m in after["messages"]), after
    assert not any("Biscuit" in m for m in before["messages"] + before["memories"]), before
    assert after["memories"], ("Mem0 extracted no memory from the haystack", mem0_answers(got.calls["cat"]))

    for key in got.runs:
        turns = got.turns[key]
        # Every turn's hooks ran without a failure, the harness says; a turn that
        # ended normally was stored (its Stop hook ran).
        assert all(t.memory.system == "mem0" and not t.memory.error for t in turns), turns
        assert all(t.memory.store_ms > 0 for t in turns if not t.harness_error), turns
    # The haystack sessions stored memories through the hooks.
    assert any(t.memory.stored > 0 for t in got.turns["cat"][:-1]), got.turns["cat"]

    for key in got.runs:
        question = got.turns[key][-1]
        assert question.round_id == CAT
        # The question recalled what the haystack stored...
        assert set(question.memory.recalled) & set(after["memories"]), (question.memory, after)
        # ...and Claude Code put it before the model (the hook's additionalContext), with
        # the MCP server's tools offered beside its own.
        last = _agent_calls(got.calls[key])[-1]
        prompt = _texts(last["request"])
        assert RECALL_HEADING in prompt and question.memory.recalled[0][:200] in prompt, prompt[-1500:]
        assert _tools_offered(last) >= MCP_TOOLS, _tools_offered(last)
