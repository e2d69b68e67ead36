"""What the addon records when the upstream (or the agent) sends something malformed:
always a record, failed with a cause when the answer is not a response of its API,
never an exception in a hook (which left the call unrecorded and its lease held)."""

from __future__ import annotations

import gzip
import json
import time
from typing import Any

import pytest
from mitmproxy import http

from proxy_addons import record
from proxy_addons._attribution import hints
from proxy_addons._call import Call, bounded
from proxy_addons._sse import MAX_INDEX, assemble_stream
from sclated.capture import CallRecord, failure_cause
from tests.capture.fake_daemon import FakeDaemon
from tests.proxy_addons.harness import CHAT_BODY, VLLM_CHAT_RESPONSE, Harness, sse


async def _reply_raw(harness: Harness, f: http.HTTPFlow, body: bytes, headers: dict[str, str]) -> None:
    f.response = http.Response.make(200, body, headers)
    harness.addon.responseheaders(f)
    harness.addon.response(f)
    await harness.addon.flush()


async def _only_record(daemon: FakeDaemon) -> CallRecord:
    (rec,) = await daemon.records()
    assert isinstance(rec, CallRecord)
    assert not daemon.sink.active_calls(rec.run)  # its lease was given back
    return rec


@pytest.mark.parametrize(
    ("body", "ctype"),
    [
        (b"<html><body>Welcome to nginx!</body></html>", "text/html"),
        (b'{"choices": [{"message": {"content": "o', "application/json"),
        (b"", "application/json"),
        (b'{"choices": "none", "usage": [1]}', "application/json"),
        (b'{"usage": {"prompt_tokens": ' + b"9" * 5000 + b"}}", "application/json"),
    ],
    ids=["html", "invalid-json", "empty", "no-choices-list", "integer-past-the-digit-limit"],
)
async def test_a_2xx_that_is_not_a_response_of_its_api_is_a_failed_call(
    harness: Harness, daemon: FakeDaemon, body: bytes, ctype: str
) -> None:
    # Before: recorded as complete, so the run counted it a successful call.
    f = harness.flow()
    await harness.send(f)
    await _reply_raw(harness, f, body, {"content-type": ctype})
    rec = await _only_record(daemon)
    assert rec.status == 200 and not rec.complete and rec.error is None
    assert failure_cause(rec.to_json()) == "bad_response"
    assert any("not a openai_chat response" in w for w in rec.warnings), rec.warnings


async def test_a_well_formed_response_is_still_complete(harness: Harness, daemon: FakeDaemon) -> None:
    f = harness.flow()
    await harness.send(f)
    await harness.reply_json(f, VLLM_CHAT_RESPONSE)
    rec = await _only_record(daemon)
    assert rec.complete and failure_cause(rec.to_json()) is None


async def test_a_body_nested_past_the_recursion_limit_is_recorded_as_failed(
    harness: Harness, daemon: FakeDaemon
) -> None:
    # Before: RecursionError escaped the JSON parsing, no record was built, and the
    # call's clock lease stayed held until its TTL.
    f = harness.flow()
    await harness.send(f)
    await _reply_raw(harness, f, b"[" * 200_000 + b"]" * 200_000, {"content-type": "application/json"})
    rec = await _only_record(daemon)
    assert not rec.complete and failure_cause(rec.to_json()) == "bad_response"


async def test_a_body_that_does_not_decode_as_its_content_encoding_is_a_failed_call(
    harness: Harness, daemon: FakeDaemon
) -> None:
    # Before: mitmproxy's lenient decoding handed over the raw bytes and the call
    # looked complete; the client, which decodes strictly, could not read it.
    f = harness.flow()
    await harness.send(f)
    f.response = http.Response.make(200, b"", {"content-type": "application/json", "content-encoding": "gzip"})
    f.response.raw_content = json.dumps(VLLM_CHAT_RESPONSE).encode()  # not gzip
    harness.addon.responseheaders(f)
    harness.addon.response(f)
    await harness.addon.flush()
    rec = await _only_record(daemon)
    assert not rec.complete and "does not decode as its content-encoding 'gzip'" in " ".join(rec.warnings)
    # A body that is what it says is read as ever.
    f2 = harness.flow()
    await harness.send(f2)
    f2.response = http.Response.make(200, b"", {"content-type": "application/json", "content-encoding": "gzip"})
    f2.response.raw_content = gzip.compress(json.dumps(VLLM_CHAT_RESPONSE).encode())
    harness.addon.responseheaders(f2)
    harness.addon.response(f2)
    await harness.addon.flush()
    assert [r.complete for r in await daemon.records()] == [False, True]


async def test_a_stream_with_malformed_events_is_recorded_as_failed(harness: Harness, daemon: FakeDaemon) -> None:
    # Before: an index of "zero" raised in the stream's reassembly (no record, lease
    # held); a tool call index of 10**9 grew a list to a billion entries.
    f = harness.flow(dict(CHAT_BODY, stream=True))
    await harness.send(f)
    t0 = time.monotonic()
    await harness.reply_sse(
        f,
        sse(
            {"choices": [{"index": "zero", "delta": {"content": "a"}}]},
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 10**9, "function": {}}]}}]},
            {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]},
            "[DONE]",
        ),
    )
    assert time.monotonic() - t0 < 5
    rec = await _only_record(daemon)
    assert not rec.complete and failure_cause(rec.to_json()) == "bad_response"
    assert "2 malformed stream event(s) left out of the response" in rec.warnings
    assert rec.response["choices"][0]["message"]["content"] == "ok"


@pytest.mark.parametrize(
    ("api", "events"),
    [
        (
            "openai_chat",
            [
                {"choices": [{"index": None, "delta": {"content": 5}}]},
                {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "1", "function": {}}]}}]},
                {"choices": [{"index": MAX_INDEX, "delta": {"content": "a"}}]},
                {"choices": {"index": 0}},
                {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": 7}}]}}]},
            ],
        ),
        (
            "anthropic_messages",
            [
                {"type": "message_start", "message": "m"},
                {"type": "content_block_start", "index": "one", "content_block": {}},
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 5}},
                {"type": "content_block_delta", "index": 10**12, "delta": {"type": "input_json_delta"}},
                {"type": "content_block_delta", "index": 0, "delta": "text"},
                {"type": "message_delta", "delta": "stop"},
            ],
        ),
    ],
)
def test_malformed_events_are_counted_and_left_out(api: str, events: list[dict[str, Any]]) -> None:
    final, finished, malformed = assemble_stream(api, sse(*events).decode())
    assert malformed == len(events) and not finished
    assert isinstance(final, dict)


def test_a_record_past_the_control_socket_s_line_keeps_sizes_not_text() -> None:
    # Before: a 50 MB response made a 100 MB record line: the daemon refused it
    # (dropping the connection), and the spool sent it again every 2 s, forever.
    call = Call("c1", "r1", "agent", "openai_chat", "POST", "/v1/chat/completions", time.time_ns())
    call.read_request(json.dumps(CHAT_BODY).encode(), True)
    call.start_stream()
    big = dict(VLLM_CHAT_RESPONSE, choices=[dict(VLLM_CHAT_RESPONSE["choices"][0], message={"content": "x" * 400_000})])
    call.stream_chunk(sse({"choices": [{"index": 0, "delta": {"content": "x" * 400_000}}]}, "[DONE]"))
    rec, text = bounded(call.to_record(200, json.dumps(big).encode(), None, time.time_ns()), limit=300_000)
    assert len(text.encode()) <= 300_000 and record.loads(text) == rec
    assert rec["response"] is None and not rec["complete"]
    assert [c["size"] for c in rec["chunks"]] == [c["size"] for c in call.chunks] and rec["chunks"][0]["text"] == ""
    assert "past the 300000 bytes a record may have" in rec["warnings"][-1]
    small, small_text = bounded(call.to_record(200, json.dumps(VLLM_CHAT_RESPONSE).encode(), None, time.time_ns()))
    assert small_text == record.dumps(small)


def test_a_response_the_proxy_cannot_read_still_makes_a_failed_record(monkeypatch: pytest.MonkeyPatch) -> None:
    call = Call("c1", "r1", "agent", "openai_chat", "POST", "/v1/chat/completions", time.time_ns())
    call.read_request(json.dumps(CHAT_BODY).encode(), True)

    def broken(raw: bytes | None) -> Any:
        raise MemoryError("out of memory reading the body")

    monkeypatch.setattr(call, "response_body", broken)
    rec = call.to_record(200, b"{}", None, time.time_ns())
    assert record.validate(rec) == rec
    assert not rec["complete"] and rec["error"] is not None and "MemoryError" in rec["error"]


async def test_an_agent_s_turn_header_of_5000_digits_does_not_get_its_call_past_capture(
    harness: Harness, daemon: FakeDaemon
) -> None:
    # Before: int() of it raised in requestheaders after the key was swapped: the call
    # went upstream with the real key, without a lease and without a record.
    f = harness.flow(headers={"x-sclate-turn": "9" * 5000})
    await harness.send(f)
    await harness.reply_json(f, VLLM_CHAT_RESPONSE)
    rec = await _only_record(daemon)
    assert rec.complete and rec.turn is None
    assert hints(lambda name: {"x-sclate-turn": "-42"}.get(name)).turn == -42


async def test_an_agent_s_body_nested_past_the_recursion_limit_is_recorded(
    harness: Harness, daemon: FakeDaemon
) -> None:
    f = harness.flow()
    f.request.content = b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    await harness.send(f)
    await harness.reply_json(f, VLLM_CHAT_RESPONSE)
    rec = await _only_record(daemon)
    assert rec.complete and isinstance(rec.request, str)
