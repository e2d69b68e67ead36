"""The daemon's HTTP listener: the run viewer, its JSON reads, ``/metrics`` and ``/healthz``.

Read-only by construction: only GET and HEAD are routed, and any other method is
answered 405 before a token is even looked at. Every ``/api/v1`` read and
``/metrics`` needs a bearer token of the daemon's :class:`TokenTable` (none
without a tokens file: everything is the tenant ``local``), and reads go
through :class:`RunManager` with the token's tenant, so a run of another tenant
is a 404 exactly like a missing one, as in the gRPC API. The static viewer
files carry no data and are served without a token: the page reads the token
from its URL fragment, which the browser never sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Collection, Sequence
from importlib import resources
from typing import Any, Protocol

from aiohttp import web

from sclated.api import TokenTable
from sclated.capture import Sample
from sclated.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    SclateError,
    Unauthenticated,
    Unavailable,
)
from sclated.report import finite_json
from sclated.runs import RunManager, RunView, SnapshotView

__all__ = ["HttpListener", "MetricsSource", "build_app"]

log = logging.getLogger("sclated.web")

_READ_METHODS = frozenset({"GET", "HEAD"})
_STATIC_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
_STATUS: tuple[tuple[type[SclateError], int], ...] = (
    (InvalidArgument, 400),
    (Unauthenticated, 401),
    (PermissionDenied, 403),
    (NotFound, 404),
    (FailedPrecondition, 409),
    (Unavailable, 503),
)


class MetricsSource(Protocol):
    """What ``/metrics`` serves: a rendering of the daemon's metrics (Prometheus text)."""

    content_type: str

    def render(self) -> bytes: ...


_MANAGER = web.AppKey("manager", RunManager)
_TOKENS = web.AppKey("tokens", TokenTable)
_METRICS: web.AppKey[MetricsSource | None] = web.AppKey("metrics")
_SERVING: web.AppKey[Callable[[], bool]] = web.AppKey("serving")
_METRICS_READERS: web.AppKey[frozenset[str] | None] = web.AppKey("metrics_readers")


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(finite_json(data), allow_nan=False, default=str),
        status=status,
        content_type="application/json",
    )


def _error(status: int, message: str, field: str = "") -> web.Response:
    body: dict[str, Any] = {"error": message, "code": status}
    if field:
        body["field"] = field
    return _json(body, status)


def _status_of(exc: SclateError) -> int:
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def run_json(view: RunView) -> dict[str, Any]:
    return {
        "name": view.name,
        "run_id": view.run_id,
        "spec": view.spec.to_dict(),
        "state": view.state,
        "reason": view.reason,
        "create_ns": view.create_ns,
        "start_ns": view.start_ns,
        "end_ns": view.end_ns,
        "sim_ns": view.sim_ns,
        "last_event_seq": view.last_event_seq,
        "results": view.results,
        "parent": view.parent,
        "history_expired": view.history_expired,
    }


def _snapshot_json(snap: SnapshotView) -> dict[str, Any]:
    return {
        "name": snap.name,
        "snapshot_id": snap.snapshot_id,
        "create_ns": snap.create_ns,
        "sim_ns": snap.sim_ns,
        "journal_length": snap.journal_length,
        "image": snap.image,
        "agent_state": snap.agent_state,
    }


def _sample_json(sample: Sample) -> dict[str, Any]:
    return {
        "sample_id": sample.sample_id,
        "role": sample.role,
        "thread": sample.thread,
        "branch_reason": sample.branch_reason,
        "call_ids": list(sample.call_ids),
        "choices": list(sample.choices),
        "prompt_token_ids": list(sample.prompt_token_ids),
        "response_ids": list(sample.response_ids),
        "loss_mask": list(sample.loss_mask),
        "logprobs": list(sample.logprobs),
        "segment_ends": list(sample.segment_ends),
        "reward": sample.reward,
    }


def _event_json(ev: Any) -> dict[str, Any]:
    return {"seq": ev.seq, "kind": ev.kind, "sim_ns": ev.sim_ns, "wall_ns": ev.wall_ns, "payload": ev.payload}


