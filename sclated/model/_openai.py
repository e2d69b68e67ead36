"""OpenAI ``/v1/chat/completions`` and ``/v1/completions``, with vLLM's token fields."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
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
from ._engine import MAX_TOP_LOGPROBS, PROMPT_TOO_LONG, SamplingParams, TokenStep
from ._grammar import response_format_grammar
from ._tools import ToolCall, ToolSpec

__all__ = [
    "chat_logprob",
    "error_body",
    "handle_chat_completions",
    "handle_completions",
    "parse_chat_messages",
    "parse_openai_tools",
]

_TEXT_PARTS = ("text", "input_text", "output_text")


def error_body(exc: SclateError, status: int) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 404:
        kind = "not_found_error"
    # OpenAI's own code for a prompt beyond the context, which clients (and
    # harnesses that compact their history) recognise.
    code = "context_length_exceeded" if exc.reason == PROMPT_TOO_LONG else exc.reason
    return {"error": {"message": exc.message, "type": kind, "param": exc.field, "code": code}}


def parse_chat_messages(value: list[Any], path: str = "messages") -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    for i, raw in enumerate(value):
        f = Fields(raw, f"{path}[{i}]")
        role = f.opt_str("role")
        if role is None:
            raise f.missing("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool", "function"):
            raise InvalidArgument(f"'{f.name('role')}' {role!r} is not a known role", field=f.name("role"))
        content = text_of(f.data.get("content"), f.name("content"), allowed=_TEXT_PARTS)
        calls: list[ToolCall] = []
        for j, call in enumerate(f.opt_list("tool_calls") or []):
            cf = Fields(call, f"{f.name('tool_calls')}[{j}]")
            fn = cf.opt_obj("function")
            if fn is None:
                raise cf.missing("function")
            name = fn.opt_str("name")
            if name is None:
                raise fn.missing("name")
            args = fn.data.get("arguments")
            if isinstance(args, dict):
                args = json.dumps(args)
            elif args is not None and not isinstance(args, str):
                raise fn.bad("arguments", "a JSON string")
            calls.append(ToolCall(cf.opt_str("id") or new_id("call_"), name, args or "{}"))
        if role == "function":  # the deprecated single-function form
            role = "tool"
        messages.append(
            ChatMessage(
                role=role,
                content=content,
                tool_calls=tuple(calls),
                tool_call_id=f.opt_str("tool_call_id"),
                name=f.opt_str("name"),
            )
        )
    return messages


def parse_openai_tools(f: Fields) -> tuple[list[ToolSpec], ToolMode, str | None]:
    tools: list[ToolSpec] = []
    for i, raw in enumerate(f.opt_list("tools") or []):
        tf = Fields(raw, f"tools[{i}]")
        kind = tf.opt_str("type") or "function"
        if kind != "function":
            raise InvalidArgument(f"'{tf.name('type')}' {kind!r} is not supported", field=tf.name("type"))
        fn = tf.opt_obj("function")
        if fn is None:
            raise tf.missing("function")
        name = fn.opt_str("name")
        if not name:
            raise fn.missing("name")
        params = fn.opt_obj("parameters")
        tools.append(ToolSpec(name, fn.opt_str("description") or "", params.data if params else {}))
    choice = f.data.get("tool_choice")
    mode: ToolMode = "auto"
    forced: str | None = None
    if choice in ("auto", None):
        mode = "auto"
    elif choice == "none":
        mode = "none"
    elif choice == "required":
        mode = "required"
    elif isinstance(choice, dict):
        cf = Fields(choice, "tool_choice")
        fn = cf.opt_obj("function")
        name = fn.opt_str("name") if fn else cf.opt_str("name")
        if not name:
            raise InvalidArgument("'tool_choice.function.name' is required", field="tool_choice.function.name")
        mode, forced = "required", name
    else:
        raise InvalidArgument("'tool_choice' must be 'none', 'auto', 'required' or an object", field="tool_choice")
    if forced is not None and forced not in {t.name for t in tools}:
        raise InvalidArgument(f"'tool_choice' names {forced!r}, which is not in 'tools'", field="tool_choice")
    return tools, mode, forced


def active_tool_names(tools: Sequence[ToolSpec], mode: ToolMode, forced: str | None) -> list[str] | None:
    """Names a parsed call may use; None turns parsing off."""
    if not tools or mode == "none":
        return None
    return [forced] if forced else [t.name for t in tools]


def _bytes_text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def chat_logprob(step: TokenStep) -> dict[str, Any]:
    return {
        "token": _bytes_text(step.piece),
        "logprob": step.logprob,
        "bytes": list(step.piece),
        "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes)} for t in step.top_logprobs],
    }


@dataclass(frozen=True)
class TokenOptions:
    """Which token-level data the caller asked for."""

    ids: bool
    logprobs: bool
    top: int

    @classmethod
    def of_chat(cls, f: Fields) -> TokenOptions:
        logprobs = f.opt_bool("logprobs")
        top = f.opt_int("top_logprobs", minimum=0, maximum=MAX_TOP_LOGPROBS)
        if top is not None and not logprobs:
            # OpenAI requires logprobs with top_logprobs; vLLM-style callers
            # sending only top_logprobs clearly want them, so accept it.
            logprobs = True
        return cls(f.opt_bool("return_token_ids") or logprobs, logprobs, top or 0)


def _usage(gen: Generation) -> dict[str, Any]:
    p, c = len(gen.prompt_ids), len(gen.steps)
    # OpenAI's own field for prompt caching: the tokens reused from the KV cache.
    return {
        "prompt_tokens": p,
        "completion_tokens": c,
        "total_tokens": p + c,
        "prompt_tokens_details": {"cached_tokens": gen.cached_tokens},
    }


def _max_tokens(f: Fields, *keys: str) -> int | None:
    for key in keys:
        value = f.opt_int(key, minimum=1)
        if value is not None:
            return value
    return None


def _constrained(f: Fields, params: SamplingParams) -> SamplingParams:
    """``params`` held to the request's ``response_format`` (vLLM takes it on completions too)."""
    return replace(params, grammar=response_format_grammar(f.data.get("response_format")))


def _check_n(f: Fields) -> None:
    n = f.opt_int("n", minimum=1)
    if n is not None and n != 1:
        raise InvalidArgument("only 'n' = 1 is supported", field="n")


async def handle_chat_completions(ctx: ServerContext, request: web.Request, body: Any) -> web.StreamResponse:
    f = Fields(body)
    messages = parse_chat_messages(f.req_list("messages"))
    _check_n(f)
    tools, mode, forced = parse_openai_tools(f)
    opts = TokenOptions.of_chat(f)
    params = f.sampling(max_tokens=_max_tokens(f, "max_completion_tokens", "max_tokens"), top_logprobs=opts.top)
    params = _constrained(f, params)
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
        on_finish=ctx.keep_exchange(prompt),
    )
    rid, created = new_id("chatcmpl-"), now()
    request[USAGE] = (len(prompt_ids), 0)

    def finish_reason() -> str:
        return "tool_calls" if gen.calls else gen.reason

    def tool_calls_json() -> list[dict[str, Any]]:
        return [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in gen.calls
        ]

    if not stream:
        await gen.complete()
        note_usage(request, gen)
        message: dict[str, Any] = {"role": "assistant", "content": gen.content or None}
        if gen.calls:
            message["tool_calls"] = tool_calls_json()
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": {"content": [chat_logprob(s) for s in gen.steps]} if opts.logprobs else None,
            "finish_reason": finish_reason(),
        }
        if opts.ids:
            choice["token_ids"] = gen.token_ids
        out: dict[str, Any] = {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": _usage(gen),
        }
        if opts.ids:
            out["prompt_token_ids"] = prompt_ids
        return web.json_response(out)

    def chunk(delta: dict[str, Any], step: TokenStep | None = None, reason: str | None = None) -> dict[str, Any]:
        c: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        if step is not None and opts.logprobs:
            c["logprobs"] = {"content": [chat_logprob(step)]}
        if opts.ids:
            c["token_ids"] = [step.token_id] if step is not None else []
        return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [c]}

    response = await open_stream(request)
    first = chunk({"role": "assistant", "content": ""})
    if opts.ids:
        first["prompt_token_ids"] = prompt_ids
    await response.write(sse(first))
    try:
        async with contextlib.aclosing(gen.run()) as steps:
            async for step, text in steps:
                if step is not None:
                    await response.write(sse(chunk({"content": text} if text else {}, step)))
                    continue
                if text:
                    await response.write(sse(chunk({"content": text})))
                if gen.calls:
                    deltas = [{"index": i, **call} for i, call in enumerate(tool_calls_json())]
                    await response.write(sse(chunk({"tool_calls": deltas})))
        await response.write(sse(chunk({}, reason=finish_reason())))
        usage = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": _usage(gen),
        }
        await response.write(sse(usage))
    except SclateError as exc:
        await response.write(sse(error_body(exc, 500)))
    finally:
        note_usage(request, gen)
    await response.write(sse("[DONE]"))
    return response


