"""Is a run's result to be trusted? Capture health and the warnings a reader must see.

A score means nothing if the model endpoint was down, records were lost, or
messages reached the agent early: these are counted here from the run's
results and captured calls, and said in words next to the score.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sclated.capture import failure_cause

__all__ = ["capture_totals", "memory_token_share", "run_warnings", "summarize_calls", "summarize_components"]


def summarize_calls(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Captured model calls by role: token counts (a retry is not a new call), and every
    failed attempt by cause (retries included: each one hit a broken endpoint)."""
    return _summarize(records, lambda rec: str(rec.get("role", "unknown")))


def summarize_components(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same by component (``memory:mem0``, ``memory:embeddings``, ``agent``); the
    ``role`` key holds the component. Records from before components were recorded
    count under their role."""
    return _summarize(records, lambda rec: str(rec.get("component") or rec.get("role", "unknown")))


def memory_token_share(by_role: list[dict[str, Any]]) -> float | None:
    """The memory role's share of all tokens (None without any token)."""
    total = sum(r["prompt_tokens"] + r["completion_tokens"] for r in by_role)
    memory = sum(r["prompt_tokens"] + r["completion_tokens"] for r in by_role if r["role"] == "memory")
    return memory / total if total else None


def _summarize(records: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]) -> list[dict[str, Any]]:
    by_role: dict[str, dict[str, Any]] = {}
    for rec in records:
        role = key(rec)
        row = by_role.setdefault(
            role,
            {
                "role": role,
                "calls": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "failed": 0,
                "failed_by_cause": {},
                "unleased": 0,
            },
        )
        cause = failure_cause(rec)
        if cause is not None:
            row["failed"] += 1
            row["failed_by_cause"][cause] = row["failed_by_cause"].get(cause, 0) + 1
        if rec.get("unleased"):
            row["unleased"] += 1
        if rec.get("retry_of"):
            continue
        row["calls"] += 1
        usage = rec.get("usage") or {}
        row["prompt_tokens"] += int(usage.get("prompt_tokens") or usage.get("input_tokens") or 0)
        row["completion_tokens"] += int(usage.get("completion_tokens") or usage.get("output_tokens") or 0)
    return sorted(by_role.values(), key=lambda r: str(r["role"]))


def capture_totals(by_role: list[dict[str, Any]], at_close: dict[str, Any] | None) -> dict[str, Any]:
    """The run's capture health in one place: what failed, what went unleased, what was lost."""
    failed_by_cause: dict[str, int] = {}
    for row in by_role:
        for cause, n in row["failed_by_cause"].items():
            failed_by_cause[cause] = failed_by_cause.get(cause, 0) + n
    at_close = at_close or {}
    return {
        "calls": sum(r["calls"] for r in by_role),
        "calls_failed": sum(r["failed"] for r in by_role),
        "failed_by_cause": dict(sorted(failed_by_cause.items())),
        "calls_unleased": sum(r["unleased"] for r in by_role),
        "calls_lost": int(at_close.get("calls_lost", 0)),
        "calls_recovered_at_close": int(at_close.get("calls_recovered_at_close", 0)),
        "drain": str(at_close.get("drain", "")),
        "proxy_restarts": int(at_close.get("proxy_restarts", 0)),
        "prompt_tokens": sum(r["prompt_tokens"] for r in by_role),
        "completion_tokens": sum(r["completion_tokens"] for r in by_role),
    }


def run_warnings(results: dict[str, Any]) -> list[str]:
    """What a reader of the score must know, in words (empty when nothing is amiss)."""
    out: list[str] = []
    cap = results.get("capture") or {}
    if cap.get("calls_failed"):
        causes = ", ".join(f"{k} {v}" for k, v in (cap.get("failed_by_cause") or {}).items())
        out.append(f"{cap['calls_failed']} model call attempt(s) failed ({causes}) of {cap.get('calls', 0)} calls")
    if cap.get("calls") and not (cap.get("prompt_tokens") or cap.get("completion_tokens")):
        out.append(f"{cap['calls']} model calls captured, but no tokens: the model endpoint answered nothing usable")
    if cap.get("calls_lost"):
        out.append(f"{cap['calls_lost']} captured call record(s) were lost")
    if cap.get("calls_unleased"):
        out.append(f"{cap['calls_unleased']} model call(s) ran without a clock lease (simulated time may have jumped)")
    if cap.get("drain") and cap["drain"] != "ok":
        out.append(f"capture drain at sandbox close: {cap['drain']}")
    if cap.get("proxy_restarts"):
        out.append(
            f"the capture proxy (mitmdump) in the sandbox died {cap['proxy_restarts']} time(s) and was started "
            "again; the calls it had in flight then were not captured"
        )
    s = results.get("scheduler") or {}
    for lease in s.get("expired_leases") or []:
        out.append(
            f"lease {lease.get('name')} of {lease.get('holder')} expired after its TTL (its holder stopped "
            "reporting: a frozen sandbox, a process that died); simulated time may have moved while it worked"
        )
    if s.get("early_deliveries"):
        out.append(f"{s['early_deliveries']} message(s) were seen inside before their scheduled time")
    if s.get("out_of_order"):
        out.append(f"{s['out_of_order']} message(s) were received out of the schedule's order")
    if s.get("negative_delays"):
        out.append(f"{s['negative_delays']} delivery delay(s) were negative (a clock fault)")
    for judge in results.get("judges") or []:
        if judge.get("embedded"):
            out.append("verdicts judged by the embedded model: not comparable with published scores")
    harness = results.get("harness") or {}
    if harness.get("warning"):
        out.append(str(harness["warning"]))
    elif harness.get("process_clock") == "wall":
        out.append(
            f"the {harness.get('harness', 'harness')} process itself reads the wall clock (a static executable "
            "libfaketime cannot reach); the commands it runs see simulated time"
        )
    return out
