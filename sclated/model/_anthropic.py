"""Anthropic Messages API ``/v1/messages`` (what Claude Code speaks)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from aiohttp import web

from sclated.errors import InvalidArgument, SclateError

from ._chat import ChatMessage, ToolMode
from ._common import (
    USAGE,
    Fields,
    Generation,
    ServerContext,
    new_id,
    note_usage,
    open_stream,
    sse,
    text_of,
)
from ._engine import MAX_TOP_LOGPROBS, PROMPT_TOO_LONG, TokenStep
from ._openai import active_tool_names, chat_logprob
from ._tools import ToolCall, ToolSpec

__all__ = ["anthropic_error_body", "handle_count_tokens", "handle_messages"]


def anthropic_error_body(exc: SclateError, status: int) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    if status == 503:
        kind = "overloaded_error"
    message = exc.message
    if exc.reason == PROMPT_TOO_LONG:
        # Anthropic's own wording, which Claude Code matches to compact its history.
        message = f"prompt is too long: {message}"
    return {"type": "error", "error": {"type": kind, "message": message}}


def _system_text(value: Any) -> str:
    if value is None:
        return ""
    return text_of(value, "system")


def _tool_result_text(value: Any, path: str) -> str:
    return text_of(value, path, allowed=("text",))


def parse_anthropic_messages(f: Fields) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    system = _system_text(f.data.get("system"))
    if system:
        out.append(ChatMessage("system", system))
    for i, raw in enumerate(f.req_list("messages")):
        m = Fields(raw, f"messages[{i}]")
        role = m.opt_str("role")
        if role is None:
            raise m.missing("role")
        if role not in ("user", "assistant", "system"):
            raise InvalidArgument(f"'{m.name('role')}' must be 'user', 'assistant' or 'system'", field=m.name("role"))
        content = m.data.get("content")
        if role == "system":
            # A system message inside the conversation (Claude Code puts its environment
            # and "Today's date is ..." there, after the first user message): kept where
            # it was sent, so the prompt is the conversation as the harness wrote it.
            out.append(ChatMessage("system", text_of(content, m.name("content"))))
            continue
        if isinstance(content, str):
            out.append(ChatMessage(role, content))
            continue
        if not isinstance(content, list):
            raise m.bad("content", "a string or an array of content blocks")
        texts: list[str] = []
        calls: list[ToolCall] = []
        for j, block in enumerate(content):
            b = Fields(block, f"{m.name('content')}[{j}]")
            kind = b.opt_str("type")
            if kind == "text":
                text = b.opt_str("text")
                if text is None:
                    raise b.missing("text")
                texts.append(text)
            elif kind == "tool_use":
                name, tid = b.opt_str("name"), b.opt_str("id")
                if not name:
                    raise b.missing("name")
                if not tid:
                    raise b.missing("id")
                args = b.data.get("input") or {}
                calls.append(ToolCall(tid, name, json.dumps(args, ensure_ascii=False)))
            elif kind == "tool_result":
                tid = b.opt_str("tool_use_id")
                if not tid:
                    raise b.missing("tool_use_id")
                if texts:
                    out.append(ChatMessage(role, "".join(texts)))
                    texts = []
                result = _tool_result_text(b.data.get("content"), b.name("content"))
                if b.opt_bool("is_error"):
                    result = f"Error: {result}"
                out.append(ChatMessage("tool", result, tool_call_id=tid))
            elif kind in ("thinking", "redacted_thinking"):
                continue  # no reasoning channel in this model to feed it back into
            else:
                raise InvalidArgument(f"'{b.name('type')}' {kind!r} is not supported", field=b.name("type"))
        if texts or calls or not content:
            out.append(ChatMessage(role, "".join(texts), tuple(calls)))
    return out


def _parse_tools(f: Fields) -> tuple[list[ToolSpec], ToolMode, str | None]:
    tools: list[ToolSpec] = []
    for i, raw in enumerate(f.opt_list("tools") or []):
        tf = Fields(raw, f"tools[{i}]")
        name = tf.opt_str("name")
        if not name:
            raise tf.missing("name")
        schema = tf.opt_obj("input_schema")
        if schema is None and tf.opt_str("type") in (None, "custom"):
            raise tf.missing("input_schema")
        tools.append(ToolSpec(name, tf.opt_str("description") or "", schema.data if schema else {}))
    choice = f.opt_obj("tool_choice")
    if choice is None:
        return tools, "auto", None
    kind = choice.opt_str("type")
    if kind == "auto":
        return tools, "auto", None
    if kind == "none":
        return tools, "none", None
    if kind == "any":
        return tools, "required", None
    if kind == "tool":
        name = choice.opt_str("name")
        if not name or name not in {t.name for t in tools}:
            raise InvalidArgument("'tool_choice.name' must name one of 'tools'", field="tool_choice.name")
        return tools, "required", name
    raise InvalidArgument("'tool_choice.type' must be auto, any, tool or none", field="tool_choice.type")


def _want_tokens(f: Fields) -> tuple[bool, bool, int]:
    top = f.opt_int("top_logprobs", minimum=0, maximum=MAX_TOP_LOGPROBS)
    logprobs = f.opt_bool("logprobs") or top is not None
    return f.opt_bool("return_token_ids") or logprobs, logprobs, top or 0


async def handle_count_tokens(ctx: ServerContext, request: web.Request, body: Any) -> web.StreamResponse:
    f = Fields(body)
    tools, mode, forced = _parse_tools(f)
    # The count of the prompt a messages call would get (continuing a kept exchange too).
    prompt = await ctx.chat_prompt(parse_anthropic_messages(f), tools, mode, forced)
    return web.json_response({"input_tokens": len(prompt.ids)})


async def handle_messages(ctx: ServerContext, request: web.Request, body: Any) -> web.StreamResponse:
    f = Fields(body)
    messages = parse_anthropic_messages(f)
    max_tokens = f.opt_int("max_tokens", minimum=1)
    if max_tokens is None:
        raise f.missing("max_tokens")
    tools, mode, forced = _parse_tools(f)
    want_ids, want_logprobs, top = _want_tokens(f)
    params = f.sampling(max_tokens=max_tokens, stop_key="stop_sequences", top_logprobs=top)
    stream = f.opt_bool("stream")
    model = ctx.model_of(f)
    prompt = await ctx.chat_prompt(messages, tools, mode, forced)
    prompt_ids = prompt.ids
    ctx.engine.check_prompt(prompt_ids, "messages")
    gen = Generation(
        ctx.engine,
        prompt_ids,
        params,
        active_tool_names(tools, mode, forced),
        call_id_prefix="toolu_",
        on_finish=ctx.keep_exchange(prompt),
    )
    mid = new_id("msg_")
    request[USAGE] = (len(prompt_ids), 0)

    def stop_reason() -> str:
        if gen.calls:
            return "tool_use"
        if gen.reason == "length":
            return "max_tokens"
        if gen.finish is not None and gen.finish.stop_sequence is not None:
            return "stop_sequence"
        return "end_turn"

    def stop_sequence() -> str | None:
        return gen.finish.stop_sequence if gen.finish is not None and not gen.calls else None

    def usage(output_tokens: int) -> dict[str, int]:
        return {
            "input_tokens": len(prompt_ids),
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }

    def token_extras(steps: list[TokenStep], *, prompt: bool) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if want_ids:
            if prompt:
                extra["prompt_token_ids"] = prompt_ids
            extra["token_ids"] = [s.token_id for s in steps]
        if want_logprobs:
            extra["logprobs"] = {"content": [chat_logprob(s) for s in steps]}
        return extra

    def tool_block(call: ToolCall) -> dict[str, Any]:
        return {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments_object()}

    if not stream:
        await gen.complete()
        note_usage(request, gen)
        content: list[dict[str, Any]] = []
        if gen.content:
            content.append({"type": "text", "text": gen.content})
        content += [tool_block(c) for c in gen.calls]
        return web.json_response(
            {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop_reason(),
                "stop_sequence": stop_sequence(),
                "usage": usage(len(gen.steps)),
                **token_extras(gen.steps, prompt=True),
            }
        )

    response = await open_stream(request)

    async def send(kind: str, payload: dict[str, Any]) -> None:
        await response.write(sse({"type": kind, **payload}, kind))

    start_message: dict[str, Any] = {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage(0),
    }
    if want_ids:
        start_message["prompt_token_ids"] = prompt_ids
    await send("message_start", {"message": start_message})
    index = 0
    text_open = False
    pending: list[TokenStep] = []

    async def text_delta(text: str) -> None:
        payload: dict[str, Any] = {"index": index, "delta": {"type": "text_delta", "text": text}}
        payload.update(token_extras(pending, prompt=False))
        pending.clear()
        await send("content_block_delta", payload)

    try:
        await send("ping", {})
        async with contextlib.aclosing(gen.run()) as steps:
            async for step, text in steps:
                if step is not None:
                    pending.append(step)
                if text:
                    if not text_open:
                        text_open = True
                        await send(
                            "content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}
                        )
                    await text_delta(text)
        if text_open:
            await send("content_block_stop", {"index": index})
            index += 1
        for call in gen.calls:
            block = tool_block(call)
            await send("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
            await send(
                "content_block_delta",
                {
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
                },
            )
            await send("content_block_stop", {"index": index})
            index += 1
        final: dict[str, Any] = {
            "delta": {"stop_reason": stop_reason(), "stop_sequence": stop_sequence()},
            "usage": {"output_tokens": len(gen.steps)},
        }
        # The whole completion's token record rides on message_delta, so a
        # capture never has to stitch it back together from deltas.
        final.update(token_extras(gen.steps, prompt=True))
        await send("message_delta", final)
        await send("message_stop", {})
    except SclateError as exc:
        await send("error", anthropic_error_body(exc, 500))
    finally:
        note_usage(request, gen)
    return response
