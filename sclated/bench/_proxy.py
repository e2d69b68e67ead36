"""Capture-proxy benchmark: what the in-sandbox mitmdump + capture addon adds
to a model call.

Everything on the path is real: a ``mitmdump`` subprocess loading
``proxy_addons/capture.py`` in reverse mode (role ``agent``), a Unix-socket
control server here that answers ``call_start``/``call_end``/``record`` with
the daemon's own :class:`~sclated.capture.CaptureSink` and a real
:class:`~sclated.clock.LeaseTable`, and two upstreams:

- an *echo* upstream (aiohttp, in this process) that answers at once with
  vLLM-style token fields, so the proxy's own cost is not drowned in model
  noise; it also streams N SSE chunks at a fixed interval for the per-chunk
  figure;
- the embedded llama.cpp model (``sclated.model``), ``max_tokens`` 8 at
  temperature 0, for the cost as a user sees it.

Direct and proxied calls to the same upstream alternate (ABBA order) in one
run, so drift in machine load hits both sides alike; ``added`` figures are
medians of the per-pair differences.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from sclated.capture import CaptureSink, MemoryRecordStore
from sclated.clock import LeaseTable
from sclated.errors import SclateError

__all__ = ["bench_proxy"]

RUN = "bench-proxy"
ROLE = "agent"
MAX_TOKENS = 8
SSE_CHUNKS = 20
SSE_INTERVAL_S = 0.010
WARMUP_PAIRS = 3
RECORD_WAIT_S = 60.0

_NOTES = (
    "added_ms_p50 (and direct_/proxied_ms_p50) are the echo upstream's: it answers instantly, "
    "so the figure is the proxy's own overhead (mitmdump + capture addon + call_start round "
    "trip to the control socket). model_* are the same measurement against the embedded "
    "llama.cpp model (max_tokens 8, temperature 0), where model time dominates. added = median "
    "of per-pair (proxied - direct) differences, pairs run back to back in alternating order. "
    "sse_added_ms_per_chunk_p50: median over chunks i of (arrival of chunk i through the proxy "
    "- arrival of chunk i directly), each measured from its request's send (so it includes "
    "the request's own overhead), echo upstream streaming 20 chunks 10 ms apart; "
    "sse_transit_added_ms_per_chunk_p50 compares each chunk's transit (arrival - the "
    "upstream's send stamp) instead: the relay cost alone. plain_mitm_added_ms_p50 is mitmdump "
    "without the addon in front of the same echo upstream: the part of the overhead that is "
    "mitmproxy's own. model_pairs < calls: model calls take ~100x longer. "
    "plain_mitm_sse_added_ms_per_chunk_p50 is the SSE figure through mitmdump without the addon, which "
    "buffers a whole event stream (nothing sets flow.response.stream): the addon's tee makes chunks flow."
)


# -- the control socket the addon talks to ---------------------------------------------


class _ControlServer:
    """The daemon's side of ``/run/sclate/sclate.sock`` for one run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = MemoryRecordStore()
        self.leases = LeaseTable()
        self.sink = CaptureSink(self.store, self.leases)
        self.recorded: set[str] = set()
        self.complete: set[str] = set()
        self.with_token_ids: set[str] = set()
        self.errors: list[str] = []
        self._changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._handle, str(self.path), limit=2**26)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._conns):
                w.close()
            await self._server.wait_closed()
            self._server = None

    async def wait_recorded(self, n: int, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while len(self.recorded) < n:
                    self._changed.clear()
                    await self._changed.wait()

    async def _dispatch(self, msg: dict[str, Any]) -> dict[str, Any]:
        kind = msg.get("type")
        if kind == "hello":
            return {"run": RUN}
        if kind == "call_start":
            return await self.sink.on_call_start(RUN, msg)
        if kind == "call_end":
            return await self.sink.on_call_end(RUN, msg)
        if kind == "record":
            out = await self.sink.on_record(RUN, msg)
            rec = msg["record"]
            call_id = str(rec["call_id"])
            self.recorded.add(call_id)
            if rec.get("complete") and rec.get("error") is None:
                self.complete.add(call_id)
            comps = rec.get("completions") or []
            if rec.get("prompt_token_ids") and comps and comps[0].get("token_ids"):
                self.with_token_ids.add(call_id)
            self._changed.set()
            return out
        raise SclateError(f"unknown request type {kind!r}", reason="UNKNOWN_TYPE")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        try:
            while line := await reader.readline():
                msg = json.loads(line)
                reply: dict[str, Any] = {"id": msg.get("id")}
                try:
                    reply.update(ok=True, **await self._dispatch(msg))
                except SclateError as e:
                    self.errors.append(f"{e.reason}: {e.message}")
                    reply.update(ok=False, error=e.message, reason=e.reason)
                writer.write((json.dumps(reply) + "\n").encode())
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._conns.discard(writer)
            writer.close()


# -- the instant upstream ---------------------------------------------------------------


def _echo_body(model: str, n_prompt: int) -> dict[str, Any]:
    return {
        "id": "echo-1",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "prompt_token_ids": list(range(100, 100 + n_prompt)),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok ok ok"},
                "finish_reason": "length",
                "token_ids": [7] * MAX_TOKENS,
                "logprobs": {"content": [{"token": "ok", "logprob": -0.1}] * MAX_TOKENS},
            }
        ],
        "usage": {
            "prompt_tokens": n_prompt,
            "completion_tokens": MAX_TOKENS,
            "total_tokens": n_prompt + MAX_TOKENS,
        },
    }


