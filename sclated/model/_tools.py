"""Tool calls for a model that has no native tool-calling format.

Tools are described to the model in the system prompt (Hermes style, which
SmolLM2's instruct data resembles), and the completion is parsed back: a tool
call is a JSON object ``{"name": ..., "arguments": {...}}`` (or a list of them),
either inside ``<tool_call>...</tool_call>`` or bare in the text. Anything that
does not parse into a call to a declared tool stays plain text: a small model
produces near-misses often, and a wrong tool call is worse than text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ParsedOutput",
    "ToolCall",
    "ToolSpec",
    "parse_tool_calls",
    "render_tool_prompt",
    "tool_call_start",
]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

_TAGGED = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE_OPEN = re.compile(r"```[a-zA-Z]*\s*\Z")
_FENCE_CLOSE = re.compile(r"\A\s*```")


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)

    def as_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class ToolCall:
    """A call the model made. ``arguments`` is a JSON object serialised as text."""

    id: str
    name: str
    arguments: str

    def arguments_object(self) -> dict[str, Any]:
        try:
            value = json.loads(self.arguments) if self.arguments else {}
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class ParsedOutput:
    content: str | None
    calls: tuple[tuple[str, str], ...]  # (name, arguments JSON)


def render_tool_prompt(tools: Sequence[ToolSpec], required: str | None = None) -> str:
    """The system-prompt text that teaches the model the tools and the call format.

    ``required`` is ``"*"`` when some tool must be called, or a tool's name.
    """
    lines = [
        "You may call one or more functions to assist with the user query.",
        "",
        "You are provided with function signatures within <tools></tools> XML tags:",
        "<tools>",
        *(json.dumps(t.as_openai(), ensure_ascii=False) for t in tools),
        "</tools>",
        "",
        "For each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:",
        "<tool_call>",
        '{"name": <function-name>, "arguments": <args-json-object>}',
        "</tool_call>",
    ]
    if required == "*":
        lines += ["", "You must call at least one function."]
    elif required:
        lines += ["", f"You must call the function {required}."]
    return "\n".join(lines)


def render_tool_call(name: str, arguments: str) -> str:
    """How an earlier assistant tool call is shown to the model in the transcript."""
    try:
        args: Any = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        args = arguments
    body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def _as_call(obj: Any, names: Collection[str]) -> tuple[str, str] | None:
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    if "arguments" in obj:
        args = obj["arguments"]
    elif "parameters" in obj:
        args = obj["parameters"]
    else:
        return None
    if isinstance(args, str):
        # Some models emit the arguments already serialised (OpenAI's own wire form).
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    if names and name not in names:
        return None
    return name, json.dumps(args, ensure_ascii=False)


def _as_calls(obj: Any, names: Collection[str]) -> list[tuple[str, str]] | None:
    items = obj if isinstance(obj, list) else [obj]
    if not items:
        return None
    calls = [_as_call(item, names) for item in items]
    if any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _strip_fence(body: str) -> str:
    body = body.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
    if body.rstrip().endswith("```"):
        body = body.rstrip()[:-3]
    return body.strip()


def _clean(text: str) -> str | None:
    text = text.strip()
    return text or None


def parse_tool_calls(text: str, tool_names: Collection[str] = ()) -> ParsedOutput:
    """Split a completion into plain text and tool calls.

    ``tool_names`` restricts calls to declared tools (empty: any name).
    """
    tagged = list(_TAGGED.finditer(text))
    if tagged:
        calls: list[tuple[str, str]] = []
        for match in tagged:
            try:
                obj = json.loads(_strip_fence(match.group(1)))
            except json.JSONDecodeError:
                return ParsedOutput(_clean(text), ())
            found = _as_calls(obj, tool_names)
            if found is None:
                return ParsedOutput(_clean(text), ())
            calls.extend(found)
        rest = _TAGGED.sub("", text)
        return ParsedOutput(_clean(rest), tuple(calls))

    decoder = json.JSONDecoder()
    calls = []
    spans: list[tuple[int, int]] = []
    pos = 0
    while pos < len(text):
        starts = [i for i in (text.find("{", pos), text.find("[", pos)) if i != -1]
        if not starts:
            break
        start = min(starts)
        try:
            obj, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            pos = start + 1
            continue
        found = _as_calls(obj, tool_names)
        if found is None:
            pos = end
            continue
        calls.extend(found)
        # Swallow a markdown fence wrapped around the JSON so it does not
        # survive as stray text.
        before = _FENCE_OPEN.search(text, 0, start)
        after = _FENCE_CLOSE.match(text[end:])
        if before and after:
            spans.append((before.start(), end + after.end()))
        else:
            spans.append((start, end))
        pos = end
    if not calls:
        return ParsedOutput(_clean(text), ())
    kept: list[str] = []
    last = 0
    for a, b in spans:
        kept.append(text[last:a])
        last = b
    kept.append(text[last:])
    return ParsedOutput(_clean("".join(kept)), tuple(calls))


_TRIGGERS = (TOOL_CALL_OPEN, "{", "[", "```")


def tool_call_start(text: str) -> int | None:
    """Where a tool call may begin in partial output, for streaming.

    Text before this index can be sent as content right away; from here on it
    must wait for the end of generation to be parsed. Also catches a trigger cut
    in half at the end of the text (``"<tool_"``).
    """
    best: int | None = None
    for trigger in _TRIGGERS:
        idx = text.find(trigger)
        if idx != -1 and (best is None or idx < best):
            best = idx
    for trigger in _TRIGGERS:
        for n in range(min(len(trigger) - 1, len(text)), 0, -1):
            if text.endswith(trigger[:n]):
                idx = len(text) - n
                if best is None or idx < best:
                    best = idx
                break
    return best
