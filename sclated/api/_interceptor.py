"""The one place that turns sclate errors into gRPC statuses (and checks tokens)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from sclated.api._auth import TokenTable, current_tenant
from sclated.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    SclateError,
    Unauthenticated,
    Unavailable,
)

__all__ = ["SclateInterceptor", "status_for"]

log = logging.getLogger("sclated.api")

_CODES: tuple[tuple[type[SclateError], grpc.StatusCode], ...] = (
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
)
_OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


def status_for(exc: SclateError) -> grpc.StatusCode:
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.UNKNOWN


def _trailers(exc: SclateError) -> tuple[tuple[str, str], ...]:
    out = [("sclate-reason", exc.reason)]
    if exc.field:
        out.append(("sclate-field", exc.field))
    return tuple(out)


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException) -> None:
    if isinstance(exc, SclateError):
        await context.abort(status_for(exc), exc.message, _trailers(exc))
    log.exception("internal error", exc_info=exc)
    await context.abort(
        grpc.StatusCode.INTERNAL,
        "internal error; see the daemon's log",
        (("sclate-reason", "INTERNAL"),),
    )


class SclateInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no type information
    def __init__(self, tokens: TokenTable) -> None:
        self._tokens = tokens

    def _tenant(self, context: grpc.aio.ServicerContext) -> str:
        auth = None
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                auth = value if isinstance(value, str) else value.decode()
        return self._tokens.tenant_for(auth)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(_OPEN_PREFIXES):
            return handler
        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                try:
                    current_tenant.set(self._tenant(context))
                    return await inner_uu(request, context)
                except (SclateError, Exception) as exc:
                    if isinstance(exc, grpc.aio.AbortError):
                        raise
                    await _abort(context, exc)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                try:
                    current_tenant.set(self._tenant(context))
                    async for item in inner_us(request, context):
                        yield item
                except (SclateError, Exception) as exc:
                    if isinstance(exc, grpc.aio.AbortError):
                        raise
                    await _abort(context, exc)

            return grpc.unary_stream_rpc_method_handler(
                unary_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler
