"""The tool-call parser and the streaming hold-back, on fixed strings."""

from __future__ import annotations

import json

from sclated.model import parse_tool_calls, tool_call_start
from sclated.model._common import ContentGate
from sclated.model._tools import ToolSpec, render_tool_call, render_tool_prompt

NAMES = ("get_weather", "search")


def test_tagged_call_is_parsed_and_removed_from_text() -> None:
    text = (
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "\n</tool_call>"
    )
    out = parse_tool_calls(text, NAMES)
    assert out.calls == (("get_weather", '{"city": "Paris"}'),)
    assert out.content == "Let me check."


def test_tagged_list_of_calls_and_several_tags() -> None:
    text = (
        '<tool_call>[{"name": "search", "arguments": {"q": "a"}}, '
        '{"name": "get_weather", "arguments": {}}]</tool_call>'
        '<tool_call>{"name": "search", "arguments": "{\\"q\\": \\"b\\"}"}</tool_call>'
    )
    out = parse_tool_calls(text, NAMES)
    assert [name for name, _ in out.calls] == ["search", "get_weather", "search"]
    assert [json.loads(a) for _, a in out.calls] == [{"q": "a"}, {}, {"q": "b"}]
    assert out.content is None


def test_unterminated_tag_at_end_of_output_still_parses() -> None:
    out = parse_tool_calls('<tool_call>{"name": "search", "arguments": {"q": "x"}}', NAMES)
    assert out.calls == (("search", '{"q": "x"}'),)


def test_bare_json_object_and_parameters_alias() -> None:
    out = parse_tool_calls('{"name": "search", "parameters": {"q": "cats"}} done', NAMES)
    assert out.calls == (("search", '{"q": "cats"}'),)
    assert out.content == "done"


def test_fenced_json_swallows_the_fence() -> None:
    text = 'Sure:\n```json\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n```'
    out = parse_tool_calls(text, NAMES)
    assert out.calls == (("get_weather", '{"city": "Oslo"}'),)
    assert out.content == "Sure:"


def test_unparsable_or_undeclared_output_stays_text() -> None:
    for text in (
        "The weather is nice.",
        '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>',
        '{"name": "rm_rf", "arguments": {}}',  # not a declared tool
        '{"name": "search"}',  # no arguments
        '{"name": "search", "arguments": [1, 2]}',  # arguments not an object
        'A dict {"a": 1} in prose.',
        '<tool_call>{"name": "search", "arguments": {}}</tool_call><tool_call>oops</tool_call>',
    ):
        out = parse_tool_calls(text, NAMES)
        assert out.calls == (), text
        assert out.content == text.strip(), text


def test_any_name_allowed_when_no_names_given() -> None:
    assert parse_tool_calls('{"name": "x", "arguments": {}}').calls == (("x", "{}"),)


def test_tool_call_start_finds_triggers_and_cut_triggers() -> None:
    assert tool_call_start("plain text") is None
    assert tool_call_start("abc <tool_call>{") == 4
    assert tool_call_start('ok {"name"') == 3
    assert tool_call_start("half <tool_") == 5
    assert tool_call_start("a fence `") == 8
    assert tool_call_start("x <") == 2


def test_content_gate_streams_prose_and_holds_back_a_call() -> None:
    gate = ContentGate(list(NAMES))
    pieces = ["Checking", " now", ". <", "tool_call>", '{"name": "search", ', '"arguments": {}}',
              "</tool_call>"]
    released = [gate.feed(p) for p in pieces]
    assert released[:2] == ["Checking", " now"]
    assert "".join(released) == "Checking now. "
    out = gate.finish()
    assert out.calls == (("search", "{}"),)
    assert out.content is None


def test_content_gate_releases_a_false_alarm_at_the_end() -> None:
    gate = ContentGate(list(NAMES))
    released = gate.feed("a <b> and {not json")
    assert released == "a <b> and "  # "<b>" is no trigger; "{" is
    out = gate.finish()
    assert out.calls == ()
    assert released + (out.content or "") == "a <b> and {not json"


def test_content_gate_without_tools_releases_everything() -> None:
    gate = ContentGate(None)
    assert gate.feed('{"name": "search", "arguments": {}}') == '{"name": "search", "arguments": {}}'
    assert gate.finish().calls == ()


def test_tool_prompt_and_call_rendering() -> None:
    spec = ToolSpec("search", "Search the web", {"type": "object", "properties": {}})
    prompt = render_tool_prompt([spec], required="search")
    assert '"name": "search"' in prompt
    assert "<tools>" in prompt and "</tools>" in prompt
    assert "You must call the function search." in prompt
    rendered = render_tool_call("search", '{"q": "x"}')
    assert parse_tool_calls(rendered, NAMES).calls == (("search", '{"q": "x"}'),)
