"""The call record: one model call as the in-sandbox proxy saw it.

The schema is ``proxy_addons.record``, the module the addon builds records
with: its ``Record`` declares every field once, and this module's classes
have one attribute per declared field, converted generically (lists become
tuples, nested objects their class), so a field added there shows up here.
Validation is strict because records are the ground truth trainers learn
from: a malformed one is rejected naming the field, never half-stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from proxy_addons import record as shared
from sclated.errors import InvalidArgument

__all__ = ["API_KINDS", "MAX_CONTROL_LINE_BYTES", "SCHEMA_VERSION", "CallRecord", "Chunk", "Completion", "Timings"]

SCHEMA_VERSION = shared.SCHEMA_VERSION
API_KINDS = frozenset(shared.API_KINDS)
MAX_CONTROL_LINE_BYTES = shared.MAX_LINE_BYTES
"""The longest request line a run's control socket reads (the addon's records stay shorter)."""

_T = TypeVar("_T")


def _invalid(e: shared.RecordError) -> InvalidArgument:
    return InvalidArgument(str(e), field=e.field, reason="INVALID_RECORD")


def _shape(cls: type) -> Any:
    return _SHAPES[cls]


def _from_valid(cls: type[_T], obj: dict[str, Any]) -> _T:
    """An instance of ``cls`` from a validated record (or nested object)."""
    kwargs: dict[str, Any] = {}
    for f in shared.fields(_shape(cls)):
        v = obj[f.name]
        if v is not None:
            if f.shape is not None:
                sub = _CLASSES[f.shape]
                v = tuple(_from_valid(sub, x) for x in v) if f.many else _from_valid(sub, v)
            elif f.many:
                v = tuple(v)
        kwargs[f.name] = v
    return cls(**kwargs)


def _to_json(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in shared.fields(_shape(type(obj))):
        v = getattr(obj, f.name)
        if v is not None:
            if f.shape is not None:
                v = [_to_json(x) for x in v] if f.many else _to_json(v)
            elif f.many:
                v = list(v)
        out[f.name] = v
    return out


@dataclass(frozen=True)
class Completion:
    """One choice of a call: the sampled token ids and their logprobs as the
    server returned them (None when the server did not return them)."""

    index: int
    token_ids: tuple[int, ...] | None
    logprobs: tuple[float, ...] | None
    finish_reason: str | None

    @classmethod
    def from_json(cls, d: Any, name: str = "completion") -> Completion:
        """Parse and validate one completion; raises InvalidArgument naming the bad field."""
        try:
            valid = shared.validate_part(shared.Completion, d, name)
        except shared.RecordError as e:
            raise _invalid(e) from None
        return _from_valid(cls, valid)

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)


@dataclass(frozen=True)
class Chunk:
    """One network chunk of a streamed response, with its wall arrival time."""

    t_ns: int
    size: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)


@dataclass(frozen=True)
class Timings:
    """Wall-clock nanoseconds: request seen, response headers, call finished."""

    start_ns: int
    first_byte_ns: int | None
    end_ns: int

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)


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
    component: str = ""
    """The role, the memory system (``memory:mem0``) or ``<role>:embeddings``; empty in
    records from before the field existed (see :attr:`component_or_role`)."""
    schema: int = SCHEMA_VERSION

    # -- convenience ------------------------------------------------------

    @property
    def completion_token_ids(self) -> tuple[int, ...] | None:
        return self.completions[0].token_ids if self.completions else None

    @property
    def completion_logprobs(self) -> tuple[float, ...] | None:
        return self.completions[0].logprobs if self.completions else None

    @property
    def component_or_role(self) -> str:
        return self.component or self.role

    @property
    def failed(self) -> bool:
        return self.error is not None or not self.complete

    # -- JSON --------------------------------------------------------------

    @classmethod
    def from_json(cls, data: Any) -> CallRecord:
        """Parse (JSON text, or decoded) and validate; raises InvalidArgument
        naming the bad field."""
        try:
            valid = shared.loads(data) if isinstance(data, str | bytes) else shared.validate(data)
        except shared.RecordError as e:
            raise _invalid(e) from None
        return _from_valid(cls, dict(valid))

    def to_json(self) -> dict[str, Any]:
        """The record's JSON, every field in the schema's order."""
        return _to_json(self)


_CLASSES: dict[Any, type] = {
    shared.Record: CallRecord,
    shared.Timings: Timings,
    shared.Chunk: Chunk,
    shared.Completion: Completion,
}
_SHAPES = {cls: shape for shape, cls in _CLASSES.items()}