async def _echo_chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    model = str(body.get("model", "echo"))
    if not body.get("stream"):
        return web.json_response(_echo_body(model, 12))
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    # Sleep to absolute deadlines so a late wake-up does not shift later chunks.
    start = time.monotonic()
    for i in range(SSE_CHUNKS):
        delay = start + i * SSE_INTERVAL_S - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        last = i == SSE_CHUNKS - 1
        chunk: dict[str, Any] = {
            "id": "echo-s",
            # Upstream and client share this process and its clock: arrival
            # minus this stamp is the chunk's transit time.
            "sent_at": time.perf_counter(),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "ok "},
                    "token_ids": [7],
                    "logprobs": {"content": [{"token": "ok", "logprob": -0.1}]},
                    "finish_reason": "length" if last else None,
                }
            ],
        }
        if i == 0:
            chunk["prompt_token_ids"] = list(range(100, 112))
        tail = "data: [DONE]\n\n" if last else ""
        await resp.write(f"data: {json.dumps(chunk)}\n\n{tail}".encode())
    await resp.write_eof()
    return resp


@contextlib.asynccontextmanager
async def _echo_upstream() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _echo_chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = int(runner.addresses[0][1])
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


# -- mitmdump -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _addon_path() -> Path:
    import proxy_addons

    return Path(proxy_addons.__file__).resolve().parent / "capture.py"


def _mitmdump_path() -> Path:
    exe = Path(sys.executable).with_name("mitmdump")
    if exe.exists():
        return exe
    found = shutil.which("mitmdump")
    if found is None:
        raise RuntimeError("mitmdump is not installed (it comes with the mitmproxy package)")
    return Path(found)


