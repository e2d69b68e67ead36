"""`sclated bench fuzz`, the capture proxy part: malformed upstream responses.

A real ``mitmdump`` with the real capture addon (``proxy_addons/capture.py``)
runs on the host in reverse mode in front of an upstream started here, a raw
asyncio server that answers each call with the fault its ``x-fuzz-fault``
header names, in the shape of OpenAI chat completions, OpenAI Responses or
Anthropic messages, streamed or not: truncated event streams, streams with no
final event or garbage events or fields of the wrong types, HTML or invalid
JSON for a JSON endpoint, 50 MB bodies, connections reset mid-body, a
slow-loris body, broken chunked encoding, a 500 with HTML, ... The addon's
records reach a run's real control socket (a :class:`~sclated.sandbox.SandboxSession`
served without a container, its capture sink writing to a real SQLite store).

For each case: the client (aiohttp, in this process) must get an answer or a
connection error in time; the call must be recorded, as failed with a cause
(:func:`~sclated.capture.failure_cause`; the control case ``ok`` as complete);
its clock lease must be released; mitmdump must still run and answer the next
call. Counted: ``crashes`` (mitmdump exited or stopped answering, the client
hung), ``internal_errors`` (no record, a record not failed or without a cause,
a lease left held, a traceback or addon error in mitmdump's log).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import secrets
import socket
import struct
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from sclated.bench._fuzz_part import Tally as _Tally
from sclated.bench._fuzz_part import main
from sclated.bench._proxy import mitmdump_on_host
from sclated.capture import failure_cause
from sclated.clock import ClockConfig, ClockMode, SimClock
from sclated.errors import FailedPrecondition
from sclated.model import EmbeddedModel
from sclated.runtime import Limits
from sclated.sandbox import SandboxOptions, SandboxServices, SandboxSession, SessionConfig
from sclated.store import Store

__all__ = ["run"]

RUN = "fuzz-proxy"
APIS = {
    "openai_chat": "/v1/chat/completions",
    "openai_responses": "/v1/responses",
    "anthropic_messages": "/v1/messages",
}
HUGE_BYTES = 50 * 1024 * 1024
CLIENT_TIMEOUT_S = 15.0
SLOW_CLIENT_TIMEOUT_S = 1.5
RECORD_WAIT_S = 8.0


# -- well-formed answers, per API -------------------------------------------------------------


def _body(api: str, text: str = "ok") -> dict[str, Any]:
    if api == "openai_chat":
        return {
            "id": "c1",
            "object": "chat.completion",
            "model": "m",
            "prompt_token_ids": [1, 2, 3],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                    "token_ids": [7],
                    "logprobs": {"content": [{"token": "ok", "logprob": -0.1}]},
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        }
    if api == "openai_responses":
        return {
            "id": "r1",
            "object": "response",
            "status": "completed",
            "model": "m",
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}],
            "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
        }
    return {
        "id": "msg1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }


def _sse(name: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {name}\n" if name else "").encode() + f"data: {payload}\n\n".encode()


def _events(api: str, text: str = "ok") -> tuple[list[bytes], bytes]:
    """A stream's events, and its final event (what says it ended)."""
    if api == "openai_chat":
        head = {"id": "s1", "model": "m", "prompt_token_ids": [1, 2, 3]}
        return [
            _sse(None, {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]}),
            _sse(None, {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "token_ids": [7]}]}),
        ], _sse(None, "[DONE]")
    if api == "openai_responses":
        resp = _body(api, text)
        return [
            _sse("response.created", {"type": "response.created", "response": {**resp, "status": "in_progress"}}),
            _sse("response.output_text.delta", {"type": "response.output_text.delta", "delta": text}),
        ], _sse("response.completed", {"type": "response.completed", "response": resp})
    msg = {k: v for k, v in _body(api, text).items() if k != "content"}
    return [
        _sse("message_start", {"type": "message_start", "message": {**msg, "content": []}}),
        _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}),
        _sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        ),
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}),
    ], _sse("message_stop", {"type": "message_stop"})


