"""Capture-proxy benchmark: what mitmdump + the capture addon add to a model call,
on the host and as it runs in a sandbox.

Everything on the path is real. Two places are measured, each with four paths
to the same *echo* upstream (aiohttp, in this process, answering at once with
vLLM-style token fields, and streaming 20 SSE chunks 10 ms apart), called in a
rotating order (every permutation in turn, so a drift in machine load hits
every path alike); figures are medians of per-round differences:

- ``direct``: the upstream itself (in a sandbox: the socat forwarder on
  127.0.0.1:18080 that mitmdump's reverse mode targets, i.e. socat -> the
  model socket -> :class:`~sclated.runtime.ModelBridge` -> the upstream);
- ``bare``: mitmdump without any addon, default options (it buffers bodies);
- ``bare_stream``: the same with ``stream_large_bodies=1``: mitmproxy's own
  streaming path, with nothing of ours in it;
- ``addon``: mitmdump with ``proxy_addons/capture.py`` (role ``agent``), whose
  control socket is served here by the daemon's own
  ``ControlServer``, :class:`~sclated.capture.CaptureSink`
  and a real :class:`~sclated.clock.LeaseTable`.

The client is a small stdlib script, a process of its own as an agent is: on
the host run with this venv's python, in the sandbox with the image's python3
(it prints its timings as JSON). In the sandbox (``sandbox_*``) everything is the production
path: a ``sclate-sandbox`` container made by :class:`~sclated.runtime.SandboxManager`
with the run's libfaketime settings and simulated time, the production mitmdump
command as its main process, the model path through socat and the model
bridge; the bare mitmdumps are started beside it.

The embedded llama.cpp model (``sclated.model``, ``max_tokens`` 8 at
temperature 0) is measured on the host, direct against the addon, for the
cost as a user sees it.

Every process started here leads a process group of its own and is ended with
it; the container is removed by label; the temporary directory is deleted:
also on failure, SIGINT or SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import secrets
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from sclated.bench._cli import end_group, spawn
from sclated.capture import CaptureSink, MemoryRecordStore
from sclated.clock import LeaseTable

__all__ = ["bench_proxy", "mitmdump_on_host"]

RUN = "bench-proxy"
ROLE = "agent"
MAX_TOKENS = 8
SSE_CHUNKS = 20
SSE_INTERVAL_S = 0.010
WARMUP_ROUNDS = 3
IDLE_GAP_S = 0.010  # the idle_* figures: a pause after every call, so processes go idle between calls
RECORD_WAIT_S = 60.0
_NS = 1_000_000_000
_SIM_START_NS = 1_893_456_000 * _NS  # 2030-01-01T00:00:00Z, what the sandbox's clock reads
# In-sandbox listeners of the bare mitmdumps (the production one has 4001-4003).
_BARE_PORT = 4011
_BARE_STREAM_PORT = 4012
_FORWARDER_PORT = 18080  # sclate-init's socat: the model socket on loopback TCP

CALL_PATHS = ("direct", "bare", "addon")
SSE_PATHS = ("direct", "bare", "bare_stream", "addon")

_NOTES = (
    "Paths: direct = the echo upstream itself (in the sandbox: the socat forwarder mitmdump's reverse "
    "mode targets, through the model bridge); bare = mitmdump without the addon (default options: "
    "bodies buffered); bare_stream = the same with stream_large_bodies=1 (mitmproxy's own streaming); "
    "addon = mitmdump with the capture addon (in the sandbox: the production command, under libfaketime "
    "with the run's settings). The client is a process of its own (stdlib http.client, one keep-alive "
    "connection per path, calls as an agent makes them: without return_token_ids/logprobs, so the "
    "addon adds them); paths are called back to back in rotating order (every permutation in turn) "
    "and figures are medians of per-round differences. echo_added_ms_p50 (= added_ms_p50) = addon - "
    "direct; bare_ms_p50 = bare - direct (mitmproxy's own cost; = plain_mitm_added_ms_p50); "
    "addon_ms_p50 = addon - bare (what the capture addon itself adds: mostly the call_start round trip "
    "to the control socket, a clock lease taken before the call is forwarded). idle_* are the same "
    "with a 10 ms pause after every call, so every process sleeps between calls, as between model "
    "calls: on this kind of VM waking an idle process costs ~0.2-0.3 ms, and the lease round trip wakes "
    "two (measured alone, the addon's ControlClient against the daemon's ControlServer: ~0.17 ms "
    "back to back, ~0.64 ms after 10 ms idle). *_cpu_ms_per_call: CPU time of the addon's and the bare "
    "mitmdump process per call (the addon's record building and delivery mostly run after the "
    "response). sandbox_* are the same figures measured inside a sclate-sandbox container by a client "
    "there. SSE: 20 chunks 10 ms apart; sse_added_ms_per_chunk_p50 = median over chunks of (arrival "
    "through the addon - arrival direct), each from its request's send: it contains the request's "
    "one-time overhead (sse_request_added_ms_p50: the upstream's receipt of the request, from the send) "
    "plus the relay of the chunk (sse_transit_added_ms_per_chunk_p50: arrival - the upstream's send "
    "stamp, compared between the paths; host and sandbox share the monotonic clock). So the "
    "from-send figure is not a per-chunk cost: it is the call's overhead (~ added_ms_p50), paid once "
    "and seen again at every chunk; the per-chunk cost is the transit figure. sse_bare_* are the same "
    "for bare_stream (mitmproxy's streaming alone); sse_addon_transit_ms_per_chunk_p50 = addon - "
    "bare_stream transit (the addon's tee per chunk). plain_mitm_sse_added_ms_per_chunk_p50 is bare "
    "(buffering) mitmdump: without a stream setting it holds a whole event stream. model_* are direct "
    "against addon for the embedded llama.cpp model (max_tokens 8, temperature 0), where model time "
    "dominates; model_pairs < calls: model calls take ~100x longer. Found with sandbox_*: under "
    "libfaketime any second Python thread in the proxy (the addon's spool writes used asyncio.to_thread) "
    "made the GIL hand-off spin: 166 ms added and 225 ms of CPU per call back to back in a sandbox, "
    "3-5 ms without the threads; the addon uses none now."
)


# -- the control socket the addon talks to ---------------------------------------------


def _production(name: str) -> Any:
    """The daemon's own ``ControlServer``, ``mitmdump_command`` or ``ROLE_PORTS``,
    from the sandbox package or, before it, the sandboxed harness's module."""
    for module, attr in (
        ("sclated.sandbox", name),
        ("sclated.runs._control", name),
        ("sclated.runs._sandboxed", {"mitmdump_command": "_mitmdump_command", "ROLE_PORTS": "AGENT_PORTS"}.get(name)),
    ):
        with contextlib.suppress(ImportError):
            found = getattr(importlib.import_module(module), attr or name, None)
            if found is not None:
                return found
    raise ImportError(f"no {name} in sclated.sandbox or sclated.runs")


