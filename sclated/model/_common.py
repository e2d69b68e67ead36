"""What the three wire APIs share: field validation, ids, and a generation run."""

from __future__ import annotations

import contextlib
import json
import math
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from sclated.errors import InvalidArgument

from ._chat import ChatMessage, ChatRenderer, ToolMode
from ._continuation import ChatPrompt, Conversations
from ._engine import Backend, Finish, SamplingParams, TokenStep
from ._tools import ParsedOutput, ToolCall, ToolSpec, parse_tool_calls, tool_call_start

if TYPE_CHECKING:
    from ._embeddings import Embedder

__all__ = [
    "USAGE",
    "ContentGate",
    "Fields",
    "Generation",
    "ServerContext",
    "new_id",
    "note_usage",
    "now",
    "open_stream",
    "sse",
    "text_of",
]


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


class Fields:
    """Typed access to a JSON object; every failure names the offending field."""

    def __init__(self, data: Any, path: str = ""):
        if not isinstance(data, dict):
            raise InvalidArgument(f"{path or 'the request body'} must be a JSON object", field=path or "body")
        self.data: dict[str, Any] = data
        self.path = path

    def name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def bad(self, key: str, expected: str) -> InvalidArgument:
        got = type(self.data.get(key)).__name__
        return InvalidArgument(f"'{self.name(key)}' must be {expected} (got {got})", field=self.name(key))

    def missing(self, key: str) -> InvalidArgument:
        return InvalidArgument(f"'{self.name(key)}' is required", field=self.name(key))

    def opt_str(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.bad(key, "a string")
        return value

    def opt_bool(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.bad(key, "a boolean")
        return value

    def opt_int(self, key: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.bad(key, "an integer")
        if minimum is not None and value < minimum:
            raise InvalidArgument(f"'{self.name(key)}' must be >= {minimum} (got {value})", field=self.name(key))
        if maximum is not None and value > maximum:
            raise InvalidArgument(f"'{self.name(key)}' must be <= {maximum} (got {value})", field=self.name(key))
        return value

    def opt_float(self, key: str, *, minimum: float | None = None, maximum: float | None = None) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.bad(key, "a number")
        number = float(value)
        if not math.isfinite(number):
            raise self.bad(key, "a finite number")
        if minimum is not None and number < minimum:
            raise InvalidArgument(f"'{self.name(key)}' must be >= {minimum} (got {number})", field=self.name(key))
        if maximum is not None and number > maximum:
            raise InvalidArgument(f"'{self.name(key)}' must be <= {maximum} (got {number})", field=self.name(key))
        return number

    def opt_list(self, key: str) -> list[Any] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.bad(key, "an array")
        return value

    def req_list(self, key: str) -> list[Any]:
        value = self.opt_list(key)
        if value is None:
            raise self.missing(key)
        return value

    def opt_obj(self, key: str) -> Fields | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.bad(key, "an object")
        return Fields(value, self.name(key))

    def stops(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key)
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list) and all(isinstance(s, str) for s in value):
            return tuple(value)
        raise self.bad(key, "a string or an array of strings")

    def sampling(
        self,
        *,
        max_tokens: int | None,
        stop_key: str = "stop",
        top_logprobs: int = 0,
        default_temperature: float = 1.0,
    ) -> SamplingParams:
        """The sampling fields every API spells the same way."""
        temperature = self.opt_float("temperature", minimum=0.0, maximum=2.0)
        top_p = self.opt_float("top_p", minimum=0.0, maximum=1.0)
        if top_p is not None and top_p <= 0.0:
            raise InvalidArgument(f"'{self.name('top_p')}' must be > 0", field=self.name("top_p"))
        top_k = self.opt_int("top_k", minimum=-1)
        seed = self.opt_int("seed")
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=default_temperature if temperature is None else temperature,
            top_p=1.0 if top_p is None else top_p,
            top_k=max(top_k or 0, 0),
            seed=seed,
            stop=self.stops(stop_key),
            ignore_eos=self.opt_bool("ignore_eos"),
            top_logprobs=top_logprobs,
        )


def text_of(value: Any, path: str, *, allowed: Sequence[str] = ("text",)) -> str:
    """Flatten string-or-parts content to text.

    Parts of other kinds (images, files) cannot reach a text-only model; they
    are rejected rather than silently dropped so a caller notices.
    """
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if not isinstance(value, list):
        raise InvalidArgument(f"'{path}' must be a string or an array of parts", field=path)
    texts: list[str] = []
    for i, part in enumerate(value):
        if isinstance(part, str):
            texts.append(part)
            continue
        f = Fields(part, f"{path}[{i}]")
        kind = f.opt_str("type") or "text"
        if kind not in allowed:
            raise InvalidArgument(
                f"'{f.name('type')}' {kind!r} is not supported by this text-only model",
                field=f.name("type"),
            )
        text = f.opt_str("text")
        if text is None:
            raise f.missing("text")
        texts.append(text)
    return "".join(texts)


class ContentGate:
    """Decides which generated text can go out as content while streaming.

    With tools on, text from a possible tool-call start onwards waits for the
    end of generation, where it is parsed; text before it streams normally.
    Used for non-streamed responses too, so both modes split output alike.
    """

    def __init__(self, tool_names: Sequence[str] | None):
        self._names = tuple(tool_names) if tool_names is not None else None
        self._text = ""
        self._released = 0

    def feed(self, text: str) -> str:
        self._text += text
        if self._names is None:
            out = self._text[self._released :]
            self._released = len(self._text)
            return out
        start = tool_call_start(self._text[self._released :])
        end = len(self._text) if start is None else self._released + start
        out = self._text[self._released : end]
        self._released = end
        return out

    def finish(self) -> ParsedOutput:
        rest = self._text[self._released :]
        self._released = len(self._text)
        if self._names is None or not rest:
            return ParsedOutput(rest or None, ())
        parsed = parse_tool_calls(rest, self._names)
        if not parsed.calls:
            return ParsedOutput(rest, ())
        return parsed


@dataclass
class Generation:
    """One run of the model, with everything a response needs afterwards."""

    engine: Backend
    prompt_ids: list[int]
    params: SamplingParams
    tool_names: Sequence[str] | None = None
    call_id_prefix: str = "call_"
    steps: list[TokenStep] = field(default_factory=list)
    content: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    finish: Finish | None = None
    on_finish: Callable[[Generation], None] | None = None
    """Called once the generation ended (not when it was cut short), before the last item."""

    async def run(self) -> AsyncGenerator[tuple[TokenStep | None, str], None]:
        """Yield ``(step, content released by it)`` per token, then ``(None, tail)``.

        After the iteration, ``calls`` holds the parsed tool calls and
        ``finish`` how generation ended.
        """
        gate = ContentGate(self.tool_names)
        async with contextlib.aclosing(self.engine.generate(self.prompt_ids, self.params)) as items:
            async for item in items:
                if isinstance(item, Finish):
                    self.finish = item
                    tail = gate.feed(item.text)
                    parsed = gate.finish()
                    tail += parsed.content or ""
                    self.calls = [ToolCall(new_id(self.call_id_prefix), name, args) for name, args in parsed.calls]
                    self.content += tail
                    if self.on_finish is not None:
                        self.on_finish(self)
                    yield None, tail
                    return
                self.steps.append(item)
                released = gate.feed(item.text)
                self.content += released
                yield item, released

    async def complete(self) -> None:
        async for _ in self.run():
            pass

    @property
    def token_ids(self) -> list[int]:
        return [s.token_id for s in self.steps]

    @property
    def reason(self) -> str:
        return self.finish.reason if self.finish is not None else "stop"

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens the engine reused from its KV cache (0 until the generation finished)."""
        return self.finish.cached_tokens if self.finish is not None else 0


@dataclass
class ServerContext:
    """What every handler needs: the engine, the template, the served name."""

    engine: Backend
    renderer: ChatRenderer
    model_name: str
    embedder: Embedder | None = None
    """The embedding model behind ``/v1/embeddings`` (None: the route answers 404)."""
    conversations: Conversations | None = None
    """The kept exchanges chat prompts continue (None: every chat prompt is rendered whole)."""

    async def chat_prompt(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        mode: ToolMode = "auto",
        forced: str | None = None,
    ) -> ChatPrompt:
        """A chat request's prompt ids: continuing the tokens of the exchange it extends
        (see ``_continuation``), or the whole transcript rendered and tokenized."""
        if self.conversations is not None:
            return await self.conversations.prompt(self.engine, self.renderer, messages, tools, mode, forced)
        return ChatPrompt(await self.engine.tokenize(self.renderer.render(messages, tools, mode, forced)))

    def keep_exchange(self, prompt: ChatPrompt) -> Callable[[Generation], None] | None:
        """A :attr:`Generation.on_finish` that keeps the exchange for the next prompt to continue."""
        conversations = self.conversations
        if conversations is None:
            return None

        def keep(gen: Generation) -> None:
            last = gen.steps[-1] if gen.steps else None
            closing = last.piece.decode("utf-8", errors="replace") if last is not None and last.is_eog else None
            reply = ChatMessage("assistant", gen.content, tuple(gen.calls))
            conversations.remember(prompt, gen.token_ids, reply, closing)

        return keep

    def model_of(self, f: Fields) -> str:
        # Harnesses are configured with arbitrary model names; any is accepted
        # and echoed back so their bookkeeping matches what they asked for.
        return f.opt_str("model") or self.model_name


def sse(data: Any, event: str | None = None) -> bytes:
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {body}\n\n".encode()


async def open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    return response


USAGE = web.RequestKey("usage", tuple[int, int])


def note_usage(request: web.Request, gen: Generation) -> None:
    """Leave token counts for the access log line."""
    request[USAGE] = (len(gen.prompt_ids), len(gen.steps))