def _wrong_types(api: str) -> dict[str, Any]:
    if api == "openai_chat":
        return {"choices": "none", "usage": [1], "prompt_token_ids": "1,2"}
    if api == "openai_responses":
        return {"output": {"type": "message"}, "status": 7, "usage": "many"}
    return {"content": "text", "stop_reason": ["x"], "usage": 3}


def _bad_events(api: str) -> list[bytes]:
    """Events of the right shape with fields of the wrong types (and an index bomb)."""
    if api == "openai_chat":
        return [
            _sse(None, {"choices": [{"index": "zero", "delta": {"content": "a"}}]}),
            _sse(None, {"choices": [{"index": None, "delta": {"content": 5}}]}),
            _sse(None, {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 10**9, "function": {}}]}}]}),
            _sse(None, {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "1", "function": {}}]}}]}),
            _sse(None, {"choices": [{"index": 10**12, "delta": {"content": "a"}}]}),
            _sse(None, {"choices": [{"index": 0, "logprobs": {"content": "x"}, "token_ids": "7"}]}),
            _sse(None, "[DONE]"),
        ]
    if api == "openai_responses":
        return [
            _sse("response.created", {"type": "response.created", "response": "started"}),
            _sse("response.completed", {"type": "response.completed", "response": {"output": "x", "usage": 3}}),
        ]
    return [
        _sse("message_start", {"type": "message_start", "message": "m"}),
        _sse("content_block_start", {"type": "content_block_start", "index": "one", "content_block": {}}),
        _sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 5}},
        ),
        _sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": 10**12, "delta": {"type": "input_json_delta"}},
        ),
        _sse("message_delta", {"type": "message_delta", "delta": "stop", "usage": [1]}),
        _sse("message_stop", {"type": "message_stop"}),
    ]


# -- the upstream ------------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def api(self) -> str:
        for api, path in APIS.items():
            if self.path.split("?", 1)[0].endswith(path):
                return api
        return "other"

    @property
    def stream(self) -> bool:
        with contextlib.suppress(ValueError, RecursionError, AttributeError):
            return bool(json.loads(self.body).get("stream"))
        return False


Writer = asyncio.StreamWriter


def _head(status: str, ctype: str, extra: str = "", length: int | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"content-type: {ctype}", "connection: close"]
    if length is not None:
        lines.append(f"content-length: {length}")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _send_json(w: Writer, body: bytes, status: str = "200 OK", ctype: str = "application/json") -> None:
    w.write(_head(status, ctype, length=len(body)) + body)
    await w.drain()


async def _send_stream(w: Writer, events: list[bytes], *, end: bool = True) -> None:
    w.write(_head("200 OK", "text/event-stream", "transfer-encoding: chunked"))
    for e in events:
        w.write(_chunk(e))
        await w.drain()
    if end:
        w.write(b"0\r\n\r\n")
        await w.drain()


def _reset(w: Writer) -> None:
    """Abort with a TCP reset (SO_LINGER 0), not an orderly close."""
    sock = w.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    w.transport.abort()


async def _ok(w: Writer, r: Request) -> None:
    if r.stream:
        events, final = _events(r.api)
        await _send_stream(w, [*events, final])
    else:
        await _send_json(w, json.dumps(_body(r.api)).encode())


async def _truncated_sse(w: Writer, r: Request) -> None:
    events, final = _events(r.api)
    await _send_stream(w, [*events, final[: len(final) // 2]], end=False)
    _reset(w)


async def _sse_no_final(w: Writer, r: Request) -> None:
    await _send_stream(w, _events(r.api)[0][:1])  # (a chat choice's finish_reason also ends it)


async def _sse_garbage(w: Writer, r: Request) -> None:
    junk = [
        b"data: {not json\n\n",
        b"event: \n\n",
        b"data: \xff\xfe\xfd\n\n",
        b": comment only\n\n",
        b"\x00\x01\x02\n\n",
    ]
    await _send_stream(w, junk)


async def _sse_wrong_types(w: Writer, r: Request) -> None:
    await _send_stream(w, _bad_events(r.api))


async def _sse_giant_event(w: Writer, r: Request) -> None:
    """One event of 20 MB that never ends (no blank line), then the stream ends."""
    piece = b"data: " + b"x" * (1024 * 1024 - 6)
    await _send_stream(w, [piece] + [b"x" * (1024 * 1024)] * 19)


async def _huge(w: Writer, r: Request) -> None:
    if r.stream:
        events, final = _events(r.api, "x" * (1024 * 1024))
        await _send_stream(w, [*events * 25, final])  # ~50 MB of events
        return
    await _send_json(w, json.dumps(_body(r.api, "x" * HUGE_BYTES)).encode())


async def _html(w: Writer, r: Request) -> None:
    await _send_json(w, b"<html><body><h1>Welcome to nginx!</h1></body></html>", ctype="text/html")


async def _invalid_json(w: Writer, r: Request) -> None:
    await _send_json(w, b'{"choices": [{"message": {"content": "o')


async def _wrong_types_json(w: Writer, r: Request) -> None:
    await _send_json(w, json.dumps(_wrong_types(r.api)).encode())


async def _deep_json(w: Writer, r: Request) -> None:
    await _send_json(w, b"[" * 200_000 + b"]" * 200_000)


async def _huge_integer(w: Writer, r: Request) -> None:
    await _send_json(w, b'{"usage": {"prompt_tokens": ' + b"9" * 10_000 + b"}}")


async def _nan_json(w: Writer, r: Request) -> None:
    body = json.dumps(_body(r.api)).replace('"total_tokens": 4', '"total_tokens": NaN')
    body = body.replace('"output_tokens": 1}', '"output_tokens": Infinity}')
    await _send_json(w, body.encode())


async def _empty(w: Writer, r: Request) -> None:
    await _send_json(w, b"")


async def _invalid_utf8(w: Writer, r: Request) -> None:
    if r.stream:
        await _send_stream(w, [b'data: {"choices": [\xff\xfe]}\n\n', b"data: \xc3\n\n"])
    else:
        await _send_json(w, b'{"id": "\xff\xfe\xfd"}')


async def _gzip_lie(w: Writer, r: Request) -> None:
    body = json.dumps(_body(r.api)).encode()
    w.write(_head("200 OK", "application/json", "content-encoding: gzip", length=len(body)) + body)
    await w.drain()


async def _reset_mid_body(w: Writer, r: Request) -> None:
    if r.stream:
        events, _ = _events(r.api)
        await _send_stream(w, events[:1], end=False)
    else:
        w.write(_head("200 OK", "application/json", length=100_000) + b'{"choices": [')
        await w.drain()
    await asyncio.sleep(0.05)
    _reset(w)


async def _slow_loris(w: Writer, r: Request) -> None:
    w.write(_head("200 OK", "text/event-stream" if r.stream else "application/json", length=10_000))
    await w.drain()
    for _ in range(20):
        w.write(b" ")
        await w.drain()
        await asyncio.sleep(0.25)
    _reset(w)


async def _bad_chunked(w: Writer, r: Request) -> None:
    ctype = "text/event-stream" if r.stream else "application/json"
    w.write(_head("200 OK", ctype, "transfer-encoding: chunked") + b"zz\r\nnot a chunk\r\n0\r\n\r\n")
    await w.drain()


async def _error_500_html(w: Writer, r: Request) -> None:
    await _send_json(w, b"<html><body>Internal Server Error</body></html>", "500 Internal Server Error", "text/html")


async def _close_at_once(w: Writer, r: Request) -> None:
    w.close()


async def _not_http(w: Writer, r: Request) -> None:
    w.write(b"SSH-2.0-OpenSSH_9.6\r\n\x00\x01garbage")
    await w.drain()
    w.close()


async def _json_for_stream(w: Writer, r: Request) -> None:
    await _send_json(w, json.dumps(_body(r.api)).encode())


Fault = Callable[[Writer, Request], Awaitable[None]]


@dataclass(frozen=True)
class FaultSpec:
    run: Fault
    streams: tuple[bool, ...]
    """Which calls get it: streamed, not, or both."""
    failed: bool = True
    """The call must be recorded as failed (False: as complete)."""
    slow: bool = False
    """The client gives up first (it waits SLOW_CLIENT_TIMEOUT_S)."""
    headers: tuple[tuple[str, str], ...] = ()
    """What the (hostile) client adds to its request's headers."""
    body: bytes | None = None
    """The client's request body instead of a well-formed one."""


BOTH = (False, True)
FAULTS: dict[str, FaultSpec] = {
    "ok": FaultSpec(_ok, BOTH, failed=False),
    "truncated_sse": FaultSpec(_truncated_sse, (True,)),
    "sse_no_final_event": FaultSpec(_sse_no_final, (True,)),
    "sse_garbage": FaultSpec(_sse_garbage, (True,)),
    "sse_wrong_types": FaultSpec(_sse_wrong_types, (True,)),
    "sse_giant_unterminated_event": FaultSpec(_sse_giant_event, (True,)),
    "json_for_a_stream": FaultSpec(_json_for_stream, (True,), failed=False),
    "html_for_json": FaultSpec(_html, BOTH),
    "invalid_json": FaultSpec(_invalid_json, BOTH),
    "wrong_types": FaultSpec(_wrong_types_json, (False,)),
    "deep_json": FaultSpec(_deep_json, (False,)),
    "huge_integer": FaultSpec(_huge_integer, (False,)),
    "nan_json": FaultSpec(_nan_json, (False,), failed=False),
    "empty_200": FaultSpec(_empty, BOTH),
    "invalid_utf8": FaultSpec(_invalid_utf8, BOTH),
    "gzip_lie": FaultSpec(_gzip_lie, (False,)),
    "huge_body_50mb": FaultSpec(_huge, BOTH),
    "reset_mid_body": FaultSpec(_reset_mid_body, BOTH),
    "slow_loris": FaultSpec(_slow_loris, BOTH, slow=True),
    "bad_chunked": FaultSpec(_bad_chunked, BOTH),
    "error_500_html": FaultSpec(_error_500_html, BOTH),
    "close_before_headers": FaultSpec(_close_at_once, BOTH),
    "not_http": FaultSpec(_not_http, (False,)),
    # What the agent itself sends (the upstream answers well): still recorded, never passed on uncaptured.
    "client_turn_header_of_5000_digits": FaultSpec(_ok, BOTH, failed=False, headers=(("x-sclate-turn", "9" * 5000),)),
    "client_thread_header_of_64_kib": FaultSpec(
        _ok, (False,), failed=False, headers=(("x-sclate-parent-thread", "t" * 65536),)
    ),
    "client_body_deeply_nested": FaultSpec(
        _ok, (False,), failed=False, body=b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    ),
    "client_body_not_json": FaultSpec(_ok, (False,), failed=False, body=b"hello, model"),
    "client_body_invalid_utf8": FaultSpec(_ok, (False,), failed=False, body=b'{"model": "\xff\xfe", "messages": []}'),
}


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    first, *rest = head.decode("latin-1").split("\r\n")
    method, path, _ = [*first.split(" "), "", ""][:3]
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in rest if h)}
    body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
    return Request(method, path, headers, body)


class Upstream:
    """The faulty model server: one request per connection, answered as its header says."""

    def __init__(self) -> None:
        self.server: asyncio.AbstractServer | None = None
        self.port = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0, limit=2**20)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            req = await _read_request(reader)
            if req is None:
                return
            fault = FAULTS.get(req.headers.get("x-fuzz-fault", "ok"), FAULTS["ok"])
            await fault.run(writer, req)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for t in list(self._tasks):
                t.cancel()
            with contextlib.suppress(Exception):
                await self.server.wait_closed()


# -- the run's control socket -------------------------------------------------------------------


class _Capture:
    """A run's control socket as the daemon serves it (a session without a container)."""

    def __init__(self, tmp: Path) -> None:
        self.store = Store(tmp / "sclated.db")
        self.services = SandboxServices(
            state_dir=tmp,
            daemon_id="sclated-fuzz-proxy",
            store=self.store,
            model=EmbeddedModel(log_path=tmp / "model.log"),
            sockets_dir=tmp / "sockets",
        )
        self.clock = SimClock(ClockConfig(ClockMode.HYBRID, start_ns=1_924_992_000 * 1_000_000_000))
        self.failures: list[str] = []

        async def no_wait(until_ns: int) -> int:
            raise FailedPrecondition("no waits in this bench")

        self.session = SandboxSession(
            self.services,
            SessionConfig(
                run_key=f"fuzz/{RUN}",
                tenant="fuzz",
                run_id=RUN,
                image="",
                model_base_url="",
                model_name="",
                limits=Limits(),
                options=SandboxOptions(probe=False),
            ),
            clock=self.clock,
            leases=self.clock.leases,
            on_wait=no_wait,
            fail_run=self.failures.append,
        )
        self.path = self.session.control_dir / "sclate.sock"
        self._changed = asyncio.Event()
        self.clock.leases.add_listener(lambda change: self._changed.set())

    async def start(self) -> None:
        await self.store.open()
        await asyncio.to_thread(self.path.parent.mkdir, parents=True, exist_ok=True)
        await self.session.start_control(self.path)

    async def record(self, thread: str, timeout_s: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while True:
            for rec in await self.store.calls(f"fuzz/{RUN}"):
                if rec.get("thread") == thread:
                    return rec
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.05)

    def model_call_leases(self) -> set[str]:
        return {n for n in self.clock.leases.counts() if n.startswith("model-call:")}

    async def leases_released(self, left: set[str], timeout_s: float = 5.0) -> bool:
        """Whether every model call's lease (but those in ``left``) is released in time."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while self.model_call_leases() - left:
                    self._changed.clear()
                    await self._changed.wait()
        return not self.model_call_leases() - left

    async def close(self) -> None:
        await self.session.close()
        await self.services.close()
        await self.store.close()


# -- the cases ---------------------------------------------------------------------------------


@dataclass
class Tally(_Tally):
    causes: dict[str, int] = field(default_factory=dict)
    """Recorded calls by failure cause (``none``: complete)."""


def _request_body(api: str, stream: bool, rng: random.Random) -> dict[str, Any]:
    words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(rng.randint(1, 8)))
    if api == "openai_responses":
        return {"model": "m", "input": words, "stream": stream}
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": words}], "stream": stream}
    if api == "anthropic_messages":
        body["max_tokens"] = 16
    return body


@dataclass
class Outcome:
    status: int | None
    size: int
    error: str | None
    seconds: float


async def call(
    http: aiohttp.ClientSession,
    port: int,
    key: str,
    api: str,
    stream: bool,
    fault: str,
    thread: str,
    timeout_s: float,
    rng: random.Random,
) -> Outcome:
    spec = FAULTS[fault]
    headers = {
        "x-fuzz-fault": fault,
        "x-sclate-thread": thread,
        "content-type": "application/json",
        **dict(spec.headers),
    }
    if api == "anthropic_messages":
        headers["x-api-key"] = key
    else:
        headers["authorization"] = f"Bearer {key}"
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            async with http.post(
                f"http://127.0.0.1:{port}{APIS[api]}",
                data=spec.body if spec.body is not None else json.dumps(_request_body(api, stream, rng)),
                headers=headers,
                auto_decompress=False,
            ) as resp:
                size = 0
                async for piece in resp.content.iter_any():
                    size += len(piece)
                return Outcome(resp.status, size, None, time.monotonic() - t0)
    except TimeoutError:
        return Outcome(None, 0, "timeout", time.monotonic() - t0)
    except (aiohttp.ClientError, ConnectionError) as exc:
        return Outcome(None, 0, f"{type(exc).__name__}: {exc}"[:200], time.monotonic() - t0)


def _log_errors(text: str) -> list[str]:
    markers = ("Traceback", "Addon error", "Error in", "exception", "Exception")
    return [ln for ln in text.splitlines() if any(m in ln for m in markers)]


async def run(
    args: argparse.Namespace,
    seed: int,
    *,
    faults: Sequence[str] | None = None,
    addon: bool = True,
    record_wait_s: float = RECORD_WAIT_S,
) -> dict[str, Any]:
    """Every fault (or those named), for every API, streamed and not, through mitmdump and
    the addon (``addon=False``: mitmdump alone, which records nothing: every case is then
    found wanting)."""
    rng = random.Random(seed)
    tally = Tally()
    started = time.monotonic()
    chosen = {name: spec for name, spec in FAULTS.items() if faults is None or name in faults}
    cases = [(name, api, stream) for name, spec in chosen.items() for api in APIS for stream in spec.streams]
    rng.shuffle(cases)
    secret = secrets.token_hex(8)
    with tempfile.TemporaryDirectory(prefix="sclate-fuzz-proxy-") as tmp_s:
        tmp = Path(tmp_s)
        capture = _Capture(tmp)
        upstream = Upstream()
        try:
            await capture.start()
            url = await upstream.start()
            async with (
                mitmdump_on_host(
                    tmp / "mitm", capture.path, secret, [url], addon=addon, options=("connection_strategy=lazy",)
                ) as (proc, (port,)),
                aiohttp.ClientSession() as http,
            ):
                proxy = _Proxy(proc, port, f"sk-sclate-{RUN}-{secret}", tmp / "mitm" / "mitmdump.log", http)
                for i, (name, api, stream) in enumerate(cases):
                    tally.cases += 1
                    if not await _throw(proxy, capture, tally, rng, i, name, api, stream, record_wait_s):
                        break
        finally:
            await upstream.close()
            await capture.close()
    return {
        **tally.result(),
        "failure_causes": dict(sorted(tally.causes.items())),
        "seconds": round(time.monotonic() - started, 1),
    }


@dataclass
class _Proxy:
    proc: asyncio.subprocess.Process
    port: int
    key: str
    log: Path
    http: aiohttp.ClientSession
    log_seen: int = 0
    left: set[str] = field(default_factory=set)
    """Leases already reported as never released."""


async def _throw(
    proxy: _Proxy,
    capture: _Capture,
    tally: Tally,
    rng: random.Random,
    i: int,
    name: str,
    api: str,
    stream: bool,
    record_wait_s: float,
) -> bool:
    """One case; False when mitmdump is gone (the cases after it would mean nothing)."""
    spec = FAULTS[name]
    label = f"{name} {api}{' stream' if stream else ''}"
    thread = f"fuzz-{i}"
    timeout = SLOW_CLIENT_TIMEOUT_S if spec.slow else CLIENT_TIMEOUT_S
    out = await call(proxy.http, proxy.port, proxy.key, api, stream, name, thread, timeout, rng)
    if out.error == "timeout" and not spec.slow:
        tally.find("crashes", f"{label}: the client got no answer in {timeout:.0f} s")
    rec = await capture.record(thread, record_wait_s)
    if rec is None:
        tally.find("internal_errors", f"{label}: no record (client: {out.status or out.error})")
    else:
        cause = failure_cause(rec)
        tally.causes[cause or "none"] = tally.causes.get(cause or "none", 0) + 1
        if spec.failed and cause is None:
            tally.find(
                "internal_errors", f"{label}: recorded as a success (status {rec.get('status')}, client {out.status})"
            )
        elif not spec.failed and cause is not None:
            tally.find("internal_errors", f"{label}: recorded as failed ({cause}: {rec.get('error')})")
    if not await capture.leases_released(proxy.left):
        tally.find("internal_errors", f"{label}: the call's clock lease was never released")
        proxy.left.update(capture.model_call_leases())
    text = await asyncio.to_thread(proxy.log.read_text, errors="replace")
    errors = _log_errors(text[proxy.log_seen :])
    proxy.log_seen = len(text)
    if errors:
        tally.find("internal_errors", f"{label}: mitmdump logged {errors[0][:200]}")
    if proxy.proc.returncode is not None:
        tally.find("crashes", f"{label}: mitmdump exited ({proxy.proc.returncode})")
        return False
    probe = await call(proxy.http, proxy.port, proxy.key, "openai_chat", False, "ok", f"probe-{i}", 10, rng)
    if probe.status != 200:
        tally.find("crashes", f"after {label}: mitmdump does not answer ({probe.status or probe.error})")
        return False
    return True


if __name__ == "__main__":
    raise SystemExit(main("python -m sclated.bench._fuzz_proxy", run))
