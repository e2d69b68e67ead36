"""The one place that turns sclate errors into gRPC statuses (and checks tokens)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from sclated.api._auth import TokenTable, current_tenant
from sclated.api._observer import NO_API_OBSERVER, ApiObserver
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

__all__ = ["MAX_STATUS_MESSAGE_BYTES", "MAX_TRAILER_CHARS", "SclateInterceptor", "status_for"]

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
MAX_STATUS_MESSAGE_BYTES = 1024
"""A status message is a header: clients refuse headers past 8-16 KiB, so an error that
quotes a huge input would reach them as their own RESOURCE_EXHAUSTED, naming nothing."""
MAX_TRAILER_CHARS = 256


def status_for(exc: SclateError) -> grpc.StatusCode:
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.UNKNOWN


def _code_name(exc: BaseException, context: grpc.aio.ServicerContext) -> str:
    """The status a call that raised ``exc`` ends with (what _abort sends)."""
    code: Any = grpc.StatusCode.INTERNAL
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        code = grpc.StatusCode.CANCELLED  # the client went away (or the server is stopping)
    elif isinstance(exc, grpc.aio.AbortError):
        code = context.code()
    elif isinstance(exc, SclateError):
        code = status_for(exc)
    return str(code.name) if isinstance(code, grpc.StatusCode) else "UNKNOWN"


def _header_value(text: str) -> str:
    """``text`` as a legal metadata value: printable ASCII (others escaped), bounded.

    gRPC refuses to send any other byte in a header and fails the whole call
    with INTERNAL instead (a field named after a label key such as ``é``)."""
    escaped = "".join(c if " " <= c <= "~" else c.encode("unicode_escape").decode("ascii") for c in text)
    if len(escaped) > MAX_TRAILER_CHARS:
        escaped = escaped[: MAX_TRAILER_CHARS - 3] + "..."
    return escaped


def _status_message(text: str) -> str:
    """``text`` cut to :data:`MAX_STATUS_MESSAGE_BYTES` of UTF-8, saying how much was cut."""
    data = text.encode()
    if len(data) <= MAX_STATUS_MESSAGE_BYTES:
        return text
    head = data[: MAX_STATUS_MESSAGE_BYTES - 64].decode(errors="ignore")
    return f"{head}... ({len(text) - len(head)} more characters)"


def _trailers(exc: SclateError) -> tuple[tuple[str, str], ...]:
    out = [("sclate-reason", _header_value(exc.reason))]
    if exc.field:
        out.append(("sclate-field", _header_value(exc.field)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class _Undecodable:
    """What the request deserializer hands on for bytes that are not the method's message."""

    problem: str


def _lenient(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """gRPC answers UNKNOWN when a request does not parse; this lets the handler refuse it
    as INVALID_ARGUMENT instead (after the token is checked, as for any request)."""
    if deserialize is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as exc:  # DecodeError; RecursionError on deep nesting
            return _Undecodable(str(exc) or type(exc).__name__)

    return parse


def _check_decoded(request: Any) -> None:
    if isinstance(request, _Undecodable):
        raise InvalidArgument(
            f"the request is not a valid message of the method's type: {request.problem}",
            field="request",
            reason="MALFORMED_REQUEST",
        )


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException) -> None:
    if isinstance(exc, SclateError):
        await context.abort(status_for(exc), _status_message(exc.message), _trailers(exc))
    log.exception("internal error", exc_info=exc)
    await context.abort(
        grpc.StatusCode.INTERNAL,
        "internal error; see the daemon's log",
        (("sclate-reason", "INTERNAL"),),
    )


class SclateInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no type information
    def __init__(self, tokens: TokenTable, observer: ApiObserver = NO_API_OBSERVER) -> None:
        self._tokens = tokens
        self._observer = observer
        """Told how every call ended and when server streams open and end (the daemon's metrics)."""

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
        # The method's own name (a handler exists: one of the service's, a bounded set).
        name = method.rsplit("/", 1)[-1]
        observer = self._observer
        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                code = "OK"
                try:
                    current_tenant.set(self._tenant(context))
                    _check_decoded(request)
                    return await inner_uu(request, context)
                except BaseException as exc:
                    code = _code_name(exc, context)
                    if not isinstance(exc, Exception) or isinstance(exc, grpc.aio.AbortError):
                        raise
                    await _abort(context, exc)
                finally:
                    observer.on_request(name, code)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary,
                request_deserializer=_lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                code = "OK"
                observer.on_stream(name, 1)
                try:
                    current_tenant.set(self._tenant(context))
                    _check_decoded(request)
                    async for item in inner_us(request, context):
                        yield item
                except BaseException as exc:
                    code = _code_name(exc, context)
                    if not isinstance(exc, Exception) or isinstance(exc, grpc.aio.AbortError):
                        raise
                    await _abort(context, exc)
                finally:
                    observer.on_stream(name, -1)
                    observer.on_request(name, code)

            return grpc.unary_stream_rpc_method_handler(
                unary_stream,
                request_deserializer=_lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler
