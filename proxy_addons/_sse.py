"""Server-sent events: splitting a stream into events, and rebuilding the
response a non-streamed call would have returned (OpenAI chat and
completions, OpenAI Responses, Anthropic messages)."""

import json
from typing import Any

MAX_INDEX = 256
"""The highest choice, tool call or content block index a stream may name, plus one: an
event past it is malformed (an index of 10**9 would otherwise grow a list to match)."""
_MALFORMED = (TypeError, ValueError, KeyError, AttributeError, IndexError)
"""What folding an event with fields of the wrong types raises."""


def json_or_none(s: str) -> Any:
    """``s`` parsed, or None when it is not JSON (nested past the recursion limit included)."""
    try:
        return json.loads(s)
    except (ValueError, RecursionError):
        return None


def _index(value: Any) -> int:
    """A stream's index (of a choice, a tool call, a content block); ValueError when it is
    not an integer in [0, MAX_INDEX)."""
    if type(value) is not int or not 0 <= value < MAX_INDEX:
        raise ValueError(f"index {str(value)[:40]} is not an integer in [0, {MAX_INDEX})")
    return value


def parse_sse(text: str) -> tuple[list[tuple[str | None, str]], bool]:
    """Split an SSE body into ``(event, data)`` pairs; the flag says the last
    event was terminated (a stream cut mid-event leaves it False)."""
    events: list[tuple[str | None, str]] = []
    norm = text.replace("\r\n", "\n").replace("\r", "\n")
    blocks = norm.split("\n\n")
    terminated = norm.endswith("\n\n") or norm == ""
    for block in blocks:
        if not block.strip():
            continue
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if data or name:
            events.append((name, "\n".join(data)))
    return events, terminated


def assemble_stream(api: str, text: str) -> tuple[Any, bool, int]:
    """The final response a non-streamed call would have returned, whether the
    stream ended properly (a cut stream is a failed call), and how many of its
    events were malformed (fields of the wrong types; left out of the response)."""
    events, terminated = parse_sse(text)
    if api in ("openai_chat", "openai_completions"):
        datas = [e[1].strip() if e[1].strip() == "[DONE]" else json_or_none(e[1]) for e in events]
        final, finished, bad = assemble_openai_stream(api, datas)
        return final, finished and terminated, bad
    if api == "anthropic_messages":
        final, finished, bad = assemble_anthropic_stream([(n, json_or_none(d)) for n, d in events])
        return final, finished and terminated, bad
    if api == "openai_responses":
        last, finished = assemble_responses_stream([json_or_none(d) for _, d in events])
        return last, finished and terminated, 0
    return None, terminated, 0


def _merge_tool_calls(acc: list[dict[str, Any]], deltas: Any) -> None:
    if not isinstance(deltas, list):
        return
    for d in deltas:
        if not isinstance(d, dict):
            continue
        idx = _index(d.get("index", len(acc)))
        while len(acc) <= idx:
            acc.append({"function": {"name": "", "arguments": ""}})
        tc = acc[idx]
        for k in ("id", "type"):
            if d.get(k) is not None:
                tc[k] = d[k]
        fn = d.get("function")
        if isinstance(fn, dict):
            if fn.get("name"):
                tc["function"]["name"] += fn["name"]
            if fn.get("arguments"):
                tc["function"]["arguments"] += fn["arguments"]


def _merge_choice(api: str, c: dict[str, Any], ch: dict[str, Any]) -> bool:
    """Fold one streamed choice delta into ``c``; True when it finishes the choice."""
    if ch.get("prompt_token_ids") is not None and "prompt_token_ids" not in c:
        c["prompt_token_ids"] = ch["prompt_token_ids"]
    if isinstance(ch.get("token_ids"), list):
        c.setdefault("token_ids", []).extend(ch["token_ids"])
    lp = ch.get("logprobs")
    if isinstance(lp, dict):
        acc_lp = c.setdefault("logprobs", {})
        for key in ("content", "token_logprobs", "tokens", "top_logprobs", "text_offset"):
            if isinstance(lp.get(key), list):
                acc_lp.setdefault(key, []).extend(lp[key])
    finished = False
    if ch.get("finish_reason") is not None:
        c["finish_reason"] = ch["finish_reason"]
        finished = True
    if ch.get("stop_reason") is not None:
        c["stop_reason"] = ch["stop_reason"]
    if api != "openai_chat":
        if isinstance(ch.get("text"), str):
            c["text"] = c.get("text", "") + ch["text"]
        return finished
    msg = c.setdefault("message", {"role": "assistant", "content": ""})
    delta = ch.get("delta") or {}
    if isinstance(delta, dict):
        if delta.get("role"):
            msg["role"] = delta["role"]
        if isinstance(delta.get("content"), str):
            msg["content"] += delta["content"]
        for rk in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(rk), str):
                msg[rk] = msg.get(rk, "") + delta[rk]
        if delta.get("tool_calls"):
            _merge_tool_calls(msg.setdefault("tool_calls", []), delta["tool_calls"])
    return finished


def assemble_openai_stream(api: str, datas: list[Any]) -> tuple[Any, bool, int]:
    """Rebuild the non-streamed response shape from chat/completions chunks; the count
    of malformed chunks (left out) comes last."""
    final: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    finished = False
    bad = 0
    for d in datas:
        if d == "[DONE]":
            finished = True
            continue
        if not isinstance(d, dict):
            continue
        try:
            finished = _merge_chunk(api, final, choices, d) or finished
        except _MALFORMED:
            bad += 1
    final["object"] = "chat.completion" if api == "openai_chat" else "text_completion"
    final["choices"] = [choices[i] for i in sorted(choices)]
    return final, finished, bad


