"""The gRPC face of the daemon: the sclate.v1 servicer, auth and the error interceptor."""

from sclated.api._auth import LOCAL_TENANT, TokenTable, current_tenant, parse_tokens
from sclated.api._interceptor import MAX_STATUS_MESSAGE_BYTES, MAX_TRAILER_CHARS, SclateInterceptor, status_for
from sclated.api._observer import NO_API_OBSERVER, ApiObserver
from sclated.api._servicer import SclateServicer

__all__ = [
    "LOCAL_TENANT",
    "MAX_STATUS_MESSAGE_BYTES",
    "MAX_TRAILER_CHARS",
    "NO_API_OBSERVER",
    "ApiObserver",
    "SclateInterceptor",
    "SclateServicer",
    "TokenTable",
    "current_tenant",
    "parse_tokens",
    "status_for",
]
