"""Token ids and logprobs taken as the server returned them, and the request
flags that ask for them, spliced into the raw body."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy_addons import record
from proxy_addons._tokens import add_fields, extract_tokens, inject_output_bound, inject_token_flags, with_token_flags
from tests.proxy_addons.harness import CHAT_BODY, VLLM_CHAT_RESPONSE


def test_chat_response_tokens() -> None:
    t = extract_tokens("openai_chat", VLLM_CHAT_RESPONSE)
    assert t.prompt_token_ids == [1, 2, 3, 4]
    assert t.completions == [{"index": 0, "token_ids": [10, 11], "logprobs": [-0.5, -0.25], "finish_reason": "stop"}]
    assert t.finish_reason == "stop" and t.usage == VLLM_CHAT_RESPONSE["usage"] and t.warnings == []


def test_completions_response_tokens_per_choice_in_order() -> None:
    resp = {
        "choices": [
            {"index": 1, "token_ids": [7], "logprobs": {"token_logprobs": [-1]}, "finish_reason": "length"},
            {"index": 0, "prompt_token_ids": [1], "token_ids": [5, 6], "logprobs": {"token_logprobs": [-1, -2.5]}},
        ]
    }
    t = extract_tokens("openai_completions", resp)
    assert t.prompt_token_ids == [1]  # from a choice, as vLLM's completions put it
    assert [c["index"] for c in t.completions] == [0, 1]
    assert t.completions[0]["logprobs"] == [-1.0, -2.5] and t.completions[1]["finish_reason"] == "length"
    assert t.finish_reason is None  # choice 0's


def test_no_ids_means_none_never_retokenized() -> None:
    t = extract_tokens("openai_chat", {"choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}]})
    assert t.prompt_token_ids is None and t.completions[0]["token_ids"] is None


def test_mismatched_logprobs_are_dropped_with_a_warning() -> None:
    resp = {"choices": [{"index": 0, "token_ids": [1, 2], "logprobs": {"content": [{"logprob": -1.0}]}}]}
    t = extract_tokens("openai_chat", resp)
    assert t.completions[0]["token_ids"] == [1, 2] and t.completions[0]["logprobs"] is None
    assert t.warnings == ["choice 0: 2 token ids but 1 logprobs; logprobs dropped"]


@pytest.mark.parametrize(
    "choice",
    [
        {"index": "0", "token_ids": [-1, 2], "finish_reason": 3},
        {"token_ids": [True], "logprobs": {"content": [{"logprob": None}]}},
        {"index": 0, "token_ids": "1 2", "logprobs": {"token_logprobs": ["x"]}},
    ],
)
def test_odd_server_values_still_make_a_valid_record(choice: dict[str, Any]) -> None:
    """Whatever a server sends, what is extracted fits the schema: a record is
    never refused over a server's odd token fields."""
    t = extract_tokens("openai_chat", {"prompt_token_ids": [1, -2], "usage": [1], "choices": [choice]})
    assert t.prompt_token_ids is None and t.usage is None
    for i, c in enumerate(t.completions):
        record.validate_part(record.Completion, c, f"completions[{i}]")
    assert t.completions[0]["token_ids"] is None and t.completions[0]["finish_reason"] is None


@pytest.mark.parametrize(
    ("api", "resp", "finish"),
    [
        ("anthropic_messages", {"stop_reason": "end_turn", "usage": {"input_tokens": 1}}, "end_turn"),
        ("openai_responses", {"status": "completed", "usage": {"input_tokens": 1}}, "completed"),
    ],
)
def test_apis_without_token_ids(api: str, resp: dict[str, Any], finish: str) -> None:
    t = extract_tokens(api, resp)
    assert (t.prompt_token_ids, t.completions, t.finish_reason, t.usage) == (None, [], finish, resp["usage"])


