"""The capture addon in memory, driven through mitmproxy's test helpers, with a
real Unix-socket control server on the other side."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow

from proxy_addons.capture import (
    SclateCapture,
    assemble_stream,
    derive_thread,
    parse_roles,
    run_from_key,
)
from sclated.capture import CallRecord, build_trajectories
from tests.capture.fake_daemon import FakeDaemon

SECRET = "s3cr3t-xyz"
RUN = "run-42"
KEY = f"sk-sclate-{RUN}-{SECRET}"
REAL = "real-upstream-key"

CHAT_BODY: dict[str, Any] = {
    "model": "m1",
    "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "hi"},
    ],
    "temperature": 0.7,
    "max_tokens": 16,
    "seed": 3,
}

VLLM_CHAT_RESPONSE: dict[str, Any] = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m1",
    "prompt_token_ids": [1, 2, 3, 4],
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hello"},
            "finish_reason": "stop",
            "token_ids": [10, 11],
            "logprobs": {
                "content": [
                    {"token": "hel", "logprob": -0.5, "top_logprobs": []},
                    {"token": "lo", "logprob": -0.25, "top_logprobs": []},
                ]
            },
        }
    ],
    "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Unix socket paths are limited to ~108 bytes; pytest's tmp_path is long.
    d = Path(tempfile.mkdtemp(prefix="scl", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
async def daemon(short_dir: Path) -> AsyncIterator[FakeDaemon]:
    d = FakeDaemon(short_dir / "s.sock", RUN)
    await d.start()
    yield d
    await d.stop()


class Harness:
    def __init__(self, addon: SclateCapture, tctx: taddons.context, spool: Path) -> None:
        self.addon = addon
        self.tctx = tctx
        self.spool = spool

    def flow(
        self,
        body: Any = None,
        *,
        port: int = 4001,
        path: str = "/v1/chat/completions",
        headers: dict[str, str] | None = None,
        key: str | None = KEY,
    ) -> http.HTTPFlow:
        f = tflow.tflow()
        f.client_conn.sockname = ("127.0.0.1", port)
        h: dict[str | bytes, str | bytes] = {"content-type": "application/json"}
        if key is not None:
            h["authorization"] = f"Bearer {key}"
        h.update(headers or {})
        f.request = http.Request.make(
            "POST",
            f"http://127.0.0.1:{port}{path}",
            json.dumps(CHAT_BODY if body is None else body),
            h,
        )
        f.response = None
        return f

    async def send(self, f: http.HTTPFlow) -> None:
        self.addon.requestheaders(f)
        if f.response is None:
            await self.addon.request(f)

    async def reply_json(self, f: http.HTTPFlow, body: Any, status: int = 200) -> None:
        f.response = http.Response.make(
            status, json.dumps(body), {"content-type": "application/json"}
        )
        self.addon.responseheaders(f)
        self.addon.response(f)
        await self.addon.flush()

    def start_sse(self, f: http.HTTPFlow) -> Any:
        f.response = http.Response.make(200, b"", {"content-type": "text/event-stream"})
        self.addon.responseheaders(f)
        stream = f.response.stream
        assert callable(stream)
        return stream


@pytest.fixture
async def harness(daemon: FakeDaemon, short_dir: Path) -> AsyncIterator[Harness]:
    addon = SclateCapture()
    spool = short_dir / "spool"
    with taddons.context(addon) as tctx:  # type: ignore[no-untyped-call]
        tctx.configure(
            addon,
            sclate_roles="4001=agent,4002=memory,4003=aux",
            sclate_run_secret=SECRET,
            sclate_upstream_key=REAL,
            sclate_control_socket=str(daemon.path),
            sclate_spool=str(spool),
            sclate_retry_interval=0.05,
        )
        yield Harness(addon, tctx, spool)
        await addon.done()


def sse(*events: Any) -> bytes:
    out = b""
    for e in events:
        data = e if isinstance(e, str) else json.dumps(e, ensure_ascii=False)
        out += f"data: {data}\n\n".encode()
    return out


# -- pure helpers ---------------------------------------------------------------


def test_parse_roles_and_keys() -> None:
    assert parse_roles("4001=agent, 4002=memory") == {4001: "agent", 4002: "memory"}
    with pytest.raises(ValueError):
        parse_roles("4001agent")
    assert run_from_key(KEY, SECRET) == RUN
    assert run_from_key(f"sk-sclate-a-b-c-{SECRET}", SECRET) == "a-b-c"
    assert run_from_key(f"sk-sclate-{RUN}-wrong", SECRET) is None
    assert run_from_key(f"sk-sclate--{SECRET}", SECRET) is None
    assert run_from_key(KEY, "") is None  # no configured secret: fail closed
    assert run_from_key("sk-real-openai-key", SECRET) is None


def test_thread_derivation_groups_growing_conversations() -> None:
    first = derive_thread("openai_chat", CHAT_BODY)
    longer = dict(CHAT_BODY)
    longer["messages"] = [
        *CHAT_BODY["messages"],
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": "y"},
    ]
    assert derive_thread("openai_chat", longer) == first
    other = dict(CHAT_BODY, messages=[{"role": "user", "content": "different"}])
    assert derive_thread("openai_chat", other) != first


def test_anthropic_stream_reassembly() -> None:
    text = (
        'event: message_start\ndata: {"type":"message_start","message":{"id":"m","role":'
        '"assistant","model":"claude","content":[],"usage":{"input_tokens":5}}}\n\n'
        'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        '"content_block":{"type":"text","text":""}}\n\n'
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"text_delta","text":"Hel"}}\n\n'
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"text_delta","text":"lo"}}\n\n'
        'event: content_block_start\ndata: {"type":"content_block_start","index":1,'
        '"content_block":{"type":"tool_use","id":"tu1","name":"ls","input":{}}}\n\n'
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":1,'
        '"delta":{"type":"input_json_delta","partial_json":"{\\"p\\": "}}\n\n'
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":1,'
        '"delta":{"type":"input_json_delta","partial_json":"\\"/\\"}"}}\n\n'
        'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
        '"tool_use"},"usage":{"output_tokens":7}}\n\n'
        'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    final, finished = assemble_stream("anthropic_messages", text)
    assert finished
    assert final["content"][0] == {"type": "text", "text": "Hello"}
    assert final["content"][1]["input"] == {"p": "/"}
    assert final["stop_reason"] == "tool_use"
    assert final["usage"] == {"input_tokens": 5, "output_tokens": 7}
    _, cut = assemble_stream("anthropic_messages", text[: text.index("event: message_delta")])
    assert not cut


# -- attribution and secrets ------------------------------------------------------------


async def test_role_from_listener_port_and_key_swapped(
    harness: Harness, daemon: FakeDaemon
) -> None:
    f = harness.flow(port=4002, headers={"x-sclate-thread": "th-1", "x-sclate-turn": "3"})
    await harness.send(f)
    # The real key goes upstream; the sandbox's key and sclate headers do not.
    assert f.request.headers["authorization"] == f"Bearer {REAL}"
    assert "x-sclate-thread" not in f.request.headers
    assert "x-sclate-turn" not in f.request.headers
    await harness.reply_json(f, VLLM_CHAT_RESPONSE)
    (rec,) = await daemon.records()
    assert (rec.run, rec.role, rec.thread, rec.thread_source, rec.turn) == (
        RUN,
        "memory",
        "th-1",
        "header",
        3,
    )

    f2 = harness.flow(port=4999)
    await harness.send(f2)
    await harness.reply_json(f2, VLLM_CHAT_RESPONSE)
    roles = sorted(r.role for r in await daemon.records())
    assert roles == ["memory", "unknown"]


async def test_x_api_key_is_swapped(harness: Harness, daemon: FakeDaemon) -> None:
    body = {"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    f = harness.flow(body, path="/v1/messages", key=None, headers={"x-api-key": KEY})
    await harness.send(f)
    assert f.request.headers["x-api-key"] == REAL
    # Anthropic requests are not given OpenAI token flags.
    assert json.loads(f.request.content or b"") == body
    await harness.reply_json(
        f,
        {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "yo"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    )
    (rec,) = await daemon.records()
    assert rec.api == "anthropic_messages"
    assert rec.finish_reason == "end_turn"
    assert rec.prompt_token_ids is None
    assert rec.injected == ()


@pytest.mark.parametrize("key", [f"sk-sclate-{RUN}-nope", "sk-not-ours", None])
async def test_wrong_or_missing_key_is_answered_locally(
    harness: Harness, daemon: FakeDaemon, key: str | None
) -> None:
    f = harness.flow(key=key)
    await harness.send(f)
    assert f.response is not None and f.response.status_code == 401
    # Never forwarded with the real key, never recorded, no lease taken.
    assert REAL not in str(f.request.headers)
    harness.addon.response(f)
    await harness.addon.flush()
    assert await daemon.records() == []
    assert daemon.of_type("call_start") == []


# -- record contents ------------------------------------------------------------------


async def test_record_fields_for_a_plain_json_call(harness: Harness, daemon: FakeDaemon) -> None:
    f = harness.flow()
    await harness.send(f)
    await harness.reply_json(f, VLLM_CHAT_RESPONSE)
    (rec,) = await daemon.records()
    assert isinstance(rec, CallRecord)
    assert rec.api == "openai_chat" and rec.model == "m1" and rec.status == 200
    assert rec.sampling == {
        "temperature": 0.7,
        "max_tokens": 16,
        "seed": 3,
        "logprobs": True,
    }
    assert rec.prompt_token_ids == (1, 2, 3, 4)
    assert rec.completion_token_ids == (10, 11)
    assert rec.completion_logprobs == (-0.5, -0.25)
    assert rec.finish_reason == "stop" and rec.complete and rec.error is None
    assert rec.usage == VLLM_CHAT_RESPONSE["usage"]
    assert rec.response == VLLM_CHAT_RESPONSE
    assert rec.stream is False and rec.chunks == ()
    t = rec.timings
    assert t.first_byte_ns is not None and t.start_ns <= t.first_byte_ns <= t.end_ns
    assert rec.thread == derive_thread("openai_chat", CHAT_BODY)
    assert rec.thread_source == "derived" and rec.retry_of is None
    # Lease around the call, released at the end.
    assert [m["call_id"] for m in daemon.of_type("call_start")] == [rec.call_id]
    assert daemon.of_type("call_start")[0]["role"] == "agent"
    assert daemon.leases.acquired[0][0] == f"model-call:{rec.call_id}"
    assert daemon.leases.released == [f"model-call:{rec.call_id}"]
    assert os.listdir(harness.spool) == []


async def test_token_flags_injected_only_when_absent(harness: Harness, daemon: FakeDaemon) -> None:
    f = harness.flow()
    await harness.send(f)
    sent = json.loads(f.request.content or b"")
    assert sent["return_token_ids"] is True and sent["logprobs"] is True
    assert {k: v for k, v in sent.items() if k not in ("return_token_ids", "logprobs")} == CHAT_BODY

    f2 = harness.flow(dict(CHAT_BODY, logprobs=False))
    await harness.send(f2)
    sent2 = json.loads(f2.request.content or b"")
    assert sent2["logprobs"] is False and sent2["return_token_ids"] is True

    f3 = harness.flow({"model": "m1", "prompt": "abc"}, path="/v1/completions")
    await harness.send(f3)
    sent3 = json.loads(f3.request.content or b"")
    assert sent3["logprobs"] == 0 and sent3["return_token_ids"] is True

    await harness.reply_json(f, VLLM_CHAT_RESPONSE)
    (rec,) = await daemon.records()
    assert rec.injected == ("return_token_ids", "logprobs")
    assert rec.request["return_token_ids"] is True

    harness.tctx.options.update(sclate_request_tokens=False)  # type: ignore[no-untyped-call]
    f4 = harness.flow()
    original = f4.request.content
    await harness.send(f4)
    assert f4.request.content == original


async def test_sse_chunks_pass_through_unchanged_in_order(
    harness: Harness, daemon: FakeDaemon
) -> None:
    f = harness.flow(dict(CHAT_BODY, stream=True))
    await harness.send(f)
    body = sse(
        {
            "id": "c",
            "model": "m1",
            "prompt_token_ids": [1, 2, 3],
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "héllo "},
                    "token_ids": [7, 8],
                    "logprobs": {"content": [{"logprob": -0.1}, {"logprob": -0.2}]},
                }
            ],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "wörld"},
                    "token_ids": [9],
                    "logprobs": {"content": [{"logprob": -0.3}]},
                    "finish_reason": "stop",
                }
            ],
        },
        "[DONE]",
    )
    # Cut through the middle of a multi-byte character and of an event.
    cut1 = body.index("é".encode()) + 1
    cut2 = body.index(b"w\xc3\xb6rld") + 3
    pieces = [body[:cut1], body[cut1:cut2], body[cut2:]]
    stream = harness.start_sse(f)
    passed = []
    for p in pieces:
        out = stream(p)
        passed.append(out)
        await asyncio.sleep(0.002)
    assert stream(b"") == b""
    assert passed == pieces  # same bytes, same boundaries, same order

    harness.addon.response(f)
    await harness.addon.flush()
    (rec,) = await daemon.records()
    assert rec.stream is True
    assert len(rec.chunks) == 3
    assert "".join(c.text for c in rec.chunks) == body.decode()
    assert [c.size for c in rec.chunks] == [len(p) for p in pieces]
    times = [c.t_ns for c in rec.chunks]
    assert times == sorted(times) and times[0] < times[-1]
    assert rec.timings.first_byte_ns is not None
    assert rec.timings.first_byte_ns <= times[0] <= rec.timings.end_ns
    assert rec.prompt_token_ids == (1, 2, 3)
    assert rec.completion_token_ids == (7, 8, 9)
    assert rec.completion_logprobs == (-0.1, -0.2, -0.3)
    assert rec.response["choices"][0]["message"]["content"] == "héllo wörld"
    assert rec.finish_reason == "stop" and rec.complete


async def test_cut_stream_then_retry_is_marked_and_not_a_sample(
    harness: Harness, daemon: FakeDaemon
) -> None:
    body = dict(CHAT_BODY, stream=True)
    f = harness.flow(body)
    await harness.send(f)
    stream = harness.start_sse(f)
    stream(
        sse({"id": "c", "prompt_token_ids": [1, 2], "choices": [{"index": 0, "token_ids": [5]}]})
    )
    f.error = tflow.terr("connection closed by peer")
    harness.addon.error(f)
    await harness.addon.flush()

    f2 = harness.flow(body)
    await harness.send(f2)
    stream2 = harness.start_sse(f2)
    stream2(
        sse(
            {
                "id": "d",
                "prompt_token_ids": [1, 2],
                "choices": [{"index": 0, "token_ids": [5, 6], "finish_reason": "stop"}],
            },
            "[DONE]",
        )
    )
    harness.addon.response(f2)
    await harness.addon.flush()

    # A different body in the same thread is a new call, not a retry.
    f3 = harness.flow(dict(body, temperature=0.1))
    await harness.send(f3)
    await harness.reply_json(f3, VLLM_CHAT_RESPONSE)

    recs = {r.call_id: r for r in await daemon.records()}
    first = next(r for r in recs.values() if r.error)
    assert not first.complete and "connection closed" in (first.error or "")
    retry = next(r for r in recs.values() if r.retry_of)
    assert retry.retry_of == first.call_id and retry.complete
    third = next(r for r in recs.values() if r.call_id not in (first.call_id, retry.call_id))
    assert third.retry_of is None

    traj = build_trajectories(recs.values())
    assert traj.skipped_retries == [retry.call_id]
    assert traj.skipped_failed == [first.call_id]
    assert [s.call_ids for s in traj.samples] == [(third.call_id,)]


# -- delivery ---------------------------------------------------------------------------


async def test_spooled_while_daemon_away_then_redelivered_once(
    harness: Harness, daemon: FakeDaemon
) -> None:
    await daemon.stop()
    f = harness.flow()
    await harness.send(f)
    await harness.reply_json(f, VLLM_CHAT_RESPONSE)
    spooled = sorted(os.listdir(harness.spool))
    assert len(spooled) == 1 and spooled[0].endswith(".json")
    call_id = spooled[0][: -len(".json")]
    on_disk = json.loads((harness.spool / spooled[0]).read_text())
    assert on_disk["call_id"] == call_id

    await daemon.start()
    harness.addon.running()  # the background redelivery loop
    for _ in range(200):
        if not os.listdir(harness.spool):
            break
        await asyncio.sleep(0.02)
    assert os.listdir(harness.spool) == []
    assert [r.call_id for r in await daemon.records()] == [call_id]

    # A record re-sent after the daemon stored it (e.g. the ok reply was
    # lost) is acknowledged but not stored twice.
    harness.addon.spool.write(call_id, json.dumps(on_disk))
    assert await harness.addon.redeliver() == 1
    assert os.listdir(harness.spool) == []
    assert daemon.stored_flags == [True, False]
    assert len(await daemon.records()) == 1


async def test_invalid_record_moves_to_rejected(harness: Harness, daemon: FakeDaemon) -> None:
    bad = {"call_id": "c-bad", "run": RUN}  # missing required fields
    harness.addon.spool.write("c-bad", json.dumps(bad))
    assert await harness.addon.redeliver() == 0
    assert not (harness.spool / "c-bad.json").exists()
    assert (harness.spool / "rejected" / "c-bad.json").exists()
    assert await daemon.records() == []
