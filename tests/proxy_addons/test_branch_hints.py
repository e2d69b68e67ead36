"""Branch reasons read from what Claude Code and Codex actually send (no sclate headers)."""

from __future__ import annotations

from typing import Any

from proxy_addons import _attribution, _branch_hints
from proxy_addons._call import Call


def _headers(values: dict[str, str]) -> _attribution.Header:
    lowered = {k.lower(): v for k, v in values.items()}
    return lambda name: lowered.get(name.lower())


def _claude_code_body(system_opening: str, first_user: str) -> dict[str, Any]:
    # The shape Claude Code 2.1.332 sends: a billing line and its prompt as system
    # blocks with cache_control, then the conversation.
    return {
        "model": "m",
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332;"},
            {"type": "text", "text": system_opening + " ...", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [{"role": "user", "content": [{"type": "text", "text": first_user}]}],
    }


def test_a_claude_code_subagent_is_recognised_by_its_system_prompt() -> None:
    sub = _claude_code_body("You are an agent for Claude Code, Anthropic's official CLI for Claude.", "Find x")
    main = _claude_code_body("You are Claude Code, Anthropic's official CLI for Claude.", "Find x")
    assert _branch_hints.from_body("anthropic_messages", sub) == "subagent"
    assert _branch_hints.from_body("anthropic_messages", main) is None


def test_a_claude_code_session_after_compaction_is_recognised_by_its_first_message() -> None:
    body = _claude_code_body(
        "You are Claude Code, Anthropic's official CLI for Claude.",
        "This session is being continued from a previous conversation that ran out of context. "
        "The summary below covers the earlier portion of the conversation.",
    )
    assert _branch_hints.from_body("anthropic_messages", body) == "compaction"
    # The same words later in the conversation (a user quoting them) are not a compaction.
    body["messages"].insert(0, {"role": "user", "content": "hello"})
    assert _branch_hints.from_body("anthropic_messages", body) is None


def test_a_codex_history_rebuilt_after_compaction() -> None:
    summary = "Another language model started to solve this problem and produced a summary of its thinking."
    body: dict[str, Any] = {
        "instructions": "You are Codex",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": summary}]},
        ],
    }
    assert _branch_hints.from_body("openai_responses", body) == "compaction"
    body["input"].pop()
    assert _branch_hints.from_body("openai_responses", body) is None
    # Not a dict, or another API: no hint, no error.
    assert _branch_hints.from_body("openai_responses", "raw text") is None
    assert _branch_hints.from_body("openai_chat", body) is None


def test_codex_subagent_headers() -> None:
    assert _branch_hints.from_headers(_headers({"x-openai-subagent": "compact"})) == ("compaction", None)
    assert _branch_hints.from_headers(_headers({"x-openai-subagent": "review"})) == ("subagent", None)
    assert _branch_hints.from_headers(_headers({"x-codex-parent-thread-id": "th-1"})) == ("subagent", "th-1")
    assert _branch_hints.from_headers(_headers({})) == (None, None)


def test_sclate_headers_win_over_the_harness_marks() -> None:
    h = _attribution.hints(
        _headers({"x-openai-subagent": "review", "x-sclate-branch": "fork", "x-sclate-parent-thread": "mine"})
    )
    assert (h.branch_hint, h.parent_thread) == ("fork", "mine")
    h = _attribution.hints(_headers({"x-openai-subagent": "compact"}))
    assert h.branch_hint == "compaction"


def test_a_call_records_the_hint_read_from_its_body() -> None:
    import json

    body = _claude_code_body("You are an agent for Claude Code, Anthropic's official CLI for Claude.", "go")
    call = Call(
        call_id="c", run="r", role="agent", api="anthropic_messages", method="POST", path="/v1/messages", start_ns=0
    )
    call.read_request(json.dumps(body).encode(), request_tokens=False)
    assert call.branch_hint == "subagent"
    # A hint the harness sent in a header is kept.
    call = Call(
        call_id="c", run="r", role="agent", api="anthropic_messages", method="POST", path="/v1/messages", start_ns=0
    )
    call.with_hints(_attribution.Hints(branch_hint="fork"))
    call.read_request(json.dumps(body).encode(), request_tokens=False)
    assert call.branch_hint == "fork"


def test_a_recorded_claude_code_request_after_compaction() -> None:
    # Recorded from Claude Code 2.1.332 in a real sclate run that compacted
    # (autocompact_pct=3): the first call of the session it continued with.
    import json
    from pathlib import Path

    body = json.loads((Path(__file__).parent / "fixtures" / "claude_code_after_compaction.json").read_text())
    assert _branch_hints.from_body("anthropic_messages", body) == "compaction"
    # The same call with the compaction summary taken out reads as an ordinary one.
    first = body["messages"][0]
    first["content"] = [b for b in first["content"] if _branch_hints.CLAUDE_CODE_COMPACTED not in b.get("text", "")]
    assert _branch_hints.from_body("anthropic_messages", body) is None