async def _wait_listening(port: int, proc: asyncio.subprocess.Process, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            break
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        w.close()
        return
    tail = (await asyncio.to_thread(log.read_text, errors="replace"))[-2000:]
    raise RuntimeError(f"mitmdump did not listen on {port} (exit {proc.returncode}):\n{tail}")


@contextlib.asynccontextmanager
async def _mitmdump(
    tmp: Path, control: Path, secret: str, upstreams: list[str], *, addon: bool = True
) -> AsyncIterator[tuple[asyncio.subprocess.Process, list[int]]]:
    """One mitmdump, one reverse listener (role agent) per upstream."""
    tmp.mkdir(exist_ok=True)
    ports = [_free_port() for _ in upstreams]
    args = [str(_mitmdump_path()), "-q", "--set", f"confdir={tmp / 'mitm'}"]
    if addon:
        args += ["-s", str(_addon_path())]
    for url, port in zip(upstreams, ports, strict=True):
        args += ["--mode", f"reverse:{url}@127.0.0.1:{port}"]
    env = dict(
        os.environ,
        SCLATE_RUN_SECRET=secret,
        SCLATE_CONTROL_SOCKET=str(control),
        SCLATE_SPOOL=str(tmp / "spool"),
        SCLATE_ROLES=",".join(f"{p}={ROLE}" for p in ports),
    )
    env.pop("SCLATE_UPSTREAM_API_KEY", None)
    log_path = tmp / "mitmdump.log"
    # A file, not a pipe: nobody reads mitmdump's output while it runs, and a
    # full pipe would stall the proxy mid-benchmark.
    log = await asyncio.to_thread(open, log_path, "wb")
    try:
        proc = await asyncio.create_subprocess_exec(*args, env=env, stdout=log, stderr=log)
    finally:
        log.close()
    try:
        for port in ports:
            await _wait_listening(port, proc, log_path)
        yield proc, ports
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def _vm_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


# -- measuring --------------------------------------------------------------------------


class _Client:
    """One keep-alive connection per target, as an agent's SDK client holds."""

    def __init__(self, base: str, key: str) -> None:
        self.url = f"{base}/v1/chat/completions"
        self.headers = {"authorization": f"Bearer {key}"}
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1),
            timeout=aiohttp.ClientTimeout(total=120),
        )

    async def close(self) -> None:
        await self.session.close()

    async def call(self, body: dict[str, Any]) -> float:
        """One non-streamed call, ms from send to the last body byte."""
        t0 = time.perf_counter()
        async with self.session.post(self.url, json=body, headers=self.headers) as r:
            await r.read()
            if r.status != 200:
                raise RuntimeError(f"{self.url}: HTTP {r.status}")
        return (time.perf_counter() - t0) * 1000

    async def stream(self, body: dict[str, Any]) -> tuple[list[float], list[float]]:
        """One streamed call: ms from send to each SSE event's arrival, and
        each event's transit (arrival minus the upstream's send stamp)."""
        t0 = time.perf_counter()
        arrivals: list[float] = []
        transits: list[float] = []
        async with self.session.post(self.url, json=body, headers=self.headers) as r:
            if r.status != 200:
                raise RuntimeError(f"{self.url}: HTTP {r.status}")
            while True:
                try:
                    event = await r.content.readuntil(b"\n\n")
                except asyncio.IncompleteReadError:
                    break
                if event.startswith(b"data: [DONE]"):
                    break
                if event.startswith(b"data:"):
                    now = time.perf_counter()
                    arrivals.append((now - t0) * 1000)
                    transits.append((now - json.loads(event[5:])["sent_at"]) * 1000)
        return arrivals, transits


def _chat_body(model: str, i: int, *, stream: bool = False) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": f"Say hello to user number {i}."},
        ],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": stream,
        # Asked for on both paths: the addon would add these on the proxied
        # one, and the model must do the same work either way.
        "return_token_ids": True,
        "logprobs": True,
    }


def _p(values: list[float], q: int) -> float:
    """The q-th percentile (1..99)."""
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def _paired(direct: _Client, proxied: _Client, model: str, pairs: int, counter: list[int]) -> dict[str, float]:
    d_ms: list[float] = []
    p_ms: list[float] = []
    diffs: list[float] = []
    for i in range(WARMUP_PAIRS + pairs):
        body = _chat_body(model, i)
        # ABBA: a slow drift (a neighbour's load, a GC) cannot favour one side.
        if i % 2 == 0:
            d = await direct.call(body)
            p = await proxied.call(body)
        else:
            p = await proxied.call(body)
            d = await direct.call(body)
        counter[0] += 1
        if i < WARMUP_PAIRS:
            continue
        d_ms.append(d)
        p_ms.append(p)
        diffs.append(p - d)
    return {
        "direct_ms_p50": statistics.median(d_ms),
        "proxied_ms_p50": statistics.median(p_ms),
        "added_ms_p50": statistics.median(diffs),
        "added_ms_p90": _p(diffs, 90),
        "direct_ms_p90": _p(d_ms, 90),
        "proxied_ms_p90": _p(p_ms, 90),
    }


async def _paired_sse(direct: _Client, proxied: _Client, streams: int, counter: list[int]) -> dict[str, float]:
    added: list[float] = []
    transit: list[float] = []
    for i in range(1 + streams):
        body = _chat_body("echo", i, stream=True)
        if i % 2 == 0:
            d, dt = await direct.stream(body)
            p, pt = await proxied.stream(body)
        else:
            p, pt = await proxied.stream(body)
            d, dt = await direct.stream(body)
        counter[0] += 1
        if len(d) != SSE_CHUNKS or len(p) != SSE_CHUNKS:
            raise RuntimeError(f"stream {i}: {len(d)} chunks direct, {len(p)} proxied")
        if i == 0:
            continue  # warm-up
        added += [pa - da for pa, da in zip(p, d, strict=True)]
        transit += [pa - da for pa, da in zip(pt, dt, strict=True)]
    return {
        "sse_added_ms_per_chunk_p50": statistics.median(added),
        "sse_added_ms_per_chunk_p90": _p(added, 90),
        "sse_transit_added_ms_per_chunk_p50": statistics.median(transit),
        "sse_transit_added_ms_per_chunk_p90": _p(transit, 90),
    }


