"""Chat transcripts in one internal shape, rendered with the model's own template."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from sclated.errors import InvalidArgument

from ._tools import ToolCall, ToolSpec, render_tool_call, render_tool_prompt

__all__ = ["ChatMessage", "ChatRenderer", "ToolMode"]

ToolMode = Literal["auto", "none", "required"]

# Used only when a GGUF carries no template of its own.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


_BODY = "\ue000sclate:assistant-body\ue001"
"""Stands for an assistant message's body in :meth:`ChatRenderer.continuation` (private-use
characters around it: no real message carries it)."""


@dataclass(frozen=True)
class ChatMessage:
    """One transcript entry as all three APIs can express it.

    ``role`` is system, user, assistant or tool. A tool result carries the id
    of the call it answers.
    """

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


class ChatRenderer:
    """Renders a transcript to the prompt text the model was trained on.

    Templates that know about tools (they mention ``tools``) get them natively;
    for the others (SmolLM2's among them) tools go into the system prompt,
    earlier tool calls become ``<tool_call>`` text and tool results become user
    turns wrapped in ``<tool_response>``, a format such models have seen.
    """

    def __init__(self, template: str | None, bos_token: str = "", eos_token: str = ""):
        source = template or CHATML_TEMPLATE
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        # Jinja's own tojson HTML-escapes; Hugging Face templates expect plain JSON.
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateError as exc:
            raise InvalidArgument(f"the model's chat template does not compile: {exc}") from exc
        self.native_tools = "tools" in source
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        tool_mode: ToolMode = "auto",
        forced_tool: str | None = None,
    ) -> str:
        """The prompt text: the transcript, then the generation prompt of an assistant turn."""
        return self._render(messages, tools, tool_mode, forced_tool)

    def continuation(
        self,
        messages: Sequence[ChatMessage],
        reply: int,
        tools: Sequence[ToolSpec] = (),
        tool_mode: ToolMode = "auto",
        forced_tool: str | None = None,
    ) -> str | None:
        """The text the template puts after the body of the assistant message ``messages[reply]``
        up to the end of :meth:`render` ``(messages)``: that turn's closing (e.g.
        ``<|im_end|>\n``), the later messages, and the generation prompt.

        The body itself (content and tool calls) is left out, since a caller that
        sampled it has its tokens. None when the template is not prefix-stable
        there, that is unless :meth:`render` ``(messages)`` is exactly
        :meth:`render` ``(messages[:reply])`` (the prompt the reply was sampled
        from), then the reply's body as the template writes it when it is the
        last message, then the text returned. A template that rewrites earlier
        turns (drops an earlier reply's reasoning, counts the messages in its
        system turn) gets None.
        """
        if not 0 < reply < len(messages) or messages[reply].role != "assistant":
            return None
        args = (tools, tool_mode, forced_tool)
        try:
            head = self._render(messages[:reply], *args)
            whole = self._render(messages, *args, blank=reply)
            if whole.count(_BODY) != 1 or not whole.startswith(head + _BODY):
                return None
            rest = whole[len(head) + len(_BODY) :]
            if reply == len(messages) - 1:
                return rest
            # The reply's body where it was the last message, and where it is not.
            last = self._render(messages[: reply + 1], *args, blank=reply)
            if last.count(_BODY) != 1 or not last.startswith(head + _BODY):
                return None
            tail = last[len(head) + len(_BODY) :]
            written = self._render(messages[: reply + 1], *args)
            if not (written.startswith(head) and written.endswith(tail)) or len(written) < len(head) + len(tail):
                return None
            body = written[len(head) : len(written) - len(tail)]
            if self._render(messages, *args) != head + body + rest:
                return None
        except InvalidArgument:
            return None  # the template refuses a part; the whole render will say why, if it does
        return rest

    def _render(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        tool_mode: ToolMode,
        forced_tool: str | None,
        blank: int | None = None,
    ) -> str:
        """``blank``: the index of a message whose body (content and tool calls) is
        rendered as the marker ``_BODY`` instead."""
        if not messages:
            raise InvalidArgument("at least one message is required", field="messages")
        active = list(tools) if tool_mode != "none" else []
        if self.native_tools:
            rendered = [self._native(m) for m in messages]
            if blank is not None:
                body = {k: v for k, v in rendered[blank].items() if k != "tool_calls"}
                rendered[blank] = {**body, "content": _BODY}
            extra: dict[str, Any] = {"tools": [t.as_openai() for t in active] or None}
        else:
            rendered = [self._flat(m) for m in messages]
            if blank is not None:
                rendered[blank] = {**rendered[blank], "content": _BODY}
            extra = {}
            if active:
                required = forced_tool or ("*" if tool_mode == "required" else None)
                prompt = render_tool_prompt(active, required)
                if rendered[0]["role"] == "system":
                    first = rendered[0]
                    rendered[0] = {"role": "system", "content": f"{first['content']}\n\n{prompt}"}
                else:
                    rendered.insert(0, {"role": "system", "content": prompt})
        try:
            return self._template.render(
                messages=rendered,
                add_generation_prompt=True,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **extra,
            )
        except jinja2.TemplateError as exc:
            raise InvalidArgument(f"the chat template rejected the messages: {exc}", field="messages") from exc

    @staticmethod
    def _flat(message: ChatMessage) -> dict[str, Any]:
        if message.role == "tool":
            return {
                "role": "user",
                "content": f"<tool_response>\n{message.content}\n</tool_response>",
            }
        content = message.content
        if message.tool_calls:
            calls = "\n".join(render_tool_call(c.name, c.arguments) for c in message.tool_calls)
            content = f"{content}\n{calls}" if content else calls
        return {"role": message.role, "content": content}

    @staticmethod
    def _native(message: ChatMessage) -> dict[str, Any]:
        out: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_object()},
                }
                for c in message.tool_calls
            ]
        if message.tool_call_id is not None:
            out["tool_call_id"] = message.tool_call_id
        if message.name is not None:
            out["name"] = message.name
        return out
