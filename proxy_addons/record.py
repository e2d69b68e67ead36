"""The call record: the one schema the capture addon writes and the daemon reads.

Standard library only: it runs inside sandboxes (the addon's venv there has
only mitmproxy) and in the daemon, whose ``sclated.capture.CallRecord`` reads
and writes records through it. A field is declared once, in :class:`Record`
(or the nested :class:`Timings`, :class:`Chunk`, :class:`Completion`), and
both sides follow:

- the addon builds a ``Record`` (mypy checks that every field is set, with
  its type);
- :func:`validate` checks any JSON against the same declarations and raises
  :class:`RecordError` naming the first bad field (``completions[0].logprobs``);
- ``CallRecord`` has one attribute per field, converted by :func:`fields`
  (a test holds the two equal).

A reader is lenient about one thing only: fields that older writers left out
(:data:`READER_DEFAULTS`). Keys the schema does not know are ignored.
"""

# No `from __future__ import annotations`: the declarations below are read at
# run time (typing.get_type_hints), and plain annotations keep that simple.
import dataclasses
import functools
import json
from collections.abc import Callable
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, TypedDict, Union, get_args, get_origin, get_type_hints, is_typeddict

__all__ = [
    "API_KINDS",
    "MAX_LINE_BYTES",
    "MAX_RECORD_BYTES",
    "READER_DEFAULTS",
    "SCHEMA_VERSION",
    "ApiKind",
    "Chunk",
    "Completion",
    "Field",
    "Record",
    "RecordError",
    "Timings",
    "dumps",
    "fields",
    "is_token_ids",
    "loads",
    "validate",
    "validate_part",
]

SCHEMA_VERSION = 1
MAX_LINE_BYTES = 16 * 1024 * 1024
"""The longest request line the daemon's control socket reads (a longer one is refused)."""
MAX_RECORD_BYTES = MAX_LINE_BYTES - 64 * 1024
"""The longest record text the addon sends: a record of a call with longer bodies keeps
their sizes, not their text (see ``proxy_addons._call``)."""

ApiKind = Literal[
    "openai_chat", "openai_completions", "openai_responses", "anthropic_messages", "openai_embeddings", "other"
]
API_KINDS: tuple[str, ...] = get_args(ApiKind)


class _Rule:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NON_EMPTY = _Rule("non-empty")
NON_NEGATIVE = _Rule("non-negative")
Name = Annotated[str, NON_EMPTY]
"""A string that must not be empty (identities: call id, run, role, ...)."""
TokenId = Annotated[int, NON_NEGATIVE]


class Timings(TypedDict):
    """Wall-clock nanoseconds (the sandbox's simulated clock): request seen,
    response headers, call finished."""

    start_ns: int
    first_byte_ns: int | None
    end_ns: int


class Chunk(TypedDict):
    """One network chunk of a streamed response, with its arrival time."""

    t_ns: int
    size: int
    text: str


class Completion(TypedDict):
    """One choice: the sampled token ids and their logprobs as the server
    returned them (None when it did not)."""

    index: int
    token_ids: list[TokenId] | None
    logprobs: list[float] | None
    finish_reason: str | None


class Record(TypedDict):
    """One model call as the proxy saw it. ``request`` is the body as
    forwarded (with the ``injected`` keys); for a stream ``response`` is
    reassembled from ``chunks``."""

    schema: int
    call_id: Name
    run: Name
    role: Name
    api: ApiKind
    method: Name
    path: Name
    model: str | None
    stream: bool
    sampling: dict[str, Any]
    injected: list[str]
    request: Any
    status: int | None
    response: Any
    chunks: list[Chunk]
    prompt_token_ids: list[TokenId] | None
    completions: list[Completion]
    usage: dict[str, Any] | None
    finish_reason: str | None
    timings: Timings
    error: str | None
    complete: bool
    thread: Name
    thread_source: Name
    turn: int | None
    parent_thread: str | None
    branch_hint: str | None
    retry_of: str | None
    unleased: bool
    """The call went ahead without a clock lease (its ``call_start`` was not acknowledged)."""
    warnings: list[str]
    component: str
    """What made the call, finer than its role: the role itself (``agent``, ``aux``), the
    memory system behind the memory listener (``memory:mem0``, ``memory:hindsight``,
    ``memory:native`` for the harness's own memory work) or ``<role>:embeddings`` for an
    embeddings call. Empty in records written before the field existed (read: the role)."""


