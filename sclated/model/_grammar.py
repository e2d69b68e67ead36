"""Structured output: a requested response format turned into a GBNF grammar.

A 135M model does not write valid JSON on request, yet the memory systems run
against this server (Mem0's fact extraction, Hindsight) parse its replies as
JSON. So a ``response_format`` is enforced, not hoped for: it becomes a llama.cpp
grammar that the engine applies as a mask on the logits before every sampled
token (see ``_engine``), and the reply can only be text the grammar accepts.

The grammars are llama.cpp's own: its JSON grammar for ``json_object`` and
llama-cpp-python's port of its JSON-schema converter for ``json_schema``. This
module only picks one, checks the request, and refuses what cannot be enforced
with a 400 naming the field, rather than serving an unconstrained reply the
caller would take for a constrained one.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sclated.errors import InvalidArgument

from ._common import Fields

__all__ = [
    "MAX_SCHEMA_REPETITION",
    "json_object_grammar",
    "json_schema_grammar",
    "response_format_grammar",
    "text_format_grammar",
]

MAX_SCHEMA_REPETITION = 1000
"""The largest repetition bound a schema may use: ``minLength``, ``maxLength``,
``minItems``, ``maxItems``, and the ``{m,n}`` quantifiers of a ``pattern``.

The converter spells a bound of n as n copies (or n nested optional groups) of
the item rule: a huge ``minLength`` exhausts memory while converting, and some
twenty thousand nested groups overflow the stack of llama.cpp's recursive
grammar parser, which kills the whole server. llama.cpp refuses such grammars
well before that anyway (its repetition threshold is met around a thousand),
so refusing larger bounds up front loses nothing that could run.
"""

_REPETITION_KEYS = ("minLength", "maxLength", "minItems", "maxItems")
_PATTERN_QUANTIFIER = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")

# The converter's string characters let raw control characters (a newline, a
# tab) through, which strict JSON parsers such as Python's json.loads reject
# inside a string; llama.cpp's own JSON grammar excludes them. The converter's
# rule is tightened to match (a no-op once the library ships the fixed rule).
_LOOSE_STRING_CHAR = r'[^"\\]'
_STRICT_STRING_CHAR = r'[^"\\\x7F\x00-\x1F]'


def response_format_grammar(value: Any, path: str = "response_format") -> str | None:
    """The grammar for Chat Completions' ``response_format`` (None: unconstrained).

    ``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}``
    constrains to the schema (``strict`` or not: a grammar is always strict);
    ``{"type": "json_object"}`` to any JSON object; ``{"type": "text"}`` or no
    value to nothing.
    """
    if value is None:
        return None
    f = Fields(value, path)
    kind = _format_type(f)
    if kind == "json_schema":
        spec = f.opt_obj("json_schema")
        if spec is None:
            raise f.missing("json_schema")
        return _schema_of(spec)
    return json_object_grammar() if kind == "json_object" else None


def text_format_grammar(value: Any, path: str = "text.format") -> str | None:
    """The grammar for the Responses API's ``text.format`` (None: unconstrained).

    The same formats as :func:`response_format_grammar`, with the json_schema
    one flattened: ``{"type": "json_schema", "name": ..., "schema": {...}}``.
    """
    if value is None:
        return None
    f = Fields(value, path)
    kind = _format_type(f)
    if kind == "json_schema":
        return _schema_of(f)
    return json_object_grammar() if kind == "json_object" else None


def json_object_grammar() -> str:
    """llama.cpp's JSON grammar, whose root is an object: any JSON object."""
    # Imported on use, as in _engine: llama-cpp-python is the optional [model]
    # extra, and importing it loads the native library.
    from llama_cpp.llama_grammar import JSON_GBNF

    grammar: str = JSON_GBNF
    return grammar


def json_schema_grammar(schema: Any, path: str) -> str:
    """The GBNF grammar of the texts a JSON schema accepts, by llama-cpp-python's converter.

    ``path`` names the schema's request field in the InvalidArgument raised for
    a schema that is not an object, has out-of-range bounds, or that the
    converter rejects (unsupported keywords, unresolvable ``$ref``s, remote
    ``$ref``s, which are never fetched).
    """
    if not isinstance(schema, dict):
        raise InvalidArgument(
            f"'{path}' must be a JSON schema object (got {type(schema).__name__})",
            field=path,
        )
    _check_repetitions(schema, path)
    from llama_cpp.llama_grammar import PRIMITIVE_RULES, json_schema_to_gbnf

    try:
        grammar: str = json_schema_to_gbnf(json.dumps(schema))
    except Exception as exc:
        # The converter signals an unusable schema with whatever fails first
        # (asserts, ValueError, KeyError, AttributeError, RecursionError for
        # absurd nesting); all of them mean the caller's schema.
        detail = str(exc) or type(exc).__name__
        raise InvalidArgument(f"'{path}' cannot be enforced as a grammar: {detail}", field=path) from exc
    loose_char = PRIMITIVE_RULES["char"].content
    strict_char = loose_char.replace(_LOOSE_STRING_CHAR, _STRICT_STRING_CHAR, 1)
    lines = []
    for line in grammar.splitlines():
        name, sep, rule = line.partition(" ::= ")
        lines.append(f"{name}{sep}{strict_char}" if sep and rule == loose_char else line)
    return "\n".join(lines) + "\n"


def _format_type(f: Fields) -> str:
    kind = f.opt_str("type")
    if kind is None:
        raise f.missing("type")
    if kind not in ("text", "json_object", "json_schema"):
        raise InvalidArgument(
            f"'{f.name('type')}' {kind!r} is not supported (use 'text', 'json_object' or 'json_schema')",
            field=f.name("type"),
        )
    return kind


def _schema_of(spec: Fields) -> str:
    if not spec.has("schema"):
        raise spec.missing("schema")
    return json_schema_grammar(spec.data["schema"], spec.name("schema"))


def _check_repetitions(schema: dict[str, Any], path: str) -> None:
    """Refuse repetition bounds beyond :data:`MAX_SCHEMA_REPETITION`, naming the keyword's field.

    Walks with an explicit stack: a schema nested past Python's recursion
    limit is the converter's to refuse, not a crash here. Every value is
    walked, literals (``enum``, ``default``) too: a property may be named
    ``default``, and a false alarm in data only costs a 400.
    """
    pending: list[tuple[Any, str]] = [(schema, path)]
    while pending:
        node, where = pending.pop()
        if isinstance(node, list):
            pending.extend((item, f"{where}[{i}]") for i, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            field = f"{where}.{key}"
            if key in _REPETITION_KEYS and isinstance(value, int | float) and not isinstance(value, bool):
                bound = value
            elif key == "pattern" and isinstance(value, str):
                counts = [n for m in _PATTERN_QUANTIFIER.finditer(value) for n in m.groups() if n]
                # Past a few digits a count is out of range anyway (and int() refuses 4300 digits).
                bound = max((int(n) if len(n) <= 9 else 10**9 for n in counts), default=0)
            else:
                pending.append((value, field))
                continue
            if bound > MAX_SCHEMA_REPETITION:
                raise InvalidArgument(
                    f"'{field}' must not repeat more than {MAX_SCHEMA_REPETITION} times to be enforced "
                    f"as a grammar (got {bound})",
                    field=field,
                )
