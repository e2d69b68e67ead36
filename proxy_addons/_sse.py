"""Server-sent events: splitting a stream into events, and rebuilding the
response a non-streamed call would have returned (OpenAI chat and
completions, OpenAI Responses, Anthropic messages)."""

import json
from typing import Any


def json_or_none(s: str) -> Any:
    try:
        return json.loads(s)
    except ValueError:
        return None


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


def assemble_stream(api: str, text: str) -> tuple[Any, bool]:
    """The final response a non-streamed call would have returned, and whether
    the stream ended properly (a cut stream is a failed call)."""
    events, terminated = parse_sse(text)
    if api in ("openai_chat", "openai_completions"):
        datas = [e[1].strip() if e[1].strip() == "[DONE]" else json_or_none(e[1]) for e in events]
        final, finished = assemble_openai_stream(api, datas)
        return final, finished and terminated
    if api == "anthropic_messages":
        final, finished = assemble_anthropic_stream([(n, json_or_none(d)) for n, d in events])
        return final, finished and terminated
    if api == "openai_responses":
        last, finished = assemble_responses_stream([json_or_none(d) for _, d in events])
        return last, finished and terminated
    return None, terminated


def _merge_tool_calls(acc: list[dict[str, Any]], deltas: Any) -> None:
    if not isinstance(deltas, list):
        return
    for d in deltas:
        if not isinstance(d, dict):
            continue
        idx = d.get("index", len(acc))
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


def assemble_openai_stream(api: str, datas: list[Any]) -> tuple[Any, bool]:
    """Rebuild the non-streamed response shape from chat/completions chunks."""
    final: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    finished = False
    for d in datas:
        if d == "[DONE]":
            finished = True
            continue
        if not isinstance(d, dict):
            continue
        for k in ("id", "created", "model", "system_fingerprint"):
            if k in d and k not in final:
                final[k] = d[k]
        if d.get("usage") is not None:
            final["usage"] = d["usage"]
        if d.get("prompt_token_ids") is not None and "prompt_token_ids" not in final:
            final["prompt_token_ids"] = d["prompt_token_ids"]
        for ch in d.get("choices") or []:
            if not isinstance(ch, dict):
                continue
            i = int(ch.get("index", 0))
            c = choices.setdefault(i, {"index": i, "finish_reason": None})
            if _merge_choice(api, c, ch):
                finished = True
    final["object"] = "chat.completion" if api == "openai_chat" else "text_completion"
    final["choices"] = [choices[i] for i in sorted(choices)]
    return final, finished


TOKEN_FIELDS = ("prompt_token_ids", "token_ids", "logprobs")


def assemble_anthropic_stream(events: list[tuple[str | None, Any]]) -> tuple[Any, bool]:
    msg: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    partial_json: dict[int, str] = {}
    finished = False
    for _name, d in events:
        if not isinstance(d, dict):
            continue
        t = d.get("type")
        if t == "message_start" and isinstance(d.get("message"), dict):
            msg = dict(d["message"])
        elif t == "content_block_start" and isinstance(d.get("content_block"), dict):
            blocks[int(d.get("index", len(blocks)))] = dict(d["content_block"])
        elif t == "content_block_delta" and isinstance(d.get("delta"), dict):
            i = int(d.get("index", 0))
            b = blocks.setdefault(i, {"type": "text", "text": ""})
            delta = d["delta"]
            dt = delta.get("type")
            if dt == "text_delta":
                b["text"] = b.get("text", "") + delta.get("text", "")
            elif dt == "input_json_delta":
                partial_json[i] = partial_json.get(i, "") + delta.get("partial_json", "")
            elif dt == "thinking_delta":
                b["thinking"] = b.get("thinking", "") + delta.get("thinking", "")
            elif dt == "signature_delta":
                b["signature"] = b.get("signature", "") + delta.get("signature", "")
        elif t == "message_delta":
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
    return msg, finished


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