def test_flags_added_only_where_taken_and_absent() -> None:
    body = dict(CHAT_BODY)
    assert inject_token_flags("openai_chat", body) == ["return_token_ids", "logprobs"]
    assert body["return_token_ids"] is True and body["logprobs"] is True
    comp: dict[str, Any] = {"prompt": "x", "logprobs": 2}
    assert inject_token_flags("openai_completions", comp) == ["return_token_ids"] and comp["logprobs"] == 2
    assert inject_token_flags("openai_completions", {"prompt": "x"}) == ["return_token_ids", "logprobs"]
    anthropic: dict[str, Any] = {"model": "m", "messages": []}
    assert inject_token_flags("anthropic_messages", anthropic) == ["return_token_ids", "logprobs"]
    assert anthropic["logprobs"] is True
    responses: dict[str, Any] = {"model": "m", "input": "hi", "top_logprobs": 3}
    assert inject_token_flags("openai_responses", responses) == ["return_token_ids"]
    assert responses["top_logprobs"] == 3
    assert inject_token_flags("openai_responses", {"input": "x"}) == ["return_token_ids", "top_logprobs"]
    assert inject_token_flags("other", dict(CHAT_BODY)) == []
    assert inject_token_flags("openai_chat", ["not", "an", "object"]) == []


def test_flags_spliced_into_the_raw_body() -> None:
    raw = b'  {"model": "m",\n "messages": []}'
    out, added = with_token_flags("openai_chat", raw, json.loads(raw))
    assert added == ["return_token_ids", "logprobs"]
    assert out == b'{"return_token_ids": true, "logprobs": true, "model": "m",\n "messages": []}'
    assert add_fields(b"{}", {"a": 1}) == b'{"a": 1}'
    assert add_fields(b"[1]", {"a": 1}) is None
    same = b'{"model": "m", "return_token_ids": false, "logprobs": false}'
    assert with_token_flags("openai_chat", same, json.loads(same)) == (same, [])
    other = b'{"model": "m"}'
    assert with_token_flags("other", other, json.loads(other))[0] is other


def test_anthropic_and_responses_tokens_are_one_completion() -> None:
    anthropic = {
        "stop_reason": "tool_use",
        "prompt_token_ids": [1, 2],
        "token_ids": [7, 8],
        "logprobs": {"content": [{"logprob": -0.5}, {"logprob": -1.0}]},
    }
    t = extract_tokens("anthropic_messages", anthropic)
    assert t.prompt_token_ids == [1, 2] and t.finish_reason == "tool_use"
    assert t.completions == [{"index": 0, "token_ids": [7, 8], "logprobs": [-0.5, -1.0], "finish_reason": "tool_use"}]
    message = {"type": "message", "content": [{"type": "output_text", "logprobs": [{"logprob": -0.25}]}]}
    responses = {"status": "completed", "prompt_token_ids": [3], "token_ids": [9], "output": [message]}
    t = extract_tokens("openai_responses", responses)
    assert t.completions == [{"index": 0, "token_ids": [9], "logprobs": [-0.25], "finish_reason": "completed"}]
    # A top-level list covers every sampled token (tool calls too) and wins.
    t = extract_tokens("openai_responses", {**responses, "logprobs": [{"logprob": -2.0}]})
    assert t.completions[0]["logprobs"] == [-2.0]
    # Mismatched lengths: the ids stay, the logprobs go, with a warning.
    t = extract_tokens("anthropic_messages", {**anthropic, "token_ids": [7]})
    assert t.completions[0]["token_ids"] == [7] and t.completions[0]["logprobs"] is None and t.warnings


def test_an_output_bound_is_added_only_where_none_is_set() -> None:
    assert inject_output_bound("openai_responses", {"input": "x"}, 96) == ["max_output_tokens"]
    bounded: dict[str, Any] = {"input": "x", "max_output_tokens": 5}
    assert inject_output_bound("openai_responses", bounded, 96) == [] and bounded["max_output_tokens"] == 5
    assert inject_output_bound("openai_chat", {"max_completion_tokens": 5}, 96) == []
    assert inject_output_bound("openai_chat", {"max_tokens": None}, 96) == ["max_tokens"]
    assert inject_output_bound("openai_responses", {"input": "x"}, 0) == []  # off
    assert inject_output_bound("other", {}, 96) == []
    raw = b'{"input": "x"}'
    out, added = with_token_flags("openai_responses", raw, json.loads(raw), 96, token_flags=False)
    assert added == ["max_output_tokens"] and json.loads(out) == {"input": "x", "max_output_tokens": 96}
