"""sclate capture addon: records every model call made inside a sandbox.

Runs inside the sandbox under mitmdump, in reverse-proxy mode with one
listener per role::

    mitmdump -q -s /opt/sclate/proxy/capture.py \\
      --mode reverse:http://127.0.0.1:18080@127.0.0.1:4001 \\
      --mode reverse:http://127.0.0.1:18080@127.0.0.1:4002 \\
      --set sclate_roles=4001=agent,4002=memory,4004=memory:system

mitmdump loads this file by path, as a script; the rest of the package
(``proxy_addons``: the record schema, SSE assembly, tokens, the control
client, the spool) sits beside it, in the image at ``/opt/sclate/proxy/``,
and is imported from there (see ``_package_beside_me``). It imports only
the standard library and mitmproxy: nothing from ``sclated``.

Environment (each has an option of the same meaning that wins when set):
``SCLATE_RUN_SECRET`` (``sclate_run_secret``), ``SCLATE_UPSTREAM_API_KEY``
(``sclate_upstream_key``), ``SCLATE_CONTROL_SOCKET`` (``sclate_control_socket``),
``SCLATE_SPOOL`` (``sclate_spool``), ``SCLATE_ROLES`` (``sclate_roles``),
``SCLATE_RUN_MODEL`` (``sclate_run_model``); ``SCLATE_UPSTREAM_API_KEY_FILE``, a
file holding the upstream key (what sclated gives: the key stays out of the
container's environment); ``SCLATE_REQUEST_TOKENS=0`` turns
``sclate_request_tokens`` off (an endpoint that refuses unknown fields).

With ``sclate_request_tokens`` on (the default) requests that do not set them
get ``"return_token_ids": true`` and the API's logprobs flag added (chat and
completions ``logprobs``, Anthropic messages ``logprobs``, Responses
``top_logprobs: 0``). The response then carries extra fields
(``prompt_token_ids``, ``token_ids``, ``logprobs``) which clients ignore; the
response itself is never modified by this addon.

``SCLATE_MEMORY_SYSTEM`` names the run's memory system (``mem0``, ``hindsight``):
calls on the memory listener are recorded as its (``component``), embedding calls
as ``memory:embeddings`` (their vectors are not kept in the record, their sizes are).

``SCLATE_OUTPUT_BOUND=N`` (a harness's environment: the proxy runs in its
container) bounds the output of a call that sets no bound at N tokens, the key
recorded in ``injected`` (Codex sends none and has no setting for one).

A call asking for model ``sclate-role-<role>`` is attributed to that role and
forwarded asking for the run's model (``sclate_run_model``).

``SCLATE_SAMPLING_SEED=N`` (a run's sampling seed, set by sclated for the runs of a
branch group) gives a call that sets no ``seed`` one derived from N and its body, on
the APIs ``SCLATE_SEED_APIS`` lists (``openai_chat,...``; an endpoint that refuses
the field is left out); the key is recorded in ``injected``.

No threads, ever (no ``asyncio.to_thread`` either): under libfaketime (every
sandbox) a second Python thread makes the GIL hand-off spin (measured: +120 ms
of CPU and +87 ms per call back to back).
"""

import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from mitmproxy import ctx, http


def _package_beside_me() -> None:
    """Make this file's directory importable as the package ``proxy_addons``.

    mitmdump loads this file by path, under a name of its own, with nothing
    of the package imported: bind the package to the files beside this one
    (so the script and its modules always come from the same place, in the
    image or in a checkout). A no-op when the package is already imported,
    as when this file is imported as ``proxy_addons.capture``.
    """
    if "proxy_addons" in sys.modules:
        return
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "proxy_addons", os.path.join(here, "__init__.py"), submodule_search_locations=[here]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules["proxy_addons"] = package
    spec.loader.exec_module(package)


_package_beside_me()

# The package's own modules, once it is bound:
from proxy_addons import record  # noqa: E402
from proxy_addons._attribution import (  # noqa: E402
    SCLATE_HEADERS,
    UNKNOWN_ROLE,
    api_key,
    api_kind,
    hints,
    listener_role,
    parse_roles,
    run_from_key,
)
from proxy_addons._call import Call, bounded  # noqa: E402
from proxy_addons._control import DEFAULT_SOCKET, ControlClient, ControlError  # noqa: E402
from proxy_addons._spool import DEFAULT_SPOOL, Spool  # noqa: E402

log = logging.getLogger("sclate.capture")


