"""Why a captured model call failed, from its record alone.

A run must not hide a broken substrate: every failed call is counted by cause
and role, so a run whose model endpoint died says so instead of reporting a
score of 0 as if the agent had answered badly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["FAILURE_CAUSES", "failure_cause"]

FAILURE_CAUSES = ("unreachable", "upstream_5xx", "timeout", "context_length", "rejected", "bad_response", "aborted")
"""``unreachable``: the model endpoint could not be reached (connection refused, the
bridge's 502 ``sclate_model_unavailable``, the model process died mid-call);
``upstream_5xx``: the server answered with another 5xx; ``timeout``: no answer in
time (504 or a timed-out connection); ``context_length``: the prompt did not fit the
model's context (a 400 saying so in the API's own words: a harness's history or tool
list outgrew the model); ``rejected``: the server refused the request for another
reason (4xx); ``bad_response``: a 2xx answer that is not a complete response (a stream
without its final event, a body that does not parse); ``aborted``: the caller hung
up or the proxy failed before an answer."""

_UNREACHABLE_WORDS = (
    "refused",
    "unreachable",
    "connect call failed",
    "cannot connect",
    "failed to connect",
    "no route",
    "name or service",
    "reset by peer",
    "server disconnected",
)


def _too_long(response: Any) -> bool:
    """Whether an error body says the prompt exceeded the context (OpenAI's code, Anthropic's words)."""
    if not isinstance(response, Mapping):
        return False
    err = response.get("error")
    if not isinstance(err, Mapping):
        return False
    message = str(err.get("message") or "").lower()
    return err.get("code") == "context_length_exceeded" or message.startswith("prompt is too long")


def _error_type(response: Any) -> str:
    if isinstance(response, Mapping):
        err = response.get("error")
        if isinstance(err, Mapping):
            return str(err.get("type") or "")
    return ""


def failure_cause(record: Mapping[str, Any]) -> str | None:
    """The cause of a failed call (one of FAILURE_CAUSES), or None when it succeeded."""
    status = record.get("status")
    error = str(record.get("error") or "").lower()
    complete = bool(record.get("complete"))
    if isinstance(status, int):
        if status == 502 and _error_type(record.get("response")) == "sclate_model_unavailable":
            return "unreachable"
        if status == 504:
            return "timeout"
        if status >= 500:
            return "upstream_5xx"
        if status >= 400:
            return "context_length" if _too_long(record.get("response")) else "rejected"
        if complete and not error:
            return None
        if "timeout" in error or "timed out" in error:
            return "timeout"
        return "bad_response" if not error else "aborted"
    if not error and complete:
        return None
    if "timeout" in error or "timed out" in error:
        return "timeout"
    if any(word in error for word in _UNREACHABLE_WORDS):
        return "unreachable"
    return "aborted"
