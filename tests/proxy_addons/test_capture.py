"""The addon's hooks in memory (mitmproxy's test helpers), with a real
Unix-socket control server on the other side: attribution, the key swap,
record contents, streams passed through, retries, delivery and the spool."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from mitmproxy.test import tflow

from proxy_addons._attribution import derive_thread
from sclated.capture import CallRecord, build_trajectories
from tests.capture.fake_daemon import FakeDaemon
from tests.proxy_addons.harness import CHAT_BODY, KEY, REAL, RUN, VLLM_CHAT_RESPONSE, Harness, sse

# -- attribution and secrets ------------------------------------------------------------


async def test_role_from_listener_port_and_key_swapped(harness: Harness, daemon: FakeDaemon) -> None:
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
    # Anthropic requests ask for token ids and logprobs in their own spelling.
    assert json.loads(f.request.content or b"") == {**body, "return_token_ids": True, "logprobs": True}
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
    assert rec.injected == ("return_token_ids", "logprobs")


@pytest.mark.parametrize("key", [f"sk-sclate-{RUN}-nope", "sk-not-ours", None])
async def test_wrong_or_missing_key_is_answered_locally(harness: Harness, daemon: FakeDaemon, key: str | None) -> None:
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


async def test_sse_chunks_pass_through_unchanged_in_order(harness: Harness, daemon: FakeDaemon) -> None:
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


async def test_cut_stream_then_retry_is_marked_and_not_a_sample(harness: Harness, daemon: FakeDaemon) -> None:
    body = dict(CHAT_BODY, stream=True)
    f = harness.flow(body)
    await harness.send(f)
    stream = harness.start_sse(f)
    stream(sse({"id": "c", "prompt_token_ids": [1, 2], "choices": [{"index": 0, "token_ids": [5]}]}))
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


async def test_a_client_that_left_after_the_final_event_made_a_whole_call(harness: Harness, daemon: FakeDaemon) -> None:
    # Codex drops its connection once it has read response.completed/incomplete,
    # sometimes before the stream's end reaches the proxy.
    body = dict(CHAT_BODY, stream=True)
    f = harness.flow(body)
    await harness.send(f)
    stream = harness.start_sse(f)
    stream(
        sse(
            {
                "id": "c",
                "prompt_token_ids": [1, 2],
                "choices": [{"index": 0, "token_ids": [5], "finish_reason": "stop"}],
            },
            "[DONE]",
        )
    )
    f.error = tflow.terr("Client disconnected.")
    harness.addon.error(f)
    # The same client leaving before the final event: a cut call, as before.
    f2 = harness.flow(dict(body, temperature=0.3))
    await harness.send(f2)
    harness.start_sse(f2)(sse({"id": "d", "prompt_token_ids": [1, 2], "choices": [{"index": 0, "token_ids": [5]}]}))
    f2.error = tflow.terr("Client disconnected.")
    harness.addon.error(f2)
    await harness.addon.flush()

    whole, cut = sorted(await daemon.records(), key=lambda r: r.timings.start_ns)
    assert whole.complete and whole.error is None
    assert any("client left after the final event" in w for w in whole.warnings)
    assert not cut.complete and cut.error == "Client disconnected."


# -- delivery ---------------------------------------------------------------------------


async def test_spooled_while_daemon_away_then_redelivered_once(harness: Harness, daemon: FakeDaemon) -> None:
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


async def test_a_spooled_record_the_schema_refuses_is_set_aside_at_once(
    harness: Harness, daemon: FakeDaemon, caplog: pytest.LogCaptureFixture
) -> None:
    bad = {"call_id": "c-bad", "run": RUN}  # missing required fields
    harness.addon.spool.write("c-bad", json.dumps(bad))
    assert await harness.addon.redeliver() == 0
    assert not (harness.spool / "c-bad.json").exists()
    assert (harness.spool / "rejected" / "c-bad.json").exists()
    assert daemon.of_type("record") == []  # refused here, never sent
    assert "c-bad" in caplog.text and "role is required" in caplog.text


async def test_a_record_the_daemon_refuses_moves_to_rejected(harness: Harness, daemon: FakeDaemon) -> None:
    f = harness.flow()
    await harness.send(f)
    await harness.reply_json(f, VLLM_CHAT_RESPONSE)
    sent = daemon.of_type("record")[0]["record"]
    # Valid by the schema, but it names another run than the socket's.
    other = dict(sent, call_id="c-other", run="someone-else")
    harness.addon.spool.write("c-other", json.dumps(other))
    assert await harness.addon.redeliver() == 0
    assert (harness.spool / "rejected" / "c-other.json").exists()
    assert len(daemon.of_type("record")) == 2 and len(await daemon.records()) == 1


@pytest.mark.parametrize("path", ["/api/tags", "/v1/models", "/v1/props"])
async def test_a_get_is_passed_through_without_a_lease_or_a_record(
    harness: Harness, daemon: FakeDaemon, path: str
) -> None:
    f = harness.flow(path=path)
    f.request.method = "GET"
    await harness.send(f)
    assert f.response is None  # forwarded, not answered here
    assert f.request.headers["authorization"] == f"Bearer {REAL}"
    await harness.reply_json(f, {"error": "not found"}, status=404)
    # A model call after it is recorded: the GET left nothing behind.
    g = harness.flow()
    await harness.send(g)
    await harness.reply_json(g, VLLM_CHAT_RESPONSE)
    (rec,) = await daemon.records()
    assert rec.path == "/v1/chat/completions"