def _read_key_file(path: str) -> str:
    """The key in ``path`` ("" without one: calls then go out with no key)."""
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError as exc:
        log.error("sclate: cannot read the upstream key file %s: %s", path, exc)
        return ""


_UNAUTHENTICATED = json.dumps({"error": {"message": "sclate: unknown API key", "type": "unauthenticated"}})
_DAEMON_AWAY = (OSError, ConnectionError, TimeoutError, ControlError)


class SclateCapture:
    """mitmproxy's hooks, in the order a call meets them: ``requestheaders``
    (who is calling; the lease is asked for), ``request`` (the body; the lease
    is awaited), ``responseheaders`` (streams are teed), ``response`` /
    ``error`` (the record is built and delivered in the background)."""

    def __init__(self) -> None:
        self.roles: dict[int, str] = {}
        self.secret = ""
        self.upstream_key = ""
        self.socket_path = DEFAULT_SOCKET
        self.spool = Spool(DEFAULT_SPOOL)
        self.request_tokens = True
        self.run_model = ""
        self.output_bound = 0
        self.memory_system = ""
        self.role_names: frozenset[str] = frozenset()
        self.lease_timeout_s = 0.5
        self.send_timeout_s = 5.0
        self.retry_interval_s = 2.0
        self.client = ControlClient(self.socket_path)
        self._calls: dict[str, Call] = {}
        # (thread, body hash) -> id of the last call with that body that failed.
        self._failed: dict[tuple[str, str], str] = {}
        self._inflight: set[str] = set()
        # mitmproxy's own pattern: hold task references so they are not
        # garbage-collected mid-flight, drop them when done.
        self._tasks: set[asyncio.Task[Any]] = set()
        self._wake = asyncio.Event()

    # -- mitmproxy's lifecycle hooks ------------------------------------------

    def load(self, loader: Any) -> None:
        loader.add_option("sclate_roles", str, "", "Listener port to role: 4001=agent,4002=memory")
        loader.add_option("sclate_run_secret", str, "", "Per-run secret expected in the API key")
        loader.add_option("sclate_upstream_key", str, "", "Real upstream API key")
        loader.add_option("sclate_control_socket", str, "", "Daemon control socket path")
        loader.add_option("sclate_spool", str, "", "Spool directory for undelivered records")
        loader.add_option("sclate_request_tokens", bool, True, "Ask the server for token ids and logprobs")
        loader.add_option("sclate_run_model", str, "", "The run's model: what a sclate-role-<role> model becomes")
        loader.add_option("sclate_retry_interval", float, 2.0, "Seconds between spool redelivery passes")

    def configure(self, updated: set[str]) -> None:
        o = ctx.options
        env = os.environ
        self.roles = parse_roles(o.sclate_roles or env.get("SCLATE_ROLES", ""))
        self.role_names = frozenset(listener_role(r)[0] for r in self.roles.values())
        self.run_model = o.sclate_run_model or env.get("SCLATE_RUN_MODEL", "")
        self.memory_system = env.get("SCLATE_MEMORY_SYSTEM", "").strip()
        bound = env.get("SCLATE_OUTPUT_BOUND", "0").strip()
        self.output_bound = int(bound) if bound.isdigit() else 0
        self.secret = o.sclate_run_secret or env.get("SCLATE_RUN_SECRET", "")
        self.upstream_key = (
            o.sclate_upstream_key
            or env.get("SCLATE_UPSTREAM_API_KEY", "")
            or _read_key_file(env.get("SCLATE_UPSTREAM_API_KEY_FILE", ""))
        )
        path = o.sclate_control_socket or env.get("SCLATE_CONTROL_SOCKET", "") or DEFAULT_SOCKET
        if path != self.client.path:
            old = self.client
            self.client = ControlClient(path)
            self._spawn(old.close(), "sclate-close-control")
        self.socket_path = path
        self.spool = Spool(o.sclate_spool or env.get("SCLATE_SPOOL", "") or DEFAULT_SPOOL)
        self.request_tokens = bool(o.sclate_request_tokens) and env.get("SCLATE_REQUEST_TOKENS", "1") != "0"
        seed = env.get("SCLATE_SAMPLING_SEED", "").strip()
        self.sampling_seed: int | None = int(seed) if seed.isdigit() else None
        self.seed_apis = frozenset(a for a in env.get("SCLATE_SEED_APIS", "").split(",") if a)
        self.retry_interval_s = float(o.sclate_retry_interval)

    def running(self) -> None:
        self._spawn(self._redeliver_loop(), "sclate-redeliver")

    async def done(self) -> None:
        # Last chance to hand spooled records over; whatever fails stays on
        # disk for the next start (or for sclate-capture-drain).
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await self.flush()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.client.close()

    # -- mitmproxy's flow hooks -----------------------------------------------

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Authenticate the call, swap in the real key, and ask for its lease."""
        headers = flow.request.headers
        # Every lookup on mitmproxy's Headers scans them all (~3-5 us each):
        # look up only the headers that are there.
        present = {name.lower() for name, _ in headers.fields}

        def header(name: str) -> str | None:
            return headers.get(name) if name.encode() in present else None

        found = api_key(header)
        run = run_from_key(found[1], self.secret) if found else None
        if found is None or run is None:
            flow.response = http.Response.make(401, _UNAUTHENTICATED, {"content-type": "application/json"})
            return
        # The agent only ever holds the per-run key; the real one is put on
        # here, on the way out.
        key_header = found[0]
        if self.upstream_key:
            real = self.upstream_key
            headers[key_header] = f"Bearer {real}" if key_header == "authorization" else real
        else:
            del headers[key_header]
        if flow.request.method != "POST":
            # Not a model call: a harness looking the server over (GET /v1/models,
            # Hermes's probes of /api/tags, /v1/props, ...). It goes through, with
            # the real key, but takes no clock lease and leaves no call record:
            # a 404 to a probe is not a failed model call.
            return
        role, via_system = listener_role(self._role(flow))
        call = Call(
            call_id=str(uuid.uuid4()),
            run=run,
            role=role,
            api=api_kind(flow.request.method, flow.request.path),
            method=flow.request.method,
            path=flow.request.path,
            start_ns=time.time_ns(),
            memory_system=self.memory_system,
            via_memory_system=via_system,
        )
        call.with_hints(hints(header))
        for h in SCLATE_HEADERS:
            if h.encode() in present:
                del headers[h]
        self._calls[flow.id] = call
        # The lease is asked for now and awaited in `request`, before the call is
        # forwarded: the round trip overlaps mitmproxy reading the body and our
        # parsing it instead of following them.
        call.lease = self._spawn(self._call_start(call), f"sclate-start-{call.call_id}")

    async def request(self, flow: http.HTTPFlow) -> None:
        """Read the body (token flags spliced in), then wait for the lease."""
        call = self._calls.get(flow.id)
        if call is None:
            return
        raw = flow.request.content or b""
        forward = call.read_request(
            raw,
            self.request_tokens,
            self.role_names,
            self.run_model,
            self.output_bound,
            self.sampling_seed,
            self.seed_apis,
        )
        if forward is not raw:
            flow.request.content = forward
        call.retry_of = self._failed.get((call.thread, call.body_hash))
        await (call.lease if call.lease is not None else self._call_start(call))

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """Note the first byte; tee an event stream through as it comes."""
        call = self._calls.get(flow.id)
        if call is None or flow.response is None:
            return
        call.first_byte_ns = time.time_ns()
        ctype = flow.response.headers.get("content-type", "")
        if ctype.split(";", 1)[0].strip().lower() == "text/event-stream":
            call.start_stream()
            flow.response.stream = self._tee(call)

    def response(self, flow: http.HTTPFlow) -> None:
        self._finish(flow, None)

    def error(self, flow: http.HTTPFlow) -> None:
        self._finish(flow, flow.error.msg if flow.error else "unknown error")

    # -- a call's lease, stream and end -----------------------------------------

    def _role(self, flow: http.HTTPFlow) -> str:
        sock = flow.client_conn.sockname
        port = sock[1] if sock else None
        if port is None:
            return UNKNOWN_ROLE
        return self.roles.get(int(port), UNKNOWN_ROLE)

    async def _call_start(self, call: Call) -> None:
        try:
            await self.client.request("call_start", {"call_id": call.call_id, "role": call.role}, self.lease_timeout_s)
        except _DAEMON_AWAY as e:
            # The call goes ahead regardless: a missing lease costs simulated
            # time accuracy, refusing the call would break the agent. The
            # record says so, and the run counts it (calls_unleased).
            call.unleased = True
            log.warning("sclate: call_start for %s not acknowledged: %s", call.call_id, e)

    def _tee(self, call: Call) -> Callable[[bytes], Iterable[bytes] | bytes]:
        def tee(chunk: bytes) -> bytes:
            # Returned unchanged and at once: the agent sees the server's
            # chunks as they arrive; we only note time and text.
            if chunk:
                call.stream_chunk(chunk)
            return chunk

        return tee

    def _finish(self, flow: http.HTTPFlow, error: str | None) -> None:
        call = self._calls.pop(flow.id, None)
        if call is None:
            return
        # The record is built and delivered in the background: doing either
        # here would hold back the end of the response the agent is waiting for.
        end_ns = time.time_ns()
        self._spawn(self._complete(call, flow, error, end_ns), f"sclate-deliver-{call.call_id}")

    def build_record(
        self, call: Call, flow: http.HTTPFlow, error: str | None, end_ns: int | None = None
    ) -> record.Record:
        resp = flow.response
        raw: bytes | None = None
        unreadable = ""
        if resp is not None and not call.streamed:
            try:
                raw = resp.get_content(strict=True) or b""
            except ValueError:
                # Not what its content-encoding says (mitmproxy's strict decoding): the
                # client could not read it either.
                raw = resp.raw_content or b""
                encoding = resp.headers.get("content-encoding", "")
                unreadable = f"the response body does not decode as its content-encoding {encoding!r}"
        status = resp.status_code if resp is not None else None
        return call.to_record(status, raw, error, time.time_ns() if end_ns is None else end_ns, unreadable=unreadable)

    async def _complete(self, call: Call, flow: http.HTTPFlow, error: str | None, end_ns: int) -> None:
        # Before any await: a retry of this call cannot have arrived yet.
        try:
            rec: record.Record | None
            rec, text = bounded(self.build_record(call, flow, error, end_ns))
        except Exception as e:  # the call must give its lease back whatever went wrong here
            log.error("sclate: no record for call %s: %s: %s", call.call_id, type(e).__name__, e)
            rec, text = None, ""
        key = (call.thread, call.body_hash)
        if rec is None or rec["error"] is not None or not rec["complete"]:
            self._failed[key] = call.call_id
        else:
            self._failed.pop(key, None)
        if call.lease is not None and not call.lease.done():
            # A flow that failed before `request`: the release follows the ask.
            await asyncio.wait([call.lease])
        try:
            await self.client.request("call_end", {"call_id": call.call_id}, self.send_timeout_s)
        except _DAEMON_AWAY as e:
            log.warning("sclate: call_end for %s not acknowledged: %s", call.call_id, e)
        if rec is None:
            return
        # On disk before it is sent: if we die between the two, the record is
        # redelivered on the next start instead of lost. On this thread (see
        # the module docstring); the write (fsync included, ~0.6 ms) happens
        # after the response has gone.
        self.spool.write(call.call_id, text)
        if not await self._send(call.call_id, text, fresh=True):
            self._wake.set()

    # -- delivery ------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any] | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            return None
        task = loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def flush(self) -> None:
        """Wait for in-flight deliveries, then try every spooled record once."""
        pending = [t for t in self._tasks if t.get_name().startswith("sclate-deliver-")]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await self.redeliver()

    async def redeliver(self) -> int:
        """Send every spooled record not already in flight; returns how many
        were acknowledged."""
        acked = 0
        for call_id, text in self.spool.pending():
            if await self._send(call_id, text):
                acked += 1
        return acked

    async def _redeliver_loop(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.redeliver()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.retry_interval_s):
                    await self._wake.wait()
            self._wake.clear()

    async def _send(self, call_id: str, text: str, *, fresh: bool = False) -> bool:
        """Deliver one spooled record; the file goes only after the daemon's ok.

        ``fresh``: ``text`` was just built and dumped here, so it is sent as
        it is. A record read back from the spool is checked against the schema
        first (a torn or older file): one that fails is set aside in
        ``rejected/`` at once, as the daemon would refuse it."""
        if call_id in self._inflight:
            return False
        self._inflight.add(call_id)
        try:
            if not fresh:
                try:
                    text = record.dumps(record.loads(text))
                except record.RecordError as e:
                    log.error("sclate: spooled record %s refused: %s", call_id, e)
                    self.spool.reject(call_id)
                    return False
            await self.client.request("record", {}, self.send_timeout_s, raw=f'"record": {text}')
            self.spool.remove(call_id)
            return True
        except ControlError as e:
            if e.reason.startswith("INVALID"):
                log.error("sclate: record %s rejected: %s", call_id, e)
                self.spool.reject(call_id)
            return False
        except (OSError, ConnectionError, TimeoutError, ValueError):
            return False
        finally:
            self._inflight.discard(call_id)


addons = [SclateCapture()]
