"""The one record schema (proxy_addons.record), as the addon writes it and the
daemon (sclated.capture.CallRecord) reads it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from proxy_addons import record
from sclated.capture import API_KINDS, SCHEMA_VERSION, CallRecord, Chunk, Completion, Timings
from sclated.errors import InvalidArgument
from tests.capture.fake_daemon import FakeDaemon
from tests.proxy_addons.harness import CHAT_BODY, VLLM_CHAT_RESPONSE, Harness, sse


def named(*events: tuple[str, Any]) -> bytes:
    return "".join(f"event: {n}\ndata: {json.dumps(d)}\n\n" for n, d in events).encode()


ANTHROPIC_BODY = {"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
RESPONSES_BODY = {"model": "m1", "input": [{"role": "user", "content": "hi"}]}
RESPONSE_DONE = {
    "id": "r",
    "object": "response",
    "status": "completed",
    "model": "m1",
    "output": [],
    "usage": {"input_tokens": 2},
    # The embedded server's token record (what the injected flags ask for).
    "prompt_token_ids": [1, 2],
    "token_ids": [5],
    "logprobs": [{"token": "x", "logprob": -0.5}],
}

ANTHROPIC_TOKENS: dict[str, Any] = {
    "prompt_token_ids": [1, 2, 3],
    "token_ids": [9],
    "logprobs": {"content": [{"token": "yo", "logprob": -0.1}]},
}

# kind -> (path, request body, the plain reply, the streamed reply)
CALLS: dict[str, tuple[str, dict[str, Any], dict[str, Any], bytes]] = {
    "openai_chat": (
        "/v1/chat/completions",
        CHAT_BODY,
        VLLM_CHAT_RESPONSE,
        sse(
            {
                "id": "c",
                "prompt_token_ids": [1, 2],
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": "a"},
                        "token_ids": [3],
                        "logprobs": {"content": [{"logprob": -0.5}]},
                    }
                ],
            },
            {
                "id": "c",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "usage": {"completion_tokens": 1},
            },
            "[DONE]",
        ),
    ),
    "openai_completions": (
        "/v1/completions",
        {"model": "m1", "prompt": "say"},
        {
            "id": "x",
            "prompt_token_ids": [1],
            "choices": [
                {
                    "index": 0,
                    "text": "hi",
                    "token_ids": [4, 5],
                    "logprobs": {"token_logprobs": [-1, -2]},
                    "finish_reason": "length",
                }
            ],
        },
        sse(
            {
                "id": "x",
                "choices": [
                    {
                        "index": 0,
                        "text": "h",
                        "prompt_token_ids": [1],
                        "token_ids": [4],
                        "logprobs": {"token_logprobs": [-1.0]},
                    }
                ],
            },
            {
                "id": "x",
                "choices": [
                    {
                        "index": 0,
                        "text": "i",
                        "token_ids": [5],
                        "logprobs": {"token_logprobs": [-2.0]},
                        "finish_reason": "length",
                    }
                ],
            },
            "[DONE]",
        ),
    ),
    "openai_responses": (
        "/v1/responses",
        RESPONSES_BODY,
        RESPONSE_DONE,
        named(
            ("response.created", {"type": "response.created", "response": dict(RESPONSE_DONE, status="in_progress")}),
            ("response.completed", {"type": "response.completed", "response": RESPONSE_DONE}),
        ),
    ),
    "anthropic_messages": (
        "/v1/messages",
        ANTHROPIC_BODY,
        {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "yo"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 1},
            **ANTHROPIC_TOKENS,
        },
        named(
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {"id": "m", "content": [], "usage": {"input_tokens": 3}, "prompt_token_ids": [1, 2, 3]},
                },
            ),
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "yo"}},
            ),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 1},
                    **ANTHROPIC_TOKENS,
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ),
    ),
    "openai_embeddings": (
        "/v1/embeddings",
        {"model": "e", "input": ["x", "y"]},
        {
            "data": [{"index": 0, "embedding": [0.1, 0.2, 0.3]}, {"index": 1, "embedding": "AAAAAAAAAAAAAAAA"}],
            "usage": {"prompt_tokens": 4},
        },
        b"data: 1\n\n",
    ),
    "other": ("/v1/rerank", {"model": "e", "query": "x"}, {"results": [{"index": 0}]}, b"data: 1\n\n"),
}


async def addon_record(harness: Harness, daemon: FakeDaemon, kind: str, streamed: bool) -> dict[str, Any]:
    """The record the addon sends for one call of ``kind``, as JSON."""
    path, body, plain, stream = CALLS[kind]
    f = harness.flow(dict(body, stream=True) if streamed else body, path=path)
    await harness.send(f)
    if streamed:
        await harness.reply_sse(f, stream)
    else:
        await harness.reply_json(f, plain)
    sent: dict[str, Any] = daemon.of_type("record")[-1]["record"]
    return sent


def test_the_kinds_are_the_schemas() -> None:
    assert set(CALLS) == set(record.API_KINDS) == API_KINDS
    assert SCHEMA_VERSION == record.SCHEMA_VERSION


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("kind", sorted(CALLS))
async def test_every_kind_the_addon_builds_is_read_by_the_daemon(
    harness: Harness, daemon: FakeDaemon, kind: str, streamed: bool
) -> None:
    sent = await addon_record(harness, daemon, kind, streamed)
    # Every field, in the schema's order, nothing else.
    assert list(sent) == [f.name for f in record.fields()]
    assert record.validate(sent) == sent
    rec = CallRecord.from_json(sent)
    assert rec.to_json() == sent  # the daemon reads back exactly what was written
    (stored,) = await daemon.records()
    assert stored == rec
    assert (rec.api, rec.stream, rec.error) == (kind, streamed, None)
    assert rec.complete, rec.warnings
    if kind not in ("other", "openai_embeddings"):
        assert rec.prompt_token_ids and rec.completion_token_ids and rec.completion_logprobs
        flag = "top_logprobs" if kind == "openai_responses" else "logprobs"
        assert rec.injected == ("return_token_ids", flag)
    else:
        assert rec.prompt_token_ids is None and rec.injected == ()
    if streamed:
        assert rec.chunks and "".join(c.text for c in rec.chunks) == CALLS[kind][3].decode()


async def test_an_embeddings_record_keeps_sizes_and_usage_not_vectors(harness: Harness, daemon: FakeDaemon) -> None:
    sent = await addon_record(harness, daemon, "openai_embeddings", streamed=False)
    # A float list is counted as it is; base64 (16 characters: 12 bytes) as float32s.
    assert sent["response"]["data"] == [{"index": 0, "dimensions": 3}, {"index": 1, "dimensions": 3}]
    assert sent["usage"] == {"prompt_tokens": 4} and sent["component"] == "agent:embeddings"


async def test_failed_and_cut_calls_are_valid_records_too(harness: Harness, daemon: FakeDaemon) -> None:
    f = harness.flow()
    await harness.send(f)
    await harness.reply_json(f, {"error": {"message": "boom"}}, status=500)
    f2 = harness.flow(dict(CHAT_BODY, stream=True))
    await harness.send(f2)
    harness.start_sse(f2)(sse({"id": "c", "choices": [{"index": 0, "token_ids": [1]}]}))
    harness.addon.response(f2)
    await harness.addon.flush()
    f3 = harness.flow(key=None, headers={"x-api-key": "sk-sclate-run-42-s3cr3t-xyz"})
    await harness.send(f3)
    harness.addon.error(f3)  # no response at all
    await harness.addon.flush()
    sent = [m["record"] for m in daemon.of_type("record")]
    assert len(sent) == 3
    for s in sent:
        assert CallRecord.from_json(s).failed and record.validate(s) == s
    assert sent[0]["status"] == 500 and sent[1]["warnings"] == ["stream ended without a final event"]
    assert sent[2]["status"] is None and sent[2]["error"] == "unknown error"


REQUIRED = [f.name for f in record.fields() if f.required]


def test_the_required_fields() -> None:
    assert REQUIRED == ["call_id", "run", "role", "api", "method", "path", "timings", "thread"]


@pytest.mark.parametrize(
    "missing", [*REQUIRED, "timings.start_ns", "timings.end_ns", "completions[0].index", "chunks[0].t_ns"]
)
async def test_a_record_missing_a_required_field_is_refused_naming_it_on_both_sides(
    harness: Harness, daemon: FakeDaemon, missing: str
) -> None:
    sent = await addon_record(harness, daemon, "openai_chat", streamed=True)
    bad = json.loads(json.dumps(sent))
    where, name = bad, missing
    if "." in missing:
        head, name = missing.split(".")
        where = bad[head.split("[")[0]]
        where = where[0] if "[" in head else where
    del where[name]
    with pytest.raises(record.RecordError) as addon_side:
        record.validate(bad)
    assert addon_side.value.field == missing and addon_side.value.why == "is required"
    with pytest.raises(InvalidArgument) as daemon_side:
        CallRecord.from_json(json.dumps(bad))
    assert daemon_side.value.field == missing and daemon_side.value.reason == "INVALID_RECORD"
    assert missing in daemon_side.value.message


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("api", "grpc", "api"),
        ("call_id", "", "call_id"),
        ("prompt_token_ids", [1, "2"], "prompt_token_ids[1]"),
        ("prompt_token_ids", [-1], "prompt_token_ids[0]"),
        ("completions", [{"index": 0, "token_ids": [1], "logprobs": [-1.0, -2.0]}], "completions[0].logprobs"),
        ("timings", {"start_ns": 5, "end_ns": 4}, "timings.end_ns"),
        ("stream", "yes", "stream"),
        ("unleased", 1, "unleased"),
        ("warnings", ["ok", 3], "warnings[1]"),
        ("retry_of", 7, "retry_of"),
        ("schema", 2, "schema"),
        ("turn", True, "turn"),
    ],
)
def test_a_bad_value_is_refused_naming_it_on_both_sides(field: str, value: Any, named: str) -> None:
    bad = dict(good(), **{field: value})
    with pytest.raises(record.RecordError) as e:
        record.validate(bad)
    assert e.value.field == named
    with pytest.raises(InvalidArgument) as d:
        CallRecord.from_json(bad)
    assert d.value.field == named and d.value.reason == "INVALID_RECORD"


def test_not_json_or_not_an_object() -> None:
    for bad in ("{", "[1]", b"null"):
        with pytest.raises(InvalidArgument) as d:
            CallRecord.from_json(bad)
        assert d.value.field == "record"


def good() -> dict[str, Any]:
    return {
        "call_id": "c1",
        "run": "r",
        "role": "agent",
        "api": "openai_chat",
        "method": "POST",
        "path": "/v1/chat/completions",
        "thread": "t-1",
        "timings": {"start_ns": 1, "end_ns": 2},
    }


def test_older_records_read_with_the_reader_defaults() -> None:
    """Records written before a field existed (no unleased, warnings, retry_of,
    thread_source, chunk sizes, ...) read with the declared defaults."""
    old = dict(good(), chunks=[{"t_ns": 1, "text": "hé"}], completions=[{"index": 0}], stream=None)
    rec = CallRecord.from_json(old)
    assert (rec.unleased, rec.warnings, rec.retry_of, rec.thread_source, rec.schema) == (False, (), None, "derived", 1)
    assert (rec.sampling, rec.injected, rec.stream, rec.complete, rec.model) == ({}, (), False, False, None)
    assert rec.chunks == (Chunk(1, 3, "hé"),) and rec.completions == (Completion(0, None, None, None),)
    assert rec.timings == Timings(1, None, 2)
    # Written back, the record has every field.
    assert list(rec.to_json()) == [f.name for f in record.fields()]
    assert CallRecord.from_json(rec.to_json()) == rec
    assert record.READER_DEFAULTS[record.Record].keys() == {f.name for f in record.fields() if not f.required}


@pytest.mark.parametrize(
    ("cls", "shape"),
    [(CallRecord, record.Record), (Timings, record.Timings), (Chunk, record.Chunk), (Completion, record.Completion)],
)
def test_the_daemon_classes_have_the_schemas_fields(cls: type, shape: Any) -> None:
    """A field declared once in proxy_addons.record shows up in the daemon's class."""
    assert {f.name for f in dataclasses.fields(cls)} == {f.name for f in record.fields(shape)}


def test_completion_from_json_names_its_field() -> None:
    assert Completion.from_json({"index": 1, "token_ids": [2], "logprobs": [0]}) == Completion(1, (2,), (0.0,), None)
    with pytest.raises(InvalidArgument) as e:
        Completion.from_json({"token_ids": [2]}, "completions[3]")
    assert e.value.field == "completions[3].index"