def _completion_logprobs(steps: Sequence[TokenStep], offset: int) -> dict[str, Any]:
    tokens, offsets = [], []
    for s in steps:
        tok = _bytes_text(s.piece)
        tokens.append(tok)
        offsets.append(offset)
        offset += len(s.text)
    return {
        "tokens": tokens,
        "token_logprobs": [s.logprob for s in steps],
        "top_logprobs": [{t.token: t.logprob for t in s.top_logprobs} for s in steps],
        "text_offset": offsets,
    }


async def handle_completions(ctx: ServerContext, request: web.Request, body: Any) -> web.StreamResponse:
    f = Fields(body)
    raw = f.data.get("prompt")
    if raw is None:
        raise f.missing("prompt")
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str | list):
        raw = raw[0]  # a batch of one
    if isinstance(raw, str):
        prompt_ids = await ctx.engine.tokenize(raw)
    elif isinstance(raw, list) and raw and all(isinstance(t, int) and not isinstance(t, bool) for t in raw):
        # Token ids go to the model untouched: trainers replay exact prompts.
        prompt_ids = list(raw)
    else:
        raise InvalidArgument("'prompt' must be a string or an array of token ids (one prompt)", field="prompt")
    _check_n(f)
    if f.opt_bool("echo"):
        raise InvalidArgument("'echo' is not supported", field="echo")
    logprobs_n = f.opt_int("logprobs", minimum=0, maximum=MAX_TOP_LOGPROBS)
    want_ids = f.opt_bool("return_token_ids") or logprobs_n is not None
    params = _constrained(f, f.sampling(max_tokens=_max_tokens(f, "max_tokens") or 16, top_logprobs=logprobs_n or 0))
    stream = f.opt_bool("stream")
    model = ctx.model_of(f)
    ctx.engine.check_prompt(prompt_ids, "prompt")
    gen = Generation(ctx.engine, prompt_ids, params)
    rid, created = new_id("cmpl-"), now()
    request[USAGE] = (len(prompt_ids), 0)

    if not stream:
        await gen.complete()
        note_usage(request, gen)
        choice: dict[str, Any] = {
            "index": 0,
            "text": gen.content,
            "logprobs": _completion_logprobs(gen.steps, 0) if logprobs_n is not None else None,
            "finish_reason": gen.reason,
        }
        out: dict[str, Any] = {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": _usage(gen),
        }
        if want_ids:
            choice["token_ids"] = gen.token_ids
            choice["prompt_token_ids"] = prompt_ids
            out["prompt_token_ids"] = prompt_ids
        return web.json_response(out)

    def chunk(text: str, step: TokenStep | None, reason: str | None, offset: int) -> dict[str, Any]:
        c: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        if step is not None and logprobs_n is not None:
            c["logprobs"] = _completion_logprobs([step], offset)
        if want_ids:
            c["token_ids"] = [step.token_id] if step is not None else []
        return {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [c]}

    response = await open_stream(request)
    offset = 0
    first = True
    try:
        async with contextlib.aclosing(gen.run()) as steps:
            async for step, text in steps:
                if step is None:
                    last = chunk(text, None, gen.reason, offset)
                    if first and want_ids:
                        last["prompt_token_ids"] = prompt_ids
                    await response.write(sse(last))
                    break
                c = chunk(text, step, None, offset)
                if first and want_ids:
                    c["prompt_token_ids"] = prompt_ids
                    c["choices"][0]["prompt_token_ids"] = prompt_ids
                first = False
                offset += len(text)
                await response.write(sse(c))
        await response.write(
            sse(
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": _usage(gen),
                }
            )
        )
    except SclateError as exc:
        await response.write(sse(error_body(exc, 500)))
    finally:
        note_usage(request, gen)
    await response.write(sse("[DONE]"))
    return response
