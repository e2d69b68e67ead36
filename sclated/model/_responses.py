"""OpenAI Responses API ``/v1/responses`` (what Codex speaks).

Stateless: there is no response store, so ``previous_response_id`` is refused
and callers send the whole conversation in ``input`` (Codex does).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import replace
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
    now,
    open_stream,
    sse,
    text_of,
)
from ._engine import MAX_TOP_LOGPROBS, TokenStep
from ._grammar import text_format_grammar
from ._openai import active_tool_names, chat_logprob
from ._tools import ToolCall, ToolSpec

__all__ = ["handle_responses", "parse_responses_input"]

log = logging.getLogger("sclated.model")

_TEXT_PARTS = ("text", "input_text", "output_text", "refusal")


def parse_responses_input(f: Fields) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    instructions = f.opt_str("instructions")
    if instructions:
        messages.append(ChatMessage("system", instructions))
    raw = f.data.get("input")
    if raw is None:
        raise f.missing("input")
    if isinstance(raw, str):
        return [*messages, ChatMessage("user", raw)]
    if not isinstance(raw, list):
        raise f.bad("input", "a string or an array of items")
    for i, item in enumerate(raw):
        it = Fields(item, f"input[{i}]")
        kind = it.opt_str("type") or "message"
        if kind == "message":
            role = it.opt_str("role")
            if role is None:
                raise it.missing("role")
            if role == "developer":
                role = "system"
            if role not in ("system", "user", "assistant"):
                raise InvalidArgument(f"'{it.name('role')}' {role!r} is not a known role", field=it.name("role"))
            content = text_of(it.data.get("content"), it.name("content"), allowed=_TEXT_PARTS)
            messages.append(ChatMessage(role, content))
        elif kind == "function_call":
            name, call_id = it.opt_str("name"), it.opt_str("call_id")
            if not name:
                raise it.missing("name")
            if not call_id:
                raise it.missing("call_id")
            call = ToolCall(call_id, name, it.opt_str("arguments") or "{}")
            prev = messages[-1] if messages else None
            if prev is not None and prev.role == "assistant":
                # Parallel calls arrive as separate items; they were one turn.
                messages[-1] = ChatMessage("assistant", prev.content, (*prev.tool_calls, call))
            else:
                messages.append(ChatMessage("assistant", "", (call,)))
        elif kind == "function_call_output":
            call_id = it.opt_str("call_id")
            if not call_id:
                raise it.missing("call_id")
            output = text_of(it.data.get("output"), it.name("output"), allowed=_TEXT_PARTS)
            messages.append(ChatMessage("tool", output, tool_call_id=call_id))
        elif kind == "reasoning":
            continue  # this model has no reasoning channel to feed it back into
        else:
            raise InvalidArgument(f"'{it.name('type')}' {kind!r} is not supported", field=it.name("type"))
    return messages


def _parse_tools(f: Fields) -> tuple[list[ToolSpec], ToolMode, str | None]:
    tools: list[ToolSpec] = []
    for i, raw in enumerate(f.opt_list("tools") or []):
        tf = Fields(raw, f"tools[{i}]")
        kind = tf.opt_str("type")
        if kind != "function":
            # Hosted tools (web search, file search, ...) have no backend here;
            # dropping them keeps harnesses that always declare them working.
            log.debug("ignoring responses tool of type %r", kind)
            continue
        name = tf.opt_str("name")
        if not name:
            raise tf.missing("name")
        params = tf.opt_obj("parameters")
        tools.append(ToolSpec(name, tf.opt_str("description") or "", params.data if params else {}))
    choice = f.data.get("tool_choice")
    if choice in (None, "auto"):
        return tools, "auto", None
    if choice in ("none", "required"):
        return tools, choice, None
    if isinstance(choice, dict):
        name = Fields(choice, "tool_choice").opt_str("name")
        if name and name in {t.name for t in tools}:
            return tools, "required", name
    raise InvalidArgument("'tool_choice' must be 'none', 'auto', 'required' or name a tool", field="tool_choice")


def _logprobs(steps: Sequence[TokenStep]) -> list[dict[str, Any]]:
    return [chat_logprob(s) for s in steps]


async def handle_responses(ctx: ServerContext, request: web.Request, body: Any) -> web.StreamResponse:
    f = Fields(body)
    messages = parse_responses_input(f)
    if f.has("previous_response_id"):
        raise InvalidArgument(
            "'previous_response_id' is not supported: responses are not stored; send the full conversation in 'input'",
            field="previous_response_id",
        )
    tools, mode, forced = _parse_tools(f)
    include = f.opt_list("include") or []
    top = f.opt_int("top_logprobs", minimum=0, maximum=MAX_TOP_LOGPROBS)
    want_logprobs = top is not None or "message.output_text.logprobs" in include
    want_ids = f.opt_bool("return_token_ids") or want_logprobs
    params = f.sampling(max_tokens=f.opt_int("max_output_tokens", minimum=1), top_logprobs=top or 0)
    text_options = f.opt_obj("text")
    text_format = text_options.data.get("format") if text_options is not None else None
    params = replace(params, grammar=text_format_grammar(text_format))
    stream = f.opt_bool("stream")
    model = ctx.model_of(f)
    prompt = await ctx.chat_prompt(messages, tools, mode, forced)
    prompt_ids = prompt.ids
    ctx.engine.check_prompt(prompt_ids, "input")
    gen = Generation(
        ctx.engine,
        prompt_ids,
        params,
        active_tool_names(tools, mode, forced),
        on_finish=ctx.keep_exchange(prompt),
    )
    rid, created, msg_id = new_id("resp_"), now(), new_id("msg_")
    request[USAGE] = (len(prompt_ids), 0)

    def envelope(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        incomplete = status == "incomplete"
        obj: dict[str, Any] = {
            "id": rid,
            "object": "response",
            "created_at": created,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": f.opt_str("instructions"),
            "max_output_tokens": params.max_tokens,
            "model": model,
            "output": output,
            "parallel_tool_calls": f.opt_bool("parallel_tool_calls", True),
            "previous_response_id": None,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "tool_choice": f.data.get("tool_choice") or "auto",
            "tools": f.data.get("tools") or [],
            "text": {"format": text_format if text_format is not None else {"type": "text"}},
            "usage": None,
        }
        if want_ids:
            obj["prompt_token_ids"] = prompt_ids
        if status in ("completed", "incomplete"):
            p, c = len(prompt_ids), len(gen.steps)
            obj["usage"] = {
                "input_tokens": p,
                "input_tokens_details": {"cached_tokens": gen.cached_tokens},
                "output_tokens": c,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": p + c,
            }
            if want_ids:
                obj["token_ids"] = gen.token_ids
        return obj

    def text_part(text: str, steps: Sequence[TokenStep]) -> dict[str, Any]:
        part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
        if want_logprobs:
            part["logprobs"] = _logprobs(steps)
        return part

    def message_item(status: str, text: str | None) -> dict[str, Any]:
        content = [] if text is None else [text_part(text, gen.steps)]
        return {"type": "message", "id": msg_id, "status": status, "role": "assistant", "content": content}

    def call_item(call: ToolCall, item_id: str, status: str, args: str) -> dict[str, Any]:
        return {
            "type": "function_call",
            "id": item_id,
            "call_id": call.id,
            "name": call.name,
            "arguments": args,
            "status": status,
        }

    def final_status() -> str:
        return "incomplete" if gen.reason == "length" and not gen.calls else "completed"

    if not stream:
        await gen.complete()
        note_usage(request, gen)
        output: list[dict[str, Any]] = []
        if gen.content or not gen.calls:
            output.append(message_item("completed", gen.content))
        output += [call_item(c, new_id("fc_"), "completed", c.arguments) for c in gen.calls]
        return web.json_response(envelope(final_status(), output))

    response = await open_stream(request)
    seq = 0

    async def send(kind: str, payload: dict[str, Any]) -> None:
        nonlocal seq
        await response.write(sse({"type": kind, "sequence_number": seq, **payload}, kind))
        seq += 1

    await send("response.created", {"response": envelope("in_progress", [])})
    await send("response.in_progress", {"response": envelope("in_progress", [])})
    output = []
    message_open = False
    pending: list[TokenStep] = []

    async def open_message() -> None:
        nonlocal message_open
        message_open = True
        output.append(message_item("in_progress", None))
        await send("response.output_item.added", {"output_index": 0, "item": message_item("in_progress", None)})
        await send(
            "response.content_part.added",
            {"item_id": msg_id, "output_index": 0, "content_index": 0, "part": text_part("", ())},
        )

    async def delta(text: str) -> None:
        payload: dict[str, Any] = {"item_id": msg_id, "output_index": 0, "content_index": 0, "delta": text}
        if want_logprobs:
            payload["logprobs"] = _logprobs(pending)
        if want_ids:
            payload["token_ids"] = [s.token_id for s in pending]
        pending.clear()
        await send("response.output_text.delta", payload)

    try:
        async with contextlib.aclosing(gen.run()) as steps:
            async for step, text in steps:
                if step is not None:
                    pending.append(step)
                if text:
                    if not message_open:
                        await open_message()
                    await delta(text)
        if not message_open and not gen.calls:
            await open_message()  # an empty answer is still a message
        if pending and message_open:
            # Tokens that released no text (an end-of-turn token, held-back
            # tool-call text) still belong to the message's token record.
            await delta("")
        if message_open:
            await send(
                "response.output_text.done",
                {"item_id": msg_id, "output_index": 0, "content_index": 0, "text": gen.content},
            )
            await send(
                "response.content_part.done",
                {"item_id": msg_id, "output_index": 0, "content_index": 0, "part": text_part(gen.content, gen.steps)},
            )
            output[0] = message_item("completed", gen.content)
            await send("response.output_item.done", {"output_index": 0, "item": output[0]})
        for call in gen.calls:
            index, item_id = len(output), new_id("fc_")
            await send(
                "response.output_item.added",
                {"output_index": index, "item": call_item(call, item_id, "in_progress", "")},
            )
            await send(
                "response.function_call_arguments.delta",
                {"item_id": item_id, "output_index": index, "delta": call.arguments},
            )
            await send(
                "response.function_call_arguments.done",
                {"item_id": item_id, "output_index": index, "arguments": call.arguments},
            )
            output.append(call_item(call, item_id, "completed", call.arguments))
            await send("response.output_item.done", {"output_index": index, "item": output[-1]})
        status = final_status()
        kind = "response.completed" if status == "completed" else "response.incomplete"
        await send(kind, {"response": envelope(status, output)})
    except SclateError as exc:
        failed = envelope("failed", output)
        failed["error"] = {"code": "server_error", "message": exc.message}
        await send("response.failed", {"response": failed})
    finally:
        note_usage(request, gen)
    return response