class _Capture:
    """The daemon's side of ``/run/sclate/sclate.sock`` for one run: the daemon's
    own control server, capture sink and lease table, with a count of what arrived."""

    def __init__(self, path: Path) -> None:
        self.store = MemoryRecordStore()
        self.leases = LeaseTable()
        self.sink = CaptureSink(self.store, self.leases)
        self.recorded: set[str] = set()
        self.complete: set[str] = set()
        self.with_token_ids: set[str] = set()
        self.start_ns: list[int] = []
        self.errors: list[str] = []
        self._changed = asyncio.Event()
        self.server: Any = _production("ControlServer")(
            path,
            {
                "hello": self._hello,
                "call_start": self._call_start,
                "call_end": self._call_end,
                "record": self._record,
            },
        )

    async def _hello(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        return {"run": RUN}

    async def _call_start(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        return await self._checked(self.sink.on_call_start(RUN, dict(msg)))

    async def _call_end(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        return await self._checked(self.sink.on_call_end(RUN, dict(msg)))

    async def _record(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        out = await self._checked(self.sink.on_record(RUN, dict(msg)))
        rec = msg["record"]
        call_id = str(rec["call_id"])
        self.recorded.add(call_id)
        if rec.get("complete") and rec.get("error") is None:
            self.complete.add(call_id)
        comps = rec.get("completions") or []
        if rec.get("prompt_token_ids") and comps and comps[0].get("token_ids"):
            self.with_token_ids.add(call_id)
        self.start_ns.append(int((rec.get("timings") or {}).get("start_ns") or 0))
        self._changed.set()
        return out

    async def _checked(self, coro: Awaitable[dict[str, Any]]) -> dict[str, Any]:
        try:
            return await coro
        except Exception as e:
            self.errors.append(f"{type(e).__name__}: {e}")
            raise

    async def wait_recorded(self, n: int, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while len(self.recorded) < n:
                    self._changed.clear()
                    await self._changed.wait()

    def figures(self, prefix: str, sent: int) -> dict[str, Any]:
        return {
            f"{prefix}calls_sent": sent,
            f"{prefix}calls_recorded": len(self.recorded),
            f"{prefix}calls_complete": len(self.complete),
            f"{prefix}calls_with_token_ids": len(self.with_token_ids),
            f"{prefix}leases_left": len(self.leases),
            f"{prefix}control_errors": len(self.errors),
        }


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
    # The monotonic clock is the machine's, shared by the sandbox's processes
    # (libfaketime leaves it real): clients there compare against these stamps.
    req_at = time.monotonic()
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
            # Arrival minus this stamp is the chunk's transit time.
            "sent_at": time.monotonic(),
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
            chunk["req_at"] = req_at
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


# -- mitmdump on the host ---------------------------------------------------------------


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
async def mitmdump_on_host(
    tmp: Path,
    control: Path,
    secret: str,
    upstreams: list[str],
    *,
    addon: bool = True,
    options: tuple[str, ...] = (),
) -> AsyncIterator[tuple[asyncio.subprocess.Process, list[int]]]:
    """One mitmdump, one reverse listener (role agent) per upstream, in a process
    group of its own that is ended on the way out."""
    tmp.mkdir(exist_ok=True)
    ports = [_free_port() for _ in upstreams]
    args = [str(_mitmdump_path()), "-q", "--set", f"confdir={tmp / 'mitm'}"]
    if addon:
        args += ["-s", str(_addon_path())]
    for url, port in zip(upstreams, ports, strict=True):
        args += ["--mode", f"reverse:{url}@127.0.0.1:{port}"]
    for opt in options:
        args += ["--set", opt]
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
        proc = await spawn(*args, env=env, stdout=log, stderr=log)
    finally:
        log.close()
    try:
        for port in ports:
            await _wait_listening(port, proc, log_path)
        yield proc, ports
    finally:
        await asyncio.shield(end_group(proc, grace_s=10))


def _vm_rss_mb(status: str) -> float:
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in the process status")


# -- measuring ----------------------------------------------------------------------------

Stream = dict[str, Any]  # {"arrivals": [ms from send], "transits": [ms], "request_ms": ms}

# The client, on the host (this venv's python, a process of its own, as an agent is)
# and in the sandbox (the image's python3): stdlib only. Every path gets one keep-alive
# connection, as an agent's SDK client holds; each round calls every path once, the
# paths in every order in turn, back to back (or with gap_s after each call). Prints
# raw timings as JSON.
_CLIENT = r"""
import http.client, itertools, json, os, sys, time

cfg = json.loads(sys.argv[1])
headers = {"authorization": "Bearer " + cfg["key"], "content-type": "application/json"}
conns = {}

def body(i, stream):
    b = {
        "model": cfg["model"],
        "messages": [{"role": "system", "content": "You are a terse assistant."},
                     {"role": "user", "content": "Say hello to user number %d." % i}],
        "max_tokens": cfg["max_tokens"], "temperature": 0, "stream": stream,
    }
    if cfg["token_flags"]:
        # For a model, asked for on every path: the addon adds them on its own,
        # and the model must do the same work either way.
        b.update(return_token_ids=True, logprobs=True)
    return json.dumps(b).encode()

def send(port, i, stream):
    c = conns.get(port)
    if c is None:
        c = conns[port] = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    b = body(i, stream)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", body=b, headers=headers)
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit("port %d: HTTP %d %r" % (port, r.status, r.read()[:300]))
    return t0, r

def call(port, i):
    t0, r = send(port, i, False)
    r.read()
    return (time.monotonic() - t0) * 1000

def stream(port, i):
    # The upstream stamps chunks with the machine's monotonic clock (libfaketime
    # leaves it real in sandboxes): arrival - sent_at is a chunk's transit.
    t0, r = send(port, i, True)
    arrivals, transits, request_ms = [], [], 0.0
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data: [DONE]"):
            r.read()
            break
        if line.startswith(b"data:"):
            now = time.monotonic()
            ev = json.loads(line[5:])
            arrivals.append((now - t0) * 1000)
            transits.append((now - ev["sent_at"]) * 1000)
            if "req_at" in ev:
                request_ms = (ev["req_at"] - t0) * 1000
    return {"arrivals": arrivals, "transits": transits, "request_ms": request_ms}

def rotate(ports, rounds, one):
    names = sorted(ports)
    orders = list(itertools.permutations(names))
    out = {n: [] for n in names}
    for i in range(rounds):
        for n in orders[i % len(orders)]:
            out[n].append(one(ports[n], i))
            time.sleep(cfg["gap_s"])
    return out

def cpu_ms(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")

def pid_of(marker):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if marker.encode() in argv:
            return int(pid)
    return None

pids = {name: pid_of(m) for name, m in cfg.get("cpu_of", {}).items()}
cpu0 = {name: cpu_ms(pid) for name, pid in pids.items() if pid}
res = {"calls": rotate(cfg["call_ports"], cfg["call_rounds"], call)}
res["cpu_ms"] = {name: cpu_ms(pids[name]) - cpu0[name] for name in cpu0}
if cfg.get("sse_ports"):
    res["streams"] = rotate(cfg["sse_ports"], cfg["sse_rounds"], stream)
rss = {}
for name, pid in pids.items():
    if pid:
        with open("/proc/%d/status" % pid) as f:
            rss[name] = [int(l.split()[1]) / 1024 for l in f if l.startswith("VmRSS:")][0]
res["rss_mb"] = rss
json.dump(res, sys.stdout)
"""


def _p(values: list[float], q: int) -> float:
    """The q-th percentile (1..99)."""
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _diffs(a: list[float], b: list[float]) -> list[float]:
    return [x - y for x, y in zip(a, b, strict=True)]


def _call_figures(res: Mapping[str, list[float]], call_prefix: str, prefix: str) -> dict[str, float]:
    d, b, a = (res[n][WARMUP_ROUNDS:] for n in ("direct", "bare", "addon"))
    added, bare, addon = _diffs(a, d), _diffs(b, d), _diffs(a, b)
    return {
        f"{call_prefix}direct_ms_p50": statistics.median(d),
        f"{call_prefix}proxied_ms_p50": statistics.median(a),
        f"{call_prefix}added_ms_p50": statistics.median(added),
        f"{call_prefix}added_ms_p90": _p(added, 90),
        f"{call_prefix}direct_ms_p90": _p(d, 90),
        f"{call_prefix}proxied_ms_p90": _p(a, 90),
        f"{call_prefix}bare_proxied_ms_p50": statistics.median(b),
        f"{prefix}bare_ms_p50": statistics.median(bare),
        f"{prefix}bare_ms_p90": _p(bare, 90),
        f"{prefix}addon_ms_p50": statistics.median(addon),
        f"{prefix}addon_ms_p90": _p(addon, 90),
    }


def _sse_pair(p: list[Stream], d: list[Stream]) -> tuple[list[float], list[float], list[float]]:
    """Per-chunk from-send and transit differences, and per-request differences."""
    added: list[float] = []
    transit: list[float] = []
    request: list[float] = []
    for ps, ds in zip(p, d, strict=True):
        added += _diffs(ps["arrivals"], ds["arrivals"])
        transit += _diffs(ps["transits"], ds["transits"])
        request.append(ps["request_ms"] - ds["request_ms"])
    return added, transit, request


def _sse_figures(res: Mapping[str, list[Stream]], prefix: str) -> dict[str, float]:
    for name, streams in res.items():
        for i, s in enumerate(streams):
            if len(s["arrivals"]) != SSE_CHUNKS:
                raise RuntimeError(f"{prefix}stream {i} via {name}: {len(s['arrivals'])} of {SSE_CHUNKS} chunks")
    d, b, bs, a = (res[n][1:] for n in ("direct", "bare", "bare_stream", "addon"))  # [0]: warm-up
    added, transit, request = _sse_pair(a, d)
    b_added, b_transit, b_request = _sse_pair(bs, d)
    ab_added, ab_transit, _ = _sse_pair(a, bs)
    buffered, _, _ = _sse_pair(b, d)
    return {
        f"{prefix}sse_added_ms_per_chunk_p50": statistics.median(added),
        f"{prefix}sse_added_ms_per_chunk_p90": _p(added, 90),
        f"{prefix}sse_transit_added_ms_per_chunk_p50": statistics.median(transit),
        f"{prefix}sse_transit_added_ms_per_chunk_p90": _p(transit, 90),
        f"{prefix}sse_request_added_ms_p50": statistics.median(request),
        f"{prefix}sse_bare_added_ms_per_chunk_p50": statistics.median(b_added),
        f"{prefix}sse_bare_transit_added_ms_per_chunk_p50": statistics.median(b_transit),
        f"{prefix}sse_bare_request_added_ms_p50": statistics.median(b_request),
        f"{prefix}sse_addon_added_ms_per_chunk_p50": statistics.median(ab_added),
        f"{prefix}sse_addon_transit_ms_per_chunk_p50": statistics.median(ab_transit),
        f"{prefix}plain_mitm_sse_added_ms_per_chunk_p50": statistics.median(buffered),
    }


def _client_cfg(
    key: str, calls: int, streams: int, call_ports: dict[str, int], sse_ports: dict[str, int]
) -> dict[str, Any]:
    return {
        "key": key,
        "model": "echo",
        # As an agent calls: without them, so the addon adds them (the echo
        # upstream answers the same either way).
        "token_flags": False,
        "max_tokens": MAX_TOKENS,
        "gap_s": 0.0,
        "call_ports": call_ports,
        "call_rounds": WARMUP_ROUNDS + calls,
        "sse_ports": sse_ports,
        "sse_rounds": 1 + streams,
    }


async def _host_client(tmp: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """Run the client as a process of its own on the host; its JSON."""
    out_path, err_path = tmp / "client.json", tmp / "client.err"
    out_f = await asyncio.to_thread(open, out_path, "wb")
    err_f = await asyncio.to_thread(open, err_path, "wb")
    try:
        proc = await spawn(sys.executable, "-c", _CLIENT, json.dumps(cfg), stdout=out_f, stderr=err_f)
    finally:
        out_f.close()
        err_f.close()
    try:
        code = await proc.wait()
    finally:
        await asyncio.shield(end_group(proc, grace_s=2))
    if code != 0:
        err = (await asyncio.to_thread(err_path.read_text, errors="replace"))[-2000:]
        raise RuntimeError(f"the benchmark client failed (exit {code}): {err}")
    result: dict[str, Any] = json.loads(await asyncio.to_thread(out_path.read_text))
    return result


async def _on_host(
    tmp: Path, echo_url: str, model_server: Any, calls: int, streams: int, secret: str
) -> dict[str, Any]:
    key = f"sk-sclate-{RUN}-{secret}"
    await asyncio.to_thread(tmp.mkdir, exist_ok=True)
    capture = _Capture(tmp / "sclate.sock")
    out: dict[str, Any] = {}
    sent = 0
    try:
        await capture.server.start()
        async with contextlib.AsyncExitStack() as stack:
            sock = capture.server.path
            upstreams = [echo_url] + ([model_server.url] if model_server is not None else [])
            _, ports = await stack.enter_async_context(mitmdump_on_host(tmp / "addon", sock, secret, upstreams))
            _, (bare_port,) = await stack.enter_async_context(
                mitmdump_on_host(tmp / "bare", sock, secret, [echo_url], addon=False)
            )
            _, (stream_port,) = await stack.enter_async_context(
                mitmdump_on_host(
                    tmp / "bare-stream", sock, secret, [echo_url], addon=False, options=("stream_large_bodies=1",)
                )
            )
            echo_port = int(echo_url.rsplit(":", 1)[1])
            call_ports = {"direct": echo_port, "bare": bare_port, "addon": ports[0]}
            cfg = _client_cfg(key, calls, streams, call_ports, {**call_ports, "bare_stream": stream_port})
            # Processes are told apart by their confdirs (each mitmdump has its own).
            cfg["cpu_of"] = {"addon": f"confdir={tmp / 'addon' / 'mitm'}", "bare": f"confdir={tmp / 'bare' / 'mitm'}"}
            res = await _host_client(tmp, cfg)
            sent += WARMUP_ROUNDS + calls + 1 + streams
            out.update(_call_figures(res["calls"], "echo_", ""))
            out.update(_sse_figures(res["streams"], ""))
            out.update(_cpu_figures(res, calls, ""))
            out["proxy_rss_mb"] = float(res["rss_mb"].get("addon", 0.0))
            idle_cfg, idle_rounds = _idle_cfg(cfg, calls)
            out.update(_idle_figures(await _host_client(tmp, idle_cfg), ""))
            sent += idle_rounds
            if model_server is not None:
                model_pairs = max(3, calls // 4)
                m_cfg = _client_cfg(key, model_pairs, 0, {"direct": model_server.port, "addon": ports[1]}, {})
                m_cfg.update(model=model_server.model_name, token_flags=True)
                m = (await _host_client(tmp, m_cfg))["calls"]
                sent += WARMUP_ROUNDS + model_pairs
                md, ma = m["direct"][WARMUP_ROUNDS:], m["addon"][WARMUP_ROUNDS:]
                m_added = _diffs(ma, md)
                out["model_pairs"] = model_pairs
                out.update(
                    {
                        "model_direct_ms_p50": statistics.median(md),
                        "model_proxied_ms_p50": statistics.median(ma),
                        "model_added_ms_p50": statistics.median(m_added),
                        "model_added_ms_p90": _p(m_added, 90),
                        "model_direct_ms_p90": _p(md, 90),
                        "model_proxied_ms_p90": _p(ma, 90),
                        "model_name": model_server.model_name,
                    }
                )
            await capture.wait_recorded(sent, RECORD_WAIT_S)
    finally:
        await capture.server.close()
    out.update(capture.figures("", sent))
    return out


def _idle_cfg(cfg: dict[str, Any], calls: int) -> tuple[dict[str, Any], int]:
    """The same calls with a pause after each (no streams); and how many reach the addon."""
    rounds = WARMUP_ROUNDS + max(10, calls // 2)
    idle = dict(cfg, gap_s=IDLE_GAP_S, call_rounds=rounds, sse_ports={}, cpu_of={})
    return idle, rounds


def _idle_figures(res: Mapping[str, Any], prefix: str) -> dict[str, float]:
    c = {n: res["calls"][n][WARMUP_ROUNDS:] for n in ("direct", "bare", "addon")}
    return {
        f"{prefix}idle_bare_ms_p50": statistics.median(_diffs(c["bare"], c["direct"])),
        f"{prefix}idle_addon_ms_p50": statistics.median(_diffs(c["addon"], c["bare"])),
    }


def _cpu_figures(res: Mapping[str, Any], calls: int, prefix: str) -> dict[str, float]:
    """CPU time of the addon's and the bare mitmdump per non-streamed call (their
    share of the rounds: one call each per round)."""
    cpu = res.get("cpu_ms") or {}
    rounds = WARMUP_ROUNDS + calls
    if "addon" not in cpu or "bare" not in cpu:
        return {}
    return {
        f"{prefix}addon_cpu_ms_per_call": cpu["addon"] / rounds,
        f"{prefix}bare_cpu_ms_per_call": cpu["bare"] / rounds,
    }


# -- measuring in a sandbox ---------------------------------------------------------------

_WAIT_PORTS = r"""
import socket, sys, time
for port in map(int, sys.argv[1:]):
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        sys.exit("nothing listens on %d" % port)
"""


async def _in_sandbox(tmp: Path, echo_url: str, calls: int, streams: int, secret: str) -> dict[str, Any]:
    from sclated.runtime import DockerRuntime, Limits, ModelBridge, Sandbox, SandboxManager, build_all, image_ref

    await build_all(names=["sclate-sandbox"])
    image = await image_ref("sclate-sandbox")
    # The pid in the daemon id lets a watcher find what this process made.
    rt = await DockerRuntime.connect(f"bench-{os.getpid()}-{secrets.token_hex(3)}")
    run_dir = tmp / "sb"
    manager = SandboxManager(rt)
    paths = manager.paths_for(run_dir)
    await asyncio.to_thread(paths.create)
    capture = _Capture(paths.control_socket)
    echo_port = int(echo_url.rsplit(":", 1)[1])
    bridge = ModelBridge(paths.model_socket, "127.0.0.1", echo_port)
    out: dict[str, Any] = {}
    try:
        await capture.server.start()
        await bridge.start()
        proxy_cmd = _production("mitmdump_command")()
        spec = manager.spec_for(
            image=image,
            run=RUN,
            tenant="bench",
            run_dir=run_dir,
            env={"SCLATE_RUN_SECRET": secret, "SCLATE_SPOOL": "/var/spool/sclate"},
            # A run's defaults (SandboxedHarness without resources): 2 GiB, one CPU.
            limits=Limits(memory_bytes=2 << 30, nano_cpus=1_000_000_000, pids=512),
            # As a run's sandbox starts it: the production command, the container's main process.
            command=["sh", "-c", f"{proxy_cmd} >/var/log/sclate-proxy.log 2>&1 & exec sleep infinity"],
        )
        sb: Sandbox = await manager.create(spec, run_dir, sim_ns=_SIM_START_NS, probe=False)
        bare = "mitmdump -q --set connection_strategy=lazy"
        started = await sb.sh(
            f"{bare} --set confdir=/tmp/mitm-bare "
            f"--mode reverse:http://127.0.0.1:{_FORWARDER_PORT}@127.0.0.1:{_BARE_PORT} "
            ">/var/log/bare.log 2>&1 </dev/null & "
            f"{bare} --set confdir=/tmp/mitm-bare-stream --set stream_large_bodies=1 "
            f"--mode reverse:http://127.0.0.1:{_FORWARDER_PORT}@127.0.0.1:{_BARE_STREAM_PORT} "
            ">/var/log/bare-stream.log 2>&1 </dev/null &",
            timeout_s=30,
        )
        if not started.ok:
            raise RuntimeError(f"could not start the bare mitmdumps: {started.stderr!r}")
        agent = int(_production("ROLE_PORTS")["agent"])
        ports = [_FORWARDER_PORT, agent, _BARE_PORT, _BARE_STREAM_PORT]
        up = await sb.exec(["python3", "-c", _WAIT_PORTS, *map(str, ports)], timeout_s=60)
        if not up.ok:
            logs = await sb.sh("tail -n 20 /var/log/sclate-proxy.log /var/log/bare*.log", timeout_s=10)
            raise RuntimeError(f"{up.stderr.decode(errors='replace')}: {logs.stdout.decode(errors='replace')}")
        call_ports = {"direct": _FORWARDER_PORT, "bare": _BARE_PORT, "addon": agent}
        sse_ports = {**call_ports, "bare_stream": _BARE_STREAM_PORT}
        cfg = _client_cfg(f"sk-sclate-{RUN}-{secret}", calls, streams, call_ports, sse_ports)
        cfg["cpu_of"] = {"addon": "/opt/sclate/proxy/capture.py", "bare": "confdir=/tmp/mitm-bare"}
        ran = await sb.exec(["python3", "-c", _CLIENT, json.dumps(cfg)], timeout_s=600)
        if not ran.ok:
            raise RuntimeError(f"the client in the sandbox failed: {ran.stderr.decode(errors='replace')[-2000:]}")
        res = json.loads(ran.stdout)
        out.update(_call_figures(res["calls"], "sandbox_", "sandbox_"))
        out.update(_sse_figures(res["streams"], "sandbox_"))
        out.update(_cpu_figures(res, calls, "sandbox_"))
        out["sandbox_proxy_rss_mb"] = float(res["rss_mb"].get("addon", 0.0))
        idle_cfg, idle_rounds = _idle_cfg(cfg, calls)
        idle = await sb.exec(["python3", "-c", _CLIENT, json.dumps(idle_cfg)], timeout_s=600)
        if not idle.ok:
            raise RuntimeError(f"the client in the sandbox failed: {idle.stderr.decode(errors='replace')[-2000:]}")
        out.update(_idle_figures(json.loads(idle.stdout), "sandbox_"))
        sent = WARMUP_ROUNDS + calls + 1 + streams + idle_rounds
        await capture.wait_recorded(sent, RECORD_WAIT_S)
        out.update(capture.figures("sandbox_", sent))
        # The addon stamps calls with the sandbox's (simulated) clock.
        sim_lo, sim_hi = _SIM_START_NS, _SIM_START_NS + 86400 * _NS
        out["sandbox_sim_time"] = bool(capture.start_ns) and all(sim_lo <= t < sim_hi for t in capture.start_ns)
        out["sandbox_image"] = image
    finally:
        try:
            await asyncio.shield(rt.reap(rt.daemon_id, keep=set()))
        finally:
            await asyncio.shield(rt.close())
            await bridge.close()
            await capture.server.close()
    return out


async def bench_proxy(
    *, calls: int = 100, quick: bool = False, with_model: bool = True, in_sandbox: bool = True
) -> dict[str, Any]:
    """Measure the capture proxy; see the module docstring. ``with_model=False``
    skips the embedded model, ``in_sandbox=False`` the sandbox."""
    if quick:
        calls = min(calls, 12)
    streams = max(2, calls // 5)
    secret = secrets.token_hex(16)
    out: dict[str, Any] = {"quick": quick, "calls": calls, "sse_streams": streams}
    model_server: Any = None
    with tempfile.TemporaryDirectory(prefix="sclate-bp-") as tmp_s:
        tmp = Path(tmp_s)
        try:
            if with_model:
                from sclated.model import ModelServerConfig, start_model_server

                model_server = await start_model_server(ModelServerConfig(port=0))
            async with _echo_upstream() as echo_url:
                out.update(await _on_host(tmp / "host", echo_url, model_server, calls, streams, secret))
                if in_sandbox:
                    out.update(await _in_sandbox(tmp, echo_url, calls, streams, secret))
        finally:
            if model_server is not None:
                await asyncio.shield(model_server.close())
    for k in ("direct_ms_p50", "proxied_ms_p50", "added_ms_p50"):
        out[k] = out[f"echo_{k}"]
    out["plain_mitm_added_ms_p50"] = out["bare_ms_p50"]
    targets = {"added_ms_p50": 2.0, "addon_ms_p50": 0.5, "sse_transit_added_ms_per_chunk_p50": 1.0}
    if in_sandbox:
        targets.update({f"sandbox_{k}": v for k, v in targets.items()})
    out["targets"] = targets
    out["meets_targets"] = all(out[k] <= v for k, v in targets.items())
    out["event_loop"] = type(asyncio.get_running_loop()).__module__.split(".")[0]
    out["cpus"] = os.cpu_count()
    out["notes"] = _NOTES
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}
