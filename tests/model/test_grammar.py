"""Response formats to grammars, without a model: which grammar, and which field a bad one names."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sclated.errors import InvalidArgument
from sclated.model import json_object_grammar, json_schema_grammar, response_format_grammar, text_format_grammar
from sclated.model._grammar import MAX_SCHEMA_REPETITION

llama_grammar = pytest.importorskip("llama_cpp.llama_grammar", reason="llama-cpp-python is not installed")

MEM0 = {
    "type": "object",
    "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
    "required": ["facts"],
}


def chat_schema(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "facts", "schema": schema, "strict": True}}


def test_text_and_absent_formats_are_unconstrained() -> None:
    assert response_format_grammar(None) is None
    assert response_format_grammar({"type": "text"}) is None
    assert text_format_grammar(None) is None
    assert text_format_grammar({"type": "text"}) is None


def test_json_object_is_llama_cpp_json_grammar_rooted_at_an_object() -> None:
    grammar = response_format_grammar({"type": "json_object"})
    assert grammar == json_object_grammar() == llama_grammar.JSON_GBNF
    assert grammar is not None and "root   ::= object" in grammar
    assert text_format_grammar({"type": "json_object"}) == grammar


def test_json_schema_is_the_library_converter_output() -> None:
    grammar = response_format_grammar(chat_schema(MEM0))
    assert grammar is not None
    library = llama_grammar.json_schema_to_gbnf(json.dumps(MEM0))
    ours, theirs = grammar.splitlines(), library.splitlines()
    # Rule for rule the same, bar the string-character rule (next test).
    assert [line.split(" ::= ")[0] for line in ours] == [line.split(" ::= ")[0] for line in theirs]
    assert sum(a != b for a, b in zip(ours, theirs, strict=True)) == 1
    assert 'facts-kv ::= "\\"facts\\"" space ":" space facts' in ours


def test_schema_strings_exclude_raw_control_characters() -> None:
    """Python's json.loads rejects a raw newline inside a string; the grammar must not allow one."""
    grammar = json_schema_grammar(MEM0, "schema")
    loose = llama_grammar.PRIMITIVE_RULES["char"].content
    strict = r'[^"\\\x7F\x00-\x1F]'  # the string characters of llama.cpp's own JSON grammar
    assert strict in llama_grammar.JSON_GBNF
    char_rules = [line for line in grammar.splitlines() if line.startswith("char ::= ")]
    assert char_rules == ["char ::= " + loose.replace(r'[^"\\]', strict, 1)]
    assert " ::= " + loose not in grammar


def test_chat_and_responses_shapes_of_a_schema_give_one_grammar() -> None:
    flat = {"type": "json_schema", "name": "facts", "schema": MEM0, "strict": True}
    assert text_format_grammar(flat) == response_format_grammar(chat_schema(MEM0)) == json_schema_grammar(MEM0, "x")


def test_bounds_up_to_the_limit_convert() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": MAX_SCHEMA_REPETITION},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "code": {"type": "string", "pattern": "^[A-Z]{2,8}$"},
            # A property named like a keyword is a schema, not a bound.
            "maxLength": {"type": "integer"},
        },
    }
    assert "root ::=" in json_schema_grammar(schema, "schema")


SCHEMA = "response_format.json_schema.schema"


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("json", "response_format"),
        ({}, "response_format.type"),
        ({"type": 3}, "response_format.type"),
        ({"type": "xml"}, "response_format.type"),
        ({"type": "json_schema"}, "response_format.json_schema"),
        ({"type": "json_schema", "json_schema": "facts"}, "response_format.json_schema"),
        ({"type": "json_schema", "json_schema": {"name": "facts"}}, SCHEMA),
        (chat_schema([MEM0]), SCHEMA),
        (chat_schema(True), SCHEMA),
        (chat_schema({"type": "wat"}), SCHEMA),
        (chat_schema({"$ref": "#/$defs/missing"}), SCHEMA),
        # Remote references are refused, never fetched.
        (chat_schema({"$ref": "https://example.invalid/schema.json"}), SCHEMA),
        (chat_schema({"type": "string", "pattern": "no anchors"}), SCHEMA),
        (chat_schema({"type": "string", "minLength": 10**9}), f"{SCHEMA}.minLength"),
        (
            chat_schema({"type": "object", "properties": {"facts": {"type": "array", "maxItems": 5000}}}),
            f"{SCHEMA}.properties.facts.maxItems",
        ),
        (chat_schema({"type": "string", "pattern": "^a{0,100000}$"}), f"{SCHEMA}.pattern"),
        (chat_schema({"anyOf": [{"type": "string", "maxLength": 20000}]}), f"{SCHEMA}.anyOf[0].maxLength"),
    ],
)
def test_bad_response_format_names_the_field(value: Any, field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        response_format_grammar(value)
    assert caught.value.field == field
    assert field in caught.value.message


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"type": "bogus"}, "text.format.type"),
        ({"type": "json_schema", "name": "facts"}, "text.format.schema"),
        ({"type": "json_schema", "schema": 5}, "text.format.schema"),
        ({"type": "json_schema", "schema": {"type": "array", "minItems": 2000}}, "text.format.schema.minItems"),
    ],
)
def test_bad_text_format_names_the_field(value: Any, field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        text_format_grammar(value)
    assert caught.value.field == field


def test_absurdly_nested_schema_is_a_bad_request_not_a_crash() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(5000):
        schema = {"type": "array", "items": schema}
    with pytest.raises(InvalidArgument) as caught:
        json_schema_grammar(schema, "text.format.schema")
    assert caught.value.field == "text.format.schema"