READER_DEFAULTS: dict[Any, dict[str, Any]] = {
    # What a reader assumes for a field a writer left out, or sent as null
    # where the field takes no null (records written before the field
    # existed). Every field not named here is required. Callables are
    # factories. Chunk.size, when missing, is the size of its text.
    Record: {
        "schema": SCHEMA_VERSION,
        "model": None,
        "stream": False,
        "sampling": dict,
        "injected": list,
        "request": None,
        "status": None,
        "response": None,
        "chunks": list,
        "prompt_token_ids": None,
        "completions": list,
        "usage": None,
        "finish_reason": None,
        "error": None,
        "complete": False,
        "thread_source": "derived",
        "turn": None,
        "parent_thread": None,
        "branch_hint": None,
        "retry_of": None,
        "unleased": False,
        "warnings": list,
        "component": "",
    },
    Timings: {"first_byte_ns": None},
    Chunk: {"text": "", "size": None},
    Completion: {"token_ids": None, "logprobs": None, "finish_reason": None},
}


class RecordError(ValueError):
    """A record that does not follow the schema: ``field`` names the first bad
    field (``chunks[2].t_ns``), ``why`` says what is wrong with it."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"call record: {field} {why}")
        self.field = field
        self.why = why


# ---------------------------------------------------------------- the fields


@dataclasses.dataclass(frozen=True)
class Field:
    """One declared field, as a reader converting records needs it."""

    name: str
    type: Any
    """The declaration, as written in the TypedDict."""
    required: bool
    """No reader default: a record without it is refused."""
    many: bool
    """A list (of ``shape`` objects, or of plain values)."""
    shape: Any
    """The nested TypedDict (of the object, or of the list's items), or None."""


def _strip(tp: Any) -> tuple[Any, tuple[Any, ...], bool]:
    """``tp`` without Annotated and ``| None``: (type, rules, nullable)."""
    rules: tuple[Any, ...] = ()
    nullable = False
    if get_origin(tp) in (Union, UnionType):
        args = [a for a in get_args(tp) if a is not NoneType]
        if len(args) != 1:
            raise TypeError(f"only `X | None` unions are supported, not {tp}")
        tp, nullable = args[0], True
    if get_origin(tp) is Annotated:
        tp, *extra = get_args(tp)
        rules = tuple(extra)
    return tp, rules, nullable


def _fields_of(shape: Any) -> tuple[Field, ...]:
    defaults = READER_DEFAULTS.get(shape, {})
    out = []
    for name, tp in get_type_hints(shape, include_extras=True).items():
        base, _, _ = _strip(tp)
        many = get_origin(base) is list
        item = _strip(get_args(base)[0])[0] if many else base
        out.append(Field(name, tp, name not in defaults, many, item if is_typeddict(item) else None))
    return tuple(out)


_FIELDS = {shape: _fields_of(shape) for shape in (Record, Timings, Chunk, Completion)}


def fields(shape: Any = Record) -> tuple[Field, ...]:
    """The fields of ``Record`` (or of a nested shape), in their JSON order."""
    return _FIELDS[shape]


# ---------------------------------------------------------------- validation

_Check = Callable[[Any, str], Any]
"""Checks ``value`` named ``name``; returns it (normalised) or raises RecordError."""


def is_token_ids(v: Any) -> bool:
    """``v`` is a list of token ids (non-negative integers, no booleans)."""
    return type(v) is list and all(type(x) is int and x >= 0 for x in v)


def _all_of_type(tp: type, v: list[Any]) -> bool:
    return all(type(x) is tp for x in v)


def _kind(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _scalar(tp: Any, rules: tuple[Any, ...]) -> _Check:
    if tp is str:
        non_empty = NON_EMPTY in rules

        def check_str(v: Any, name: str) -> Any:
            if type(v) is not str:
                raise RecordError(name, f"must be a string, got {_kind(v)}")
            if non_empty and not v:
                raise RecordError(name, "must not be empty")
            return v

        return check_str
    if tp is int:
        non_negative = NON_NEGATIVE in rules

        def check_int(v: Any, name: str) -> Any:
            if type(v) is not int:  # bool is an int subclass, and not one here
                raise RecordError(name, f"must be an integer, got {_kind(v)}")
            if non_negative and v < 0:
                raise RecordError(name, "must not be negative")
            return v

        return check_int
    if tp is float:

        def check_float(v: Any, name: str) -> Any:
            if type(v) is float:
                return v
            if type(v) is not int:
                raise RecordError(name, f"must be a number, got {_kind(v)}")
            return float(v)

        return check_float
    if tp is bool:

        def check_bool(v: Any, name: str) -> Any:
            if type(v) is not bool:
                raise RecordError(name, f"must be a boolean, got {_kind(v)}")
            return v

        return check_bool
    raise TypeError(f"no check for {tp}")


def _list(item_tp: Any) -> _Check:
    item = _compile(item_tp)
    base, rules, nullable = _strip(item_tp)
    # Token ids and logprobs run to thousands per record: check plain lists in
    # one pass, and look for the bad item only when there is one.
    fast: Callable[[list[Any]], bool] | None = None
    if not nullable and base is int and NON_NEGATIVE in rules:
        fast = is_token_ids
    elif not nullable and base in (int, float, str):
        fast = functools.partial(_all_of_type, base)

    def check_list(v: Any, name: str) -> Any:
        if type(v) is not list:
            raise RecordError(name, f"must be a list, got {_kind(v)}")
        if fast is not None and fast(v):
            return v
        return [item(x, f"{name}[{i}]") for i, x in enumerate(v)]

    return check_list


def _object(shape: Any) -> _Check:
    checks = [(f, _compile(f.type), _nullable(f.type)) for f in fields(shape)]
    defaults = READER_DEFAULTS.get(shape, {})
    finish = _FINISH.get(shape)

    def check_object(v: Any, name: str) -> Any:
        if type(v) is not dict:
            raise RecordError(name or "record", f"must be an object, got {_kind(v)}")
        prefix = f"{name}." if name else ""
        out: dict[str, Any] = {}
        for f, check, nullable in checks:
            value = v.get(f.name)
            if value is None and (not nullable or f.name not in v):
                if f.name not in defaults:
                    raise RecordError(prefix + f.name, "is required")
                d = defaults[f.name]
                out[f.name] = d() if callable(d) else d
            else:
                out[f.name] = check(value, prefix + f.name)
        if finish is not None:
            finish(out, prefix)
        return out

    return check_object


def _nullable(tp: Any) -> bool:
    return _strip(tp)[2] or tp is Any


def _compile(tp: Any) -> _Check:
    if tp is Any:
        return lambda v, name: v
    base, rules, nullable = _strip(tp)
    if nullable:
        inner = _compile(base if not rules else Annotated[(base, *rules)])
        return lambda v, name: None if v is None else inner(v, name)
    if get_origin(base) is Literal:
        allowed = get_args(base)

        def check_literal(v: Any, name: str) -> Any:
            if v not in allowed or type(v) is not str:
                raise RecordError(name, f"must be one of {sorted(allowed)}, got {v!r}")
            return v

        return check_literal
    if get_origin(base) is list:
        return _list(get_args(base)[0])
    if get_origin(base) is dict or base is dict:

        def check_dict(v: Any, name: str) -> Any:
            if type(v) is not dict:
                raise RecordError(name, f"must be an object, got {_kind(v)}")
            return v

        return check_dict
    if is_typeddict(base):
        return _object(base)
    return _scalar(base, rules)


def _finish_record(r: dict[str, Any], prefix: str) -> None:
    if r["schema"] != SCHEMA_VERSION:
        raise RecordError("schema", f"is {r['schema']}, this reader reads {SCHEMA_VERSION}")
    t = r["timings"]
    if t["end_ns"] < t["start_ns"]:
        raise RecordError("timings.end_ns", "is before timings.start_ns")


def _finish_chunk(c: dict[str, Any], prefix: str) -> None:
    if c["size"] is None:
        c["size"] = len(c["text"].encode())


def _finish_completion(c: dict[str, Any], prefix: str) -> None:
    ids, lps = c["token_ids"], c["logprobs"]
    if ids is not None and lps is not None and len(ids) != len(lps):
        raise RecordError(prefix + "logprobs", f"has {len(lps)} entries for {len(ids)} token ids")


_FINISH: dict[Any, Callable[[dict[str, Any], str], None]] = {
    Record: _finish_record,
    Chunk: _finish_chunk,
    Completion: _finish_completion,
}
_CHECKS = {shape: _object(shape) for shape in _FIELDS}


def validate(data: Any) -> Record:
    """``data`` (decoded JSON) checked against the schema: a new dict with
    every field, in order, reader defaults filled in. Raises RecordError
    naming the first bad field."""
    out: Record = _CHECKS[Record](data, "")
    return out


def validate_part(shape: Any, data: Any, name: str) -> dict[str, Any]:
    """A nested object (``Completion``, ``Chunk``, ``Timings``) named ``name``
    checked as :func:`validate` checks a record."""
    out: dict[str, Any] = _CHECKS[shape](data, name)
    return out


def loads(text: str | bytes) -> Record:
    """A record from its JSON text, validated."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise RecordError("record", f"is not JSON: {e}") from None
    return validate(data)


def dumps(record: Record) -> str:
    """The record's JSON text: one line, as spooled and sent."""
    return json.dumps(record, ensure_ascii=False)
