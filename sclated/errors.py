"""The errors sclate raises. Every one derives from :class:`SclateError`.

The tree::

    SclateError                    root; `reason` is a stable machine-readable code
    ├── InvalidArgument            bad input: names the field or event that was wrong
    │   ├── ScheduleError          an event that cannot be scheduled (past, cycle, unknown dependency, ...)
    │   ├── ExportContractError    trainer rows that break their own contract
    │   └── ConfigError            a daemon set-up it cannot start with: names the file (and line)
    ├── NotFound                   a resource that does not exist (or belongs to another tenant)
    ├── PermissionDenied           a host path outside the data roots the daemon gives the tenant
    ├── AlreadyExists              a resource name already taken
    ├── FailedPrecondition         the resource is in the wrong state for the call
    ├── Unauthenticated            missing or unknown credentials
    ├── ResourceExhausted          a quota or bound is reached
    └── Unavailable                a dependency (Docker engine, model endpoint, daemon) is not answering
        ├── RuntimeUnavailable     the container engine
        └── ModelUnavailable       the model endpoint

The API layer maps each branch to one gRPC status code in a single interceptor;
nothing else in the daemon knows about status codes.
"""

from __future__ import annotations

import os

__all__ = [
    "AlreadyExists",
    "ConfigError",
    "ExportContractError",
    "FailedPrecondition",
    "InvalidArgument",
    "ModelUnavailable",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "RuntimeUnavailable",
    "ScheduleError",
    "SclateError",
    "Unauthenticated",
    "Unavailable",
    "describe",
]


class SclateError(Exception):
    """Root of every error sclate raises on purpose."""

    default_reason = "SCLATE_ERROR"

    def __init__(self, message: str, *, reason: str | None = None, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason
        self.field = field


class InvalidArgument(SclateError):
    default_reason = "INVALID_ARGUMENT"


class ScheduleError(InvalidArgument):
    default_reason = "INVALID_EVENT"

    def __init__(self, message: str, *, event_id: str | None = None, reason: str | None = None):
        super().__init__(message, reason=reason, field=event_id)
        self.event_id = event_id


class ExportContractError(InvalidArgument):
    default_reason = "EXPORT_CONTRACT"


class ConfigError(InvalidArgument):
    """A configuration the daemon cannot start with: a config or tokens file, a
    flag, or what they point at (a TLS file, a state directory, an address).

    The message starts with where the problem is, when it is in a file:
    ``/etc/sclated/tokens, line 3: token shorter than 16 characters``.
    """

    default_reason = "BAD_CONFIG"

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike[str] | None = None,
        line: int | None = None,
        column: int | None = None,
        field: str | None = None,
    ):
        where = ""
        if path is not None:
            where = str(path)
            if line is not None:
                where += f", line {line}"
                if column is not None:
                    where += f", column {column}"
            where += ": "
        super().__init__(where + message, field=field)
        self.path = None if path is None else str(path)
        self.line = line
        self.column = column
        self.problem = message


class NotFound(SclateError):
    default_reason = "NOT_FOUND"


class PermissionDenied(SclateError):
    """The caller may not use what it named (a host path outside its data roots).

    The message names the field, never what is at the path: it reads the same
    whether the path exists or not."""

    default_reason = "PERMISSION_DENIED"


class AlreadyExists(SclateError):
    default_reason = "ALREADY_EXISTS"


class FailedPrecondition(SclateError):
    default_reason = "FAILED_PRECONDITION"


class Unauthenticated(SclateError):
    default_reason = "UNAUTHENTICATED"


class ResourceExhausted(SclateError):
    default_reason = "RESOURCE_EXHAUSTED"


class Unavailable(SclateError):
    default_reason = "UNAVAILABLE"


class RuntimeUnavailable(Unavailable):
    default_reason = "RUNTIME_UNAVAILABLE"


class ModelUnavailable(Unavailable):
    default_reason = "MODEL_UNAVAILABLE"


def describe(exc: BaseException) -> str:
    """One line saying what went wrong, for a run's reason or a log: a SclateError's own
    message, otherwise the exception's type and message. Some exceptions carry no message
    (``TimeoutError()`` from ``asyncio.timeout``); their reason must still say something."""
    if isinstance(exc, SclateError):
        return exc.message
    text = str(exc).strip()
    if not text:
        return f"{type(exc).__name__} (raised without a message)"
    return f"{type(exc).__name__}: {text}"