async def bench_proxy(*, calls: int = 100, quick: bool = False, with_model: bool = True) -> dict[str, Any]:
    """Measure the capture proxy; see the module docstring. ``with_model=False``
    skips the embedded model (the echo upstream alone)."""
    if quick:
        calls = min(calls, 12)
    streams = max(2, calls // 5)
    secret = secrets.token_hex(16)
    key = f"sk-sclate-{RUN}-{secret}"
    tmp = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="sclate-bp-", dir="/tmp"))
    out: dict[str, Any] = {"quick": quick, "calls": calls, "sse_streams": streams}
    sent = [0]
    model_server: Any = None
    clients: list[_Client] = []
    control = _ControlServer(tmp / "sclate.sock")
    try:
        await control.start()
        if with_model:
            from sclated.model import ModelServerConfig, start_model_server

            model_server = await start_model_server(ModelServerConfig(port=0))
        async with contextlib.AsyncExitStack() as stack:
            echo_url = await stack.enter_async_context(_echo_upstream())
            upstreams = [echo_url] + ([model_server.url] if model_server is not None else [])
            proc, ports = await stack.enter_async_context(_mitmdump(tmp, control.path, secret, upstreams))

            def client(base: str) -> _Client:
                c = _Client(base, key)
                clients.append(c)
                return c

            echo_direct, echo_proxied = client(echo_url), client(f"http://127.0.0.1:{ports[0]}")
            echo = await _paired(echo_direct, echo_proxied, "echo", calls, sent)
            out.update({f"echo_{k}": round(v, 3) for k, v in echo.items()})
            sse = await _paired_sse(echo_direct, echo_proxied, streams, sent)
            out.update({k: round(v, 3) for k, v in sse.items()})
            _, (plain_port,) = await stack.enter_async_context(
                _mitmdump(tmp / "plain", control.path, secret, [echo_url], addon=False)
            )
            plain_client = client(f"http://127.0.0.1:{plain_port}")
            plain = await _paired(echo_direct, plain_client, "echo", calls, [0])
            out["plain_mitm_added_ms_p50"] = round(plain["added_ms_p50"], 3)
            # The same SSE measurement through mitmdump without the addon: what of the
            # per-chunk figure is mitmproxy's own streaming, and what is the capture's.
            plain_sse = await _paired_sse(echo_direct, plain_client, streams, [0])
            out["plain_mitm_sse_added_ms_per_chunk_p50"] = round(plain_sse["sse_added_ms_per_chunk_p50"], 3)
            if model_server is not None:
                m_direct, m_proxied = client(model_server.url), client(f"http://127.0.0.1:{ports[1]}")
                model_pairs = max(3, calls // 4)
                model = await _paired(m_direct, m_proxied, model_server.model_name, model_pairs, sent)
                out["model_pairs"] = model_pairs
                out.update({f"model_{k}": round(v, 3) for k, v in model.items()})
                out["model_name"] = model_server.model_name
            for k in ("direct_ms_p50", "proxied_ms_p50", "added_ms_p50"):
                out[k] = out[f"echo_{k}"]
            await control.wait_recorded(sent[0], RECORD_WAIT_S)
            out["proxy_rss_mb"] = round(await asyncio.to_thread(_vm_rss_mb, proc.pid), 1)
    finally:
        for c in clients:
            await c.close()
        if model_server is not None:
            await model_server.close()
        await control.close()
        await asyncio.to_thread(shutil.rmtree, tmp, True)
    out["calls_sent"] = sent[0]
    out["calls_recorded"] = len(control.recorded)
    out["calls_complete"] = len(control.complete)
    out["calls_with_token_ids"] = len(control.with_token_ids)
    out["leases_left"] = len(control.leases)
    out["control_errors"] = len(control.errors)
    out["targets"] = {"added_ms_p50": 2.0, "sse_added_ms_per_chunk_p50": 1.0}
    out["meets_targets"] = out["added_ms_p50"] <= 2.0 and out["sse_added_ms_per_chunk_p50"] <= 1.0
    out["event_loop"] = type(asyncio.get_running_loop()).__module__.split(".")[0]
    out["notes"] = _NOTES
    return out
