"""Event streams split into events and reassembled into the response a
non-streamed call would have returned; a cut stream says so."""

from __future__ import annotations

import json
from typing import Any

from proxy_addons._sse import assemble_stream, parse_sse
from tests.proxy_addons.harness import sse


def named(*events: tuple[str, Any]) -> str:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)


def test_parse_sse_fields_comments_and_line_endings() -> None:
    text = ": keep-alive\r\nevent: a\r\ndata: 1\r\ndata: 2\r\n\r\ndata:3\n\n"
    assert parse_sse(text) == ([("a", "1\n2"), (None, "3")], True)
    assert parse_sse("data: 1\n\ndata: 2") == ([(None, "1"), (None, "2")], False)
    assert parse_sse("") == ([], True)


def test_openai_chat_stream_with_reasoning_and_tool_calls() -> None:
    text = sse(
        {
            "id": "c",
            "created": 1,
            "model": "m",
            "prompt_token_ids": [1, 2],
            "choices": [{"index": 0, "delta": {"role": "assistant"}}],
        },
        {"id": "c", "choices": [{"index": 0, "delta": {"reasoning_content": "hm"}, "token_ids": [3]}]},
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "t1",
                                "type": "function",
                                "function": {"name": "ls", "arguments": '{"p"'},
                            }
                        ]
                    },
                    "token_ids": [4],
                    "logprobs": {"content": [{"logprob": -0.1}]},
                }
            ],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ': "/"}'}}]},
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 2, "completion_tokens": 2},
        },
        "[DONE]",
    ).decode()
    final, finished, _ = assemble_stream("openai_chat", text)
    assert finished
    assert final["object"] == "chat.completion" and final["model"] == "m"
    assert final["prompt_token_ids"] == [1, 2] and final["usage"]["completion_tokens"] == 2
    (choice,) = final["choices"]
    assert choice["token_ids"] == [3, 4] and choice["finish_reason"] == "tool_calls"
    assert choice["logprobs"] == {"content": [{"logprob": -0.1}]}
    msg = choice["message"]
    assert msg["reasoning_content"] == "hm" and msg["content"] == ""
    assert msg["tool_calls"] == [
        {"id": "t1", "type": "function", "function": {"name": "ls", "arguments": '{"p": "/"}'}}
    ]


def test_openai_completions_stream() -> None:
    text = sse(
        {
            "id": "x",
            "choices": [
                {"index": 0, "text": "Hel", "token_ids": [5], "logprobs": {"token_logprobs": [-1.0], "tokens": ["Hel"]}}
            ],
        },
        {
            "id": "x",
            "choices": [
                {
                    "index": 0,
                    "text": "lo",
                    "token_ids": [6],
                    "logprobs": {"token_logprobs": [-2.0], "tokens": ["lo"]},
                    "finish_reason": "length",
                }
            ],
        },
        "[DONE]",
    ).decode()
    final, finished, _ = assemble_stream("openai_completions", text)
    assert finished and final["object"] == "text_completion"
    (choice,) = final["choices"]
    assert choice["text"] == "Hello" and choice["token_ids"] == [5, 6]
    assert choice["logprobs"] == {"token_logprobs": [-1.0, -2.0], "tokens": ["Hel", "lo"]}


def test_openai_stream_cut_before_its_end() -> None:
    whole = sse({"id": "c", "choices": [{"index": 0, "delta": {"content": "a"}}]}, "[DONE]").decode()
    assert assemble_stream("openai_chat", whole)[1]
    assert not assemble_stream("openai_chat", whole[: whole.index("data: [DONE]")])[1]
    assert not assemble_stream("openai_chat", whole[:-1])[1]  # the last event unterminated


def test_anthropic_stream_reassembly() -> None:
    text = named(
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "m",
                    "role": "assistant",
                    "model": "claude",
                    "content": [],
                    "usage": {"input_tokens": 5},
                },
            },
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}},
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "tu1", "name": "ls", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '{"p": '},
            },
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '"/"}'}},
        ),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 7},
                "token_ids": [4, 5],
                "logprobs": {"content": [{"logprob": -1.0}, {"logprob": -2.0}]},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    )
    final, finished, _ = assemble_stream("anthropic_messages", text)
    assert finished
    # The token record rides on the final message_delta (the embedded server's extension).
    assert final["token_ids"] == [4, 5] and len(final["logprobs"]["content"]) == 2
    assert final["content"][0] == {"type": "text", "text": "Hello"}
    assert final["content"][1]["input"] == {"p": "/"}
    assert final["stop_reason"] == "tool_use"
    assert final["usage"] == {"input_tokens": 5, "output_tokens": 7}
    _, cut, _ = assemble_stream("anthropic_messages", text[: text.index("event: message_delta")])
    assert not cut


def test_anthropic_thinking_blocks() -> None:
    text = named(
        ("message_start", {"type": "message_start", "message": {"id": "m", "content": []}}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "so"}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}},
        ),
        ("message_stop", {"type": "message_stop"}),
    )
    final, finished, _ = assemble_stream("anthropic_messages", text)
    assert finished and final["content"] == [{"type": "thinking", "thinking": "so", "signature": "sig"}]


def test_responses_stream_takes_the_completed_response() -> None:
    text = named(
        (
            "response.created",
            {"type": "response.created", "response": {"id": "r", "status": "in_progress", "output": []}},
        ),
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "hi"}),
        (
            "response.completed",
            {
                "type": "response.completed",
                "response": {"id": "r", "status": "completed", "output": [{"type": "message"}]},
            },
        ),
    )
    final, finished, _ = assemble_stream("openai_responses", text)
    assert finished and final["status"] == "completed" and final["output"] == [{"type": "message"}]
    partial, done, _ = assemble_stream("openai_responses", text[: text.index("event: response.completed")])
    assert not done and partial["status"] == "in_progress"
    # Cut short by max_output_tokens is still a finished stream.
    incomplete = text.replace("response.completed", "response.incomplete")
    assert assemble_stream("openai_responses", incomplete)[1]


def test_other_apis_are_not_assembled() -> None:
    assert assemble_stream("other", "data: 1\n\n") == (None, True, 0)
