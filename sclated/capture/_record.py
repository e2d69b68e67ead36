"""The call record: one model call as the in-sandbox proxy saw it.

Mirrors the JSON the addon (`proxy_addons/capture.py`) sends over the control
socket. Validation is strict because records are the ground truth trainers
learn from: a malformed one is rejected naming the field, never half-stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sclated.errors import InvalidArgument

__all__ = ["API_KINDS", "SCHEMA_VERSION", "CallRecord", "Chunk", "Completion", "Timings"]

SCHEMA_VERSION = 1
API_KINDS = frozenset({"openai_chat", "openai_completions", "openai_responses", "anthropic_messages", "other"})


def _bad(name: str, why: str) -> InvalidArgument:
    return InvalidArgument(f"call record: {name} {why}", field=name, reason="INVALID_RECORD")


def _str(d: dict[str, Any], key: str, prefix: str = "", *, optional: bool = False) -> str | None:
    name = prefix + key
    v = d.get(key)
    if v is None:
        if optional:
            return None
        raise _bad(name, "is required")
    if not isinstance(v, str):
        raise _bad(name, f"must be a string, got {type(v).__name__}")
    if not optional and not v:
        raise _bad(name, "must not be empty")
    return v


def _int(d: dict[str, Any], key: str, prefix: str = "", *, optional: bool = False) -> int | None:
    name = prefix + key
    v = d.get(key)
    if v is None:
        if optional:
            return None
        raise _bad(name, "is required")
    if not isinstance(v, int) or isinstance(v, bool):
        raise _bad(name, f"must be an integer, got {type(v).__name__}")
    return v


def _bool(d: dict[str, Any], key: str, default: bool) -> bool:
    v = d.get(key, default)
    if not isinstance(v, bool):
        raise _bad(key, "must be a boolean")
    return v


def _ids(v: Any, name: str) -> tuple[int, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        raise _bad(name, "must be a list of non-negative integers")
    return tuple(v)


def _floats(v: Any, name: str) -> tuple[float, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in v):
        raise _bad(name, "must be a list of numbers")
    return tuple(float(x) for x in v)


def _dict(d: dict[str, Any], key: str) -> dict[str, Any] | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, dict):
        raise _bad(key, "must be an object")
    return v


@dataclass(frozen=True)
class Completion:
    """One choice of a call: the sampled token ids and their logprobs as the
    server returned them (None when the server did not return them)."""

    index: int
    token_ids: tuple[int, ...] | None
    logprobs: tuple[float, ...] | None
    finish_reason: str | None

    @classmethod
    def from_json(cls, d: Any, name: str) -> Completion:
        if not isinstance(d, dict):
            raise _bad(name, "must be an object")
        index = _int(d, "index", name + ".")
        assert index is not None
        token_ids = _ids(d.get("token_ids"), name + ".token_ids")
        logprobs = _floats(d.get("logprobs"), name + ".logprobs")
        if token_ids is not None and logprobs is not None and len(token_ids) != len(logprobs):
            raise _bad(
                name + ".logprobs",
                f"has {len(logprobs)} entries for {len(token_ids)} token ids",
            )
        return cls(index, token_ids, logprobs, _str(d, "finish_reason", name + ".", optional=True))

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "token_ids": list(self.token_ids) if self.token_ids is not None else None,
            "logprobs": list(self.logprobs) if self.logprobs is not None else None,
            "finish_reason": self.finish_reason,
        }


@dataclass(frozen=True)
class Chunk:
    """One network chunk of a streamed response, with its wall arrival time."""

    t_ns: int
    size: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"t_ns": self.t_ns, "size": self.size, "text": self.text}


@dataclass(frozen=True)
class Timings:
    """Wall-clock nanoseconds: request seen, response headers, call finished."""

    start_ns: int
    first_byte_ns: int | None
    end_ns: int

    def to_json(self) -> dict[str, Any]:
        return {
            "start_ns": self.start_ns,
            "first_byte_ns": self.first_byte_ns,
            "end_ns": self.end_ns,
        }


@dataclass(frozen=True)
class CallRecord:
    """One model call. ``request``/``response`` are the JSON bodies (the
    request as forwarded, i.e. with ``injected`` keys added; for a stream the
    response is reassembled from ``chunks``)."""

    call_id: str
    run: str
    role: str
    api: str
    method: str
    path: str
    model: str | None
    stream: bool
    sampling: dict[str, Any]
    injected: tuple[str, ...]
    request: Any
    status: int | None
    response: Any
    chunks: tuple[Chunk, ...]
    prompt_token_ids: tuple[int, ...] | None
    completions: tuple[Completion, ...]
    usage: dict[str, Any] | None
    finish_reason: str | None
    timings: Timings
    error: str | None
    complete: bool
    thread: str
    thread_source: str = "derived"
    turn: int | None = None
    parent_thread: str | None = None
    branch_hint: str | None = None
    retry_of: str | None = None
    unleased: bool = False
    """The call went ahead without a clock lease (its ``call_start`` was not acknowledged)."""
    warnings: tuple[str, ...] = field(default_factory=tuple)
    schema: int = SCHEMA_VERSION

    # -- convenience ------------------------------------------------------

    @property
    def completion_token_ids(self) -> tuple[int, ...] | None:
        return self.completions[0].token_ids if self.completions else None

    @property
    def completion_logprobs(self) -> tuple[float, ...] | None:
        return self.completions[0].logprobs if self.completions else None

    @property
    def failed(self) -> bool:
        return self.error is not None or not self.complete

    # -- JSON --------------------------------------------------------------

    @classmethod
    def from_json(cls, data: Any) -> CallRecord:
        """Parse and validate; raises InvalidArgument naming the bad field."""
        if isinstance(data, str | bytes):
            try:
                data = json.loads(data)
            except ValueError as e:
                raise _bad("record", f"is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise _bad("record", "must be an object")
        d: dict[str, Any] = data
        schema = _int(d, "schema", optional=True)
        if schema is not None and schema != SCHEMA_VERSION:
            raise _bad("schema", f"is {schema}, this daemon reads {SCHEMA_VERSION}")
        api = _str(d, "api")
        if api not in API_KINDS:
            raise _bad("api", f"must be one of {sorted(API_KINDS)}, got {api!r}")
        sampling = _dict(d, "sampling") or {}
        injected = d.get("injected") or []
        if not isinstance(injected, list) or not all(isinstance(x, str) for x in injected):
            raise _bad("injected", "must be a list of strings")
        raw_chunks = d.get("chunks") or []
        if not isinstance(raw_chunks, list):
            raise _bad("chunks", "must be a list")
        chunks: list[Chunk] = []
        for i, c in enumerate(raw_chunks):
            if not isinstance(c, dict):
                raise _bad(f"chunks[{i}]", "must be an object")
            t_ns = _int(c, "t_ns", f"chunks[{i}].")
            size = _int(c, "size", f"chunks[{i}].", optional=True)
            text = c.get("text", "")
            if not isinstance(text, str):
                raise _bad(f"chunks[{i}].text", "must be a string")
            assert t_ns is not None
            chunks.append(Chunk(t_ns, size if size is not None else len(text.encode()), text))
        raw_comp = d.get("completions") or []
        if not isinstance(raw_comp, list):
            raise _bad("completions", "must be a list")
        completions = tuple(Completion.from_json(c, f"completions[{i}]") for i, c in enumerate(raw_comp))
        t = d.get("timings")
        if not isinstance(t, dict):
            raise _bad("timings", "is required and must be an object")
        start_ns = _int(t, "start_ns", "timings.")
        end_ns = _int(t, "end_ns", "timings.")
        assert start_ns is not None and end_ns is not None
        if end_ns < start_ns:
            raise _bad("timings.end_ns", "is before timings.start_ns")
        timings = Timings(start_ns, _int(t, "first_byte_ns", "timings.", optional=True), end_ns)
        warnings = d.get("warnings") or []
        if not isinstance(warnings, list) or not all(isinstance(x, str) for x in warnings):
            raise _bad("warnings", "must be a list of strings")
        stream = _bool(d, "stream", False)
        complete = _bool(d, "complete", False)
        call_id, run, role, method, path, thread = (
            _str(d, k) for k in ("call_id", "run", "role", "method", "path", "thread")
        )
        assert call_id and run and role and method and path and thread
        return cls(
            call_id=call_id,
            run=run,
            role=role,
            api=api,
            method=method,
            path=path,
            model=_str(d, "model", optional=True),
            stream=stream,
            sampling=sampling,
            injected=tuple(injected),
            request=d.get("request"),
            status=_int(d, "status", optional=True),
            response=d.get("response"),
            chunks=tuple(chunks),
            prompt_token_ids=_ids(d.get("prompt_token_ids"), "prompt_token_ids"),
            completions=completions,
            usage=_dict(d, "usage"),
            finish_reason=_str(d, "finish_reason", optional=True),
            timings=timings,
            error=_str(d, "error", optional=True),
            complete=complete,
            thread=thread,
            thread_source=_str(d, "thread_source", optional=True) or "derived",
            turn=_int(d, "turn", optional=True),
            parent_thread=_str(d, "parent_thread", optional=True),
            branch_hint=_str(d, "branch_hint", optional=True),
            retry_of=_str(d, "retry_of", optional=True),
            unleased=_bool(d, "unleased", False),
            warnings=tuple(warnings),
            schema=SCHEMA_VERSION,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "call_id": self.call_id,
            "run": self.run,
            "role": self.role,
            "api": self.api,
            "method": self.method,
            "path": self.path,
            "model": self.model,
            "stream": self.stream,
            "sampling": self.sampling,
            "injected": list(self.injected),
            "request": self.request,
            "status": self.status,
            "response": self.response,
            "chunks": [c.to_json() for c in self.chunks],
            "prompt_token_ids": (list(self.prompt_token_ids) if self.prompt_token_ids is not None else None),
            "completions": [c.to_json() for c in self.completions],
            "usage": self.usage,
            "finish_reason": self.finish_reason,
            "timings": self.timings.to_json(),
            "error": self.error,
            "complete": self.complete,
            "thread": self.thread,
            "thread_source": self.thread_source,
            "turn": self.turn,
            "parent_thread": self.parent_thread,
            "branch_hint": self.branch_hint,
            "retry_of": self.retry_of,
            "unleased": self.unleased,
            "warnings": list(self.warnings),
        }