def _merge_chunk(api: str, final: dict[str, Any], choices: dict[int, dict[str, Any]], d: dict[str, Any]) -> bool:
    """Fold one chunk in; True when it finishes a choice. Checked before anything is
    changed, so a malformed chunk (it raises) leaves the response as it was."""
    picked = d.get("choices") or []
    if not isinstance(picked, list):
        raise TypeError("choices is not a list")
    parts = [(_index(ch.get("index", 0)), ch) for ch in picked if isinstance(ch, dict)]
    for _, ch in parts:
        _check_choice(ch)
    for k in ("id", "created", "model", "system_fingerprint"):
        if k in d and k not in final:
            final[k] = d[k]
    if d.get("usage") is not None:
        final["usage"] = d["usage"]
    if d.get("prompt_token_ids") is not None and "prompt_token_ids" not in final:
        final["prompt_token_ids"] = d["prompt_token_ids"]
    finished = False
    for i, ch in parts:
        c = choices.setdefault(i, {"index": i, "finish_reason": None})
        if _merge_choice(api, c, ch):
            finished = True
    return finished


def _check_choice(ch: dict[str, Any]) -> None:
    """Raise when a streamed choice has a field of a type :func:`_merge_choice` cannot fold."""
    delta = ch.get("delta") or {}
    if not isinstance(delta, dict):
        raise TypeError("delta is not an object")
    for key in ("content", "reasoning_content", "reasoning"):
        if delta.get(key) is not None and not isinstance(delta[key], str):
            raise TypeError(f"delta.{key} is not text")
    calls = delta.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise TypeError("delta.tool_calls is not a list")
        for tc in calls:
            if isinstance(tc, dict):
                _index(tc.get("index", 0))
                fn = tc.get("function")
                if isinstance(fn, dict) and any(
                    fn.get(k) is not None and not isinstance(fn[k], str) for k in ("name", "arguments")
                ):
                    raise TypeError("a tool call's function name or arguments is not text")
    if ch.get("text") is not None and not isinstance(ch["text"], str):
        raise TypeError("text is not text")


TOKEN_FIELDS = ("prompt_token_ids", "token_ids", "logprobs")


def assemble_anthropic_stream(events: list[tuple[str | None, Any]]) -> tuple[Any, bool, int]:
    """Rebuild a message from Anthropic's events; the count of malformed events (left out) comes last."""
    msg: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    partial_json: dict[int, str] = {}
    finished = False
    bad = 0
    for _name, d in events:
        if not isinstance(d, dict):
            continue
        t = d.get("type")
        try:
            if t == "message_start":
                if not isinstance(d.get("message"), dict):
                    raise TypeError("message_start without a message object")
                msg = dict(d["message"])
            elif t == "content_block_start":
                if not isinstance(d.get("content_block"), dict):
                    raise TypeError("content_block_start without a content_block object")
                blocks[_index(d.get("index", len(blocks)))] = dict(d["content_block"])
            elif t == "content_block_delta":
                _anthropic_delta(d, blocks, partial_json)
            elif t == "message_delta" and not isinstance(d.get("delta") or {}, dict):
                raise TypeError("message_delta's delta is not an object")
        except _MALFORMED:
            bad += 1
            continue
        if t == "message_delta":
            delta = d.get("delta") or {}
            if isinstance(delta, dict):
                msg.update(delta)
            # A server that reports tokens (the embedded one) puts the whole
            # completion's record on the final message_delta.
            for key in TOKEN_FIELDS:
                if key in d:
                    msg[key] = d[key]
            if isinstance(d.get("usage"), dict):
                usage = dict(msg.get("usage") or {})
                usage.update(d["usage"])
                msg["usage"] = usage
        elif t == "message_stop":
            finished = True
    for i, s in partial_json.items():
        parsed = json_or_none(s) if s else {}
        blocks[i]["input"] = parsed if parsed is not None else s
    msg["content"] = [blocks[i] for i in sorted(blocks)]
    return msg, finished, bad


_DELTA_FIELDS = {
    "text_delta": "text",
    "input_json_delta": "partial_json",
    "thinking_delta": "thinking",
    "signature_delta": "signature",
}


def _anthropic_delta(d: dict[str, Any], blocks: dict[int, dict[str, Any]], partial_json: dict[int, str]) -> None:
    """Fold one content_block_delta in; raises (changing nothing) when it is malformed."""
    delta = d.get("delta")
    if not isinstance(delta, dict):
        raise TypeError("content_block_delta without a delta object")
    i = _index(d.get("index", 0))
    key = _DELTA_FIELDS.get(str(delta.get("type")))
    piece = delta.get(key, "") if key is not None else ""
    if not isinstance(piece, str):
        raise TypeError(f"delta.{key} is not text")
    if key is not None and key != "partial_json" and not isinstance(blocks.get(i, {}).get(key, ""), str):
        raise TypeError(f"content block {i}'s {key} is not text")
    b = blocks.setdefault(i, {"type": "text", "text": ""})
    if key == "partial_json":
        partial_json[i] = partial_json.get(i, "") + piece
    elif key is not None:
        b[key] = b.get(key, "") + piece


def assemble_responses_stream(datas: list[Any]) -> tuple[Any, bool]:
    """The Responses API repeats the whole response in its lifecycle events:
    the last one is the final response, ``response.completed`` ends it."""
    last: Any = None
    finished = False
    for obj in datas:
        if isinstance(obj, dict) and isinstance(obj.get("response"), dict):
            last = obj["response"]
            if obj.get("type") in ("response.completed", "response.incomplete"):
                finished = True
    return last, finished
