"""The HTTP front: routes, error shapes, access log, lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from sclated.errors import InvalidArgument, NotFound, SclateError, Unavailable

from ._anthropic import anthropic_error_body, handle_count_tokens, handle_messages
from ._chat import ChatRenderer
from ._common import USAGE, ServerContext, now
from ._config import ModelServerConfig
from ._continuation import Conversations
from ._embeddings import E5Embedder, handle_embeddings
from ._engine import Engine
from ._openai import error_body, handle_chat_completions, handle_completions
from ._responses import handle_responses

__all__ = ["RunningModelServer", "build_app", "serve_forever", "start_model_server"]

log = logging.getLogger("sclated.model")

_CONTEXT = web.AppKey("context", ServerContext)

# Claude Code and Codex send whole conversations plus tool schemas each call.
_MAX_BODY = 64 * 1024 * 1024

Handler = Callable[[ServerContext, web.Request, Any], Awaitable[web.StreamResponse]]


def _status(exc: SclateError) -> int:
    if isinstance(exc, InvalidArgument):
        return 400
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, Unavailable):
        return 503
    return 500


def _error_response(request: web.Request, exc: SclateError, status: int) -> web.Response:
    if request.path.startswith("/v1/messages"):
        return web.json_response(anthropic_error_body(exc, status), status=status)
    return web.json_response(error_body(exc, status), status=status)


@web.middleware
async def _errors_and_log(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    start = time.monotonic()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except SclateError as exc:
        status = _status(exc)
        return _error_response(request, exc, status)
    except web.HTTPException as exc:
        status = exc.status
        if status == 404:
            err: SclateError = NotFound(f"no route for {request.method} {request.path}", field="path")
        else:
            err = InvalidArgument(f"{exc.reason} for {request.method} {request.path}", field="method")
        return _error_response(request, err, status)
    except asyncio.CancelledError:
        status = 499  # the client went away
        raise
    except Exception as exc:
        log.exception("model server request failed: %s %s", request.method, request.path)
        return _error_response(request, SclateError(f"internal error: {exc}"), 500)
    finally:
        usage = request.get(USAGE)
        tokens = f" prompt={usage[0]} completion={usage[1]}" if usage else ""
        log.info("%s %s %d %.0fms%s", request.method, request.path, status, (time.monotonic() - start) * 1000, tokens)


async def _read_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"the request body is not valid JSON: {exc}", field="body") from exc


def _post(handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def route(request: web.Request) -> web.StreamResponse:
        body = await _read_json(request)
        return await handler(request.app[_CONTEXT], request, body)

    return route


async def _models(request: web.Request) -> web.StreamResponse:
    ctx = request.app[_CONTEXT]
    return web.json_response(
        {
            "object": "list",
            "data": [
                {
                    "id": ctx.model_name,
                    "object": "model",
                    "created": now(),
                    "owned_by": "sclate",
                    "max_model_len": ctx.engine.n_ctx,
                    # The served context and any RoPE stretch past the trained one.
                    **ctx.engine.context.as_json(),
                }
            ],
        }
    )


async def _health(request: web.Request) -> web.StreamResponse:
    ctx = request.app[_CONTEXT]
    return web.json_response(
        {
            "status": "ok",
            "model": ctx.model_name,
            "n_ctx": ctx.engine.n_ctx,
            "context": ctx.engine.context.as_json(),
            "prompts": ctx.engine.stats.as_json(),
            "continuation": ctx.conversations.as_json() if ctx.conversations is not None else {"enabled": False},
        }
    )


async def _embeddings_route(ctx: ServerContext, request: web.Request, body: Any) -> web.StreamResponse:
    return await handle_embeddings(ctx.embedder, request, body)


def build_app(ctx: ServerContext) -> web.Application:
    app = web.Application(middlewares=[_errors_and_log], client_max_size=_MAX_BODY)
    app[_CONTEXT] = ctx
    app.router.add_post("/v1/chat/completions", _post(handle_chat_completions))
    app.router.add_post("/v1/completions", _post(handle_completions))
    app.router.add_post("/v1/responses", _post(handle_responses))
    app.router.add_post("/v1/messages", _post(handle_messages))
    app.router.add_post("/v1/messages/count_tokens", _post(handle_count_tokens))
    app.router.add_post("/v1/embeddings", _post(_embeddings_route))
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    return app


@dataclass
class RunningModelServer:
    """A started server. ``url`` has no trailing slash and no ``/v1``."""

    host: str
    port: int
    engine: Engine
    model_name: str
    _runner: web.AppRunner

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        try:
            await self._runner.cleanup()
        finally:
            await self.engine.close()


async def start_model_server(config: ModelServerConfig) -> RunningModelServer:
    """Load the model (off the event loop) and start serving it."""
    engine = await Engine.load(config)
    try:
        renderer = ChatRenderer(engine.chat_template, engine.bos_token, engine.eos_token)
        name = config.served_model_name()
        embedder = E5Embedder() if config.embeddings else None
        runner = web.AppRunner(
            build_app(
                ServerContext(
                    engine,
                    renderer,
                    name,
                    embedder=embedder,
                    conversations=Conversations(
                        max_entries=config.continuation_entries,
                        max_bytes=config.continuation_bytes,
                        enabled=config.token_continuation,
                    ),
                )
            ),
            access_log=None,
            handler_cancellation=True,
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, config.host, config.port)
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
    except BaseException:
        await engine.close()
        raise
    port = int(runner.addresses[0][1])
    log.info("model server for %s (%s) at http://%s:%d", name, engine.path, config.host, port)
    return RunningModelServer(config.host, port, engine, name, runner)


def serve_forever(config: ModelServerConfig) -> None:
    """Serve until SIGINT or SIGTERM. The blocking entry point for CLIs."""

    async def main() -> None:
        server = await start_model_server(config)
        print(f"serving {server.model_name} at {server.url}/v1", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await server.close()

    asyncio.run(main())