# -- middlewares ------------------------------------------------------------------------
@web.middleware
async def _read_only(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Any:
    """Any method but GET and HEAD is refused first, before auth: the listener changes nothing."""
    if request.method not in _READ_METHODS:
        resp = _error(405, f"method {request.method} not allowed: the HTTP listener is read-only (GET, HEAD)")
        resp.headers["Allow"] = "GET, HEAD"
        return resp
    return await handler(request)


@web.middleware
async def _errors(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Any:
    try:
        return await handler(request)
    except SclateError as exc:
        return _error(_status_of(exc), exc.message, exc.field or "")
    except web.HTTPException as exc:
        if exc.status >= 400:
            return _error(exc.status, exc.reason)
        raise


def _tenant(request: web.Request) -> str:
    """The token's tenant (Unauthenticated: 401); 503 until the daemon serves."""
    tenant = request.app[_TOKENS].tenant_for(request.headers.get("Authorization"))
    if not request.app[_SERVING]():
        raise Unavailable("the daemon is not serving (starting or stopping)", reason="NOT_SERVING")
    return tenant


def _name(request: web.Request) -> str:
    return f"runs/{request.match_info['run']}"


# -- handlers ---------------------------------------------------------------------------
async def _healthz(request: web.Request) -> web.Response:
    if request.app[_SERVING]():
        return web.Response(text="ok\n")
    return web.Response(text="not serving (starting or stopping)\n", status=503)


async def _metrics(request: web.Request) -> web.Response:
    tenant = request.app[_TOKENS].tenant_for(request.headers.get("Authorization"))
    readers = request.app[_METRICS_READERS]
    # The metrics name every tenant and count their runs: an operator's read, not a tenant's.
    if readers is not None and tenant not in readers:
        raise PermissionDenied(
            f"tenant {tenant!r} may not read /metrics (it names every tenant): list it in metrics_readers",
            field="metrics_readers",
        )
    source = request.app[_METRICS]
    if source is None:
        raise NotFound("this daemon serves no metrics")
    resp = web.Response(body=source.render())
    resp.headers["Content-Type"] = source.content_type
    return resp


def _static(name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        return await _static_file(name)

    return handler


def _read_static(name: str) -> bytes | None:
    path = resources.files("sclated.web").joinpath("static", name)
    return path.read_bytes() if path.is_file() else None


async def _static_file(name: str) -> web.Response:
    """One of the viewer's files (a flat folder: no path, no hidden file, known types)."""
    suffix = name[name.rfind(".") :]
    if "/" in name or name.startswith(".") or suffix not in _STATIC_TYPES:
        raise NotFound(f"no file {name!r}")
    body = await asyncio.to_thread(_read_static, name)
    if body is None:
        raise NotFound(f"no file {name!r}")
    resp = web.Response(body=body, content_type=_STATIC_TYPES[suffix])
    resp.headers["Cache-Control"] = "no-cache"
    return resp


async def _asset(request: web.Request) -> web.Response:
    return await _static_file(request.match_info["file"])


async def _whoami(request: web.Request) -> web.Response:
    return _json({"tenant": _tenant(request)})


async def _runs(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    q = request.query
    try:
        size = int(q.get("page_size", "0") or 0)
    except ValueError:
        raise InvalidArgument("page_size must be an integer", field="page_size") from None
    views, token = await request.app[_MANAGER].list(
        tenant, page_size=size, page_token=q.get("page_token", ""), filter=q.get("filter", "")
    )
    return _json({"runs": [run_json(v) for v in views], "next_page_token": token})


async def _run(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    manager = request.app[_MANAGER]
    name = _name(request)
    view = await manager.get(tenant, name)
    snapshots = await manager.list_snapshots(tenant, name)
    children = await manager.children(tenant, name)
    group: Sequence[RunView] = ()
    if view.spec.group:
        with contextlib.suppress(NotFound):
            group = await manager.group_runs(tenant, view.spec.group)
    return _json(
        {
            "run": run_json(view),
            "snapshots": [_snapshot_json(s) for s in snapshots],
            "children": [{"name": c.name, "state": c.state, "reason": c.reason} for c in children],
            "group": [{"name": g.name, "state": g.state, "index": g.spec.group_index} for g in group],
        }
    )


def _after_seq(request: web.Request) -> int:
    try:
        return int(request.query.get("after_seq", "0") or 0)
    except ValueError:
        raise InvalidArgument("after_seq must be an integer", field="after_seq") from None


async def _events(request: web.Request) -> web.StreamResponse:
    """The run's events: ``?follow=1`` streams them as NDJSON (history, then live, until the
    run ends) for ``fetch()`` with the Authorization header (EventSource cannot send one);
    otherwise the events so far as one JSON document."""
    tenant = _tenant(request)
    manager = request.app[_MANAGER]
    name = _name(request)
    after = _after_seq(request)
    if request.query.get("follow") not in ("1", "true"):
        view = await manager.get(tenant, name)
        events: list[dict[str, Any]] = []
        if view.last_event_seq > after:
            async with contextlib.aclosing(manager.watch(tenant, name, after)) as history:
                async for ev in history:
                    events.append(_event_json(ev))
                    if ev.seq >= view.last_event_seq:
                        break
        return _json({"events": events})
    stream = manager.watch(tenant, name, after)
    # The first event is awaited before the headers go out, so a missing run is a 404.
    first = await anext(stream, None)
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    try:
        if first is not None:
            await resp.write(json.dumps(finite_json(_event_json(first)), default=str).encode() + b"\n")
            async for ev in stream:
                await resp.write(json.dumps(finite_json(_event_json(ev)), default=str).encode() + b"\n")
        await resp.write(b'{"end": true}\n')
    except (ConnectionResetError, SclateError) as exc:
        log.debug("watch stream of %s ended: %s", name, exc)
    finally:
        await stream.aclose()
    with contextlib.suppress(ConnectionResetError):
        await resp.write_eof()
    return resp


async def _calls(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    return _json({"calls": await request.app[_MANAGER].calls(tenant, _name(request))})


async def _trajectories(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    samples = await request.app[_MANAGER].trajectories(tenant, _name(request), only=())
    return _json({"samples": [_sample_json(s) for s in samples]})


def build_app(
    manager: RunManager,
    tokens: TokenTable,
    *,
    metrics: MetricsSource | None = None,
    metrics_readers: Collection[str] | None = None,
    serving: Callable[[], bool] = lambda: True,
) -> web.Application:
    """The listener's application. ``metrics_readers``: the tenants that may read
    /metrics (None: any token's). ``serving``: whether the daemon serves now (False
    while it starts and once it stops): /healthz answers 503 then."""
    app = web.Application(middlewares=[_read_only, _errors])
    app[_MANAGER] = manager
    app[_TOKENS] = tokens
    app[_METRICS] = metrics
    app[_METRICS_READERS] = None if metrics_readers is None else frozenset(metrics_readers)
    app[_SERVING] = serving
    r = app.router
    r.add_get("/healthz", _healthz)
    r.add_get("/metrics", _metrics)
    r.add_get("/", _static("index.html"))
    r.add_get("/static/{file}", _asset)
    r.add_get("/api/v1/whoami", _whoami)
    r.add_get("/api/v1/runs", _runs)
    r.add_get("/api/v1/runs/{run}", _run)
    r.add_get("/api/v1/runs/{run}/events", _events)
    r.add_get("/api/v1/runs/{run}/calls", _calls)
    r.add_get("/api/v1/runs/{run}/trajectories", _trajectories)
    return app


class HttpListener:
    """An aiohttp runner and its one TCP site: ``start()`` sets both up, ``close()``
    lets both go (the site with the runner), whatever part of ``start()`` happened."""

    def __init__(
        self,
        listen: str,
        app: web.Application,
        *,
        shutdown_timeout_s: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.listen = listen
        self.ssl_context = ssl_context
        """HTTPS when set (the daemon's tls_cert and tls_key): tokens never cross in clear."""
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout_s)
        self.address: str | None = None
        """``HOST:PORT`` bound (the port picked when ``listen`` asked for 0)."""

    async def start(self) -> None:
        host, _, port = self.listen.rpartition(":")
        await self._runner.setup()
        site = web.TCPSite(self._runner, host.strip("[]"), int(port), reuse_address=True, ssl_context=self.ssl_context)
        await site.start()
        self.address = f"{host}:{self._runner.addresses[0][1]}"

    async def close(self) -> None:
        self.address = None
        await self._runner.cleanup()
