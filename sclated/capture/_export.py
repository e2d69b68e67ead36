"""Trainer and evaluation exports of trajectory samples.

Every format is JSON Lines, one row per sample:

- ``skyrl``: the per-sample fields of SkyRL's ``GeneratorOutput``
  (``prompt_token_ids``, ``response_ids``, ``loss_masks``,
  ``rollout_logprobs``, ``rewards``, ``trajectory_id``, ``stop_reason``).
- ``verl``: the unpadded rows verl's agent loop turns into its batch
  (``prompts``, ``responses``, ``response_mask``, ``rollout_log_probs``,
  ``reward``, ``uid``, ``num_turns``).
- ``atif``: one Agent Trajectory Interchange Format (ATIF-v1.4, Harbor) object
  per sample, with per-step token ids and logprobs in ``metrics``.

Rewards: every row has the sample's scalar reward (``rewards`` in skyrl,
``reward`` in verl, ``extra.reward`` in atif: the mean of the rounds credited
to the sample) and its per-token form ``token_rewards`` (as long as the
response; each round's verdict at the last token of that round's last call,
0.0 elsewhere: SkyRL's ``List[List[float]]`` form of ``rewards``, verl's
``rm_scores`` row). Both trainers' GRPO sum a row's per-token rewards, so the
per-token form of a sample crediting k rounds scores k times its scalar: use one
form for a whole training run. ``metadata.round_rewards`` (atif:
``extra.round_rewards``) lists the credits; verl rows also carry them as
``turn_scores``.

A sample without a reward (none of its rounds graded yet) is never written
with an invented one: :func:`export_samples` leaves it out and names it in its
:class:`ExportReport` (or refuses the whole export, ``unrewarded="refuse"``);
:func:`export` refuses.

Each row is checked against its format's contract before anything is
written, and the file is written to a temp name and renamed, so a failed
export leaves no partial file. This is blocking file I/O: call it from a
worker thread (``asyncio.to_thread``) on the daemon's loop.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sclated.capture._record import CallRecord
from sclated.capture._trajectories import Sample
from sclated.errors import ExportContractError, FailedPrecondition, InvalidArgument

__all__ = [
    "ATIF_SCHEMA_VERSION",
    "EXPORT_FORMATS",
    "LEFT_OUT_REASONS",
    "UNREWARDED_POLICIES",
    "ExportReport",
    "LeftOut",
    "export",
    "export_samples",
    "left_out_reason",
]

EXPORT_FORMATS = ("skyrl", "verl", "atif")
ATIF_SCHEMA_VERSION = "ATIF-v1.4"
UNREWARDED_POLICIES = ("skip", "refuse")
#: Why a sample was left out of an export: ``ungraded``: its calls belong to
#: rounds (or, in ``run`` mode, a run) with no verdict yet; ``no_round``: none of
#: its calls lies in a turn of a round (memory consolidation, a cron tick);
#: ``before_branch`` (group exports): every call of it precedes the branch point.
LEFT_OUT_REASONS = ("ungraded", "no_round", "before_branch")


@dataclass(frozen=True)
class LeftOut:
    sample_id: str
    reason: str
    run: str = ""
    """The run (a group member's name in group exports) the sample came from."""


@dataclass(frozen=True)
class ExportReport:
    """What an export wrote and what it left out (and why)."""

    rows: int
    left_out: tuple[LeftOut, ...] = ()

    def left_out_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for lo in self.left_out:
            out[lo.reason] = out.get(lo.reason, 0) + 1
        return out


def left_out_reason(s: Sample) -> str:
    """Why a sample has no reward (see :data:`LEFT_OUT_REASONS`)."""
    if s.rounds and all(r is None for r in s.rounds):
        return "no_round"
    return "ungraded"


def check_export_args(format: str, unrewarded: str = "skip") -> None:
    """INVALID_ARGUMENT for an unknown format or unrewarded policy."""
    if format not in EXPORT_FORMATS:
        raise InvalidArgument(
            f"unknown export format {format!r}; one of {', '.join(EXPORT_FORMATS)}",
            field="format",
        )
    if unrewarded not in UNREWARDED_POLICIES:
        raise InvalidArgument(
            f"unknown policy for unrewarded samples {unrewarded!r}; one of {', '.join(UNREWARDED_POLICIES)}",
            field="unrewarded",
        )


def _fail(sample: Sample, fmt: str, why: str) -> ExportContractError:
    return ExportContractError(f"{fmt} export: sample {sample.sample_id}: {why}", field=sample.sample_id)


def _check_common(s: Sample, fmt: str) -> None:
    n = len(s.response_ids)
    if not s.prompt_token_ids:
        raise _fail(s, fmt, "empty prompt_token_ids")
    if n == 0:
        raise _fail(s, fmt, "empty response_ids")
    if len(s.loss_mask) != n:
        raise _fail(s, fmt, f"{len(s.loss_mask)} loss mask entries for {n} response ids")
    if len(s.logprobs) != n:
        raise _fail(s, fmt, f"{len(s.logprobs)} logprobs for {n} response ids")
    if any(m not in (0, 1) for m in s.loss_mask):
        raise _fail(s, fmt, "loss mask entries must be 0 or 1")
    if any(lp is not None and not math.isfinite(lp) for lp in s.logprobs):
        raise _fail(s, fmt, "non-finite logprob")
    if s.reward is None:
        raise _fail(s, fmt, "no reward (join verdicts with attach_rewards first)")
    if not math.isfinite(s.reward):
        raise _fail(s, fmt, f"non-finite reward {s.reward}")


def _logprobs(s: Sample) -> list[float] | None:
    # A trainer either gets logprobs for every token or none: a partial list
    # would silently misalign importance ratios.
    return [float(lp) for lp in s.logprobs if lp is not None] if s.has_logprobs else None


def _metadata(s: Sample) -> dict[str, Any]:
    return {
        "run": s.run,
        "role": s.role,
        "thread": s.thread,
        "branch_reason": s.branch_reason,
        "call_ids": list(s.call_ids),
        "turns": list(s.turns),
        "models": sorted({r.model for r in s.records if r.model}),
        "reward": s.reward,
        "round_rewards": _round_rewards(s),
        "rounds": list(s.rounds),
    }


def _round_rewards(s: Sample) -> list[dict[str, Any]]:
    return [{"round_id": c.round_id, "score": c.score, "index": c.index} for c in s.credits]


def _skyrl_row(s: Sample) -> dict[str, Any]:
    return {
        "trajectory_id": s.sample_id,
        "prompt_token_ids": list(s.prompt_token_ids),
        "response_ids": list(s.response_ids),
        "loss_masks": list(s.loss_mask),
        "rollout_logprobs": _logprobs(s),
        "rewards": s.reward,
        "token_rewards": list(s.token_rewards),
        "stop_reason": s.finish_reason,
        "metadata": _metadata(s),
    }


def _verl_row(s: Sample) -> dict[str, Any]:
    return {
        "uid": s.sample_id,
        "prompts": list(s.prompt_token_ids),
        "responses": list(s.response_ids),
        "response_mask": list(s.loss_mask),
        "rollout_log_probs": _logprobs(s),
        "reward": s.reward,
        "token_rewards": list(s.token_rewards),
        "turn_scores": [c.score for c in s.credits],
        "num_turns": len(s.records),
        "metadata": _metadata(s),
    }


# -- ATIF -------------------------------------------------------------------


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict):
                if isinstance(p.get("text"), str):
                    parts.append(p["text"])
                elif p.get("type") == "tool_result":
                    parts.append(_text(p.get("content")))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _messages(rec: CallRecord) -> list[dict[str, Any]]:
    body = rec.request if isinstance(rec.request, dict) else {}
    if rec.api in ("openai_chat", "anthropic_messages"):
        msgs = body.get("messages")
        out = [m for m in msgs if isinstance(m, dict)] if isinstance(msgs, list) else []
        if rec.api == "anthropic_messages" and body.get("system") is not None:
            out = [{"role": "system", "content": body["system"]}, *out]
        return out
    if rec.api == "openai_responses":
        inp = body.get("input")
        out = []
        if body.get("instructions"):
            out.append({"role": "system", "content": body["instructions"]})
        if isinstance(inp, str):
            out.append({"role": "user", "content": inp})
        elif isinstance(inp, list):
            out.extend(m for m in inp if isinstance(m, dict))
        return out
    if isinstance(body.get("prompt"), str):
        return [{"role": "user", "content": body["prompt"]}]
    return []


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return {"_raw": raw}
        return parsed if isinstance(parsed, dict) else {"_value": parsed}
    return {}


def _agent_output(rec: CallRecord, choice: int) -> tuple[str, str | None, list[dict[str, Any]]]:
    resp = rec.response if isinstance(rec.response, dict) else {}
    calls: list[dict[str, Any]] = []
    if rec.api == "anthropic_messages":
        texts, thinking = [], []
        for b in resp.get("content") or []:
            if not isinstance(b, dict):
                continue
            if b.get("type") == "text":
                texts.append(str(b.get("text", "")))
            elif b.get("type") == "thinking":
                thinking.append(str(b.get("thinking", "")))
            elif b.get("type") == "tool_use":
                calls.append(
                    {
                        "tool_call_id": str(b.get("id", "")),
                        "function_name": str(b.get("name", "")),
                        "arguments": _args(b.get("input")),
                    }
                )
        return "".join(texts), ("".join(thinking) or None), calls
    for ch in resp.get("choices") or []:
        if not isinstance(ch, dict) or ch.get("index", 0) != choice:
            continue
        msg = ch.get("message") if isinstance(ch.get("message"), dict) else None
        if msg is None:
            return str(ch.get("text", "")), None, []
        for tc in msg.get("tool_calls") or []:
            if not isinstance(tc, dict):
                continue
            raw_fn = tc.get("function")
            fn: dict[str, Any] = raw_fn if isinstance(raw_fn, dict) else {}
            calls.append(
                {
                    "tool_call_id": str(tc.get("id", "")),
                    "function_name": str(fn.get("name", "")),
                    "arguments": _args(fn.get("arguments")),
                }
            )
        reasoning = msg.get("reasoning_content") or msg.get("reasoning")
        return _text(msg.get("content")), (reasoning if isinstance(reasoning, str) else None), calls
    return "", None, calls


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat().replace("+00:00", "Z")


def _atif_row(s: Sample) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    seen_msgs = 0
    last_agent: dict[str, Any] | None = None
    totals = {"prompt": 0, "completion": 0, "cached": 0}

    def add(step: dict[str, Any]) -> dict[str, Any]:
        step["step_id"] = len(steps) + 1
        steps.append(step)
        return step

    for rec, choice in zip(s.records, s.choices, strict=True):
        msgs = _messages(rec)
        # Messages already shown are the prefix plus the assistant reply the
        # harness echoed back; only what follows is new.
        new = msgs[seen_msgs:] if seen_msgs <= len(msgs) else msgs
        for m in new:
            role = m.get("role")
            if role == "assistant":
                continue
            content = _text(m.get("content"))
            tool_id = m.get("tool_call_id")
            if role == "tool" and last_agent is not None:
                obs = last_agent.setdefault("observation", {"results": []})
                obs["results"].append({"source_call_id": tool_id, "content": content})
                continue
            raw_content = m.get("content")
            blocks: list[Any] = raw_content if isinstance(raw_content, list) else []
            results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
            if results and last_agent is not None:
                obs = last_agent.setdefault("observation", {"results": []})
                for b in results:
                    obs["results"].append({"source_call_id": b.get("tool_use_id"), "content": _text(b.get("content"))})
                continue
            source = "system" if role in ("system", "developer") else "user"
            add({"source": source, "message": content, "timestamp": _iso(rec.timings.start_ns)})
        seen_msgs = len(msgs) + 1
        text, reasoning, calls = _agent_output(rec, choice)
        comp = next((c for c in rec.completions if c.index == choice), None)
        usage = rec.usage or {}
        prompt_tokens = (
            len(rec.prompt_token_ids)
            if rec.prompt_token_ids is not None
            else usage.get("prompt_tokens", usage.get("input_tokens"))
        )
        completion_tokens = (
            len(comp.token_ids)
            if comp is not None and comp.token_ids is not None
            else usage.get("completion_tokens", usage.get("output_tokens"))
        )
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if cached is None:
            cached = usage.get("cache_read_input_tokens")
        metrics: dict[str, Any] = {}
        if isinstance(prompt_tokens, int):
            metrics["prompt_tokens"] = prompt_tokens
            totals["prompt"] += prompt_tokens
        if isinstance(completion_tokens, int):
            metrics["completion_tokens"] = completion_tokens
            totals["completion"] += completion_tokens
        if isinstance(cached, int):
            metrics["cached_tokens"] = cached
            totals["cached"] += cached
        if rec.prompt_token_ids is not None:
            metrics["prompt_token_ids"] = list(rec.prompt_token_ids)
        if comp is not None and comp.token_ids is not None:
            metrics["completion_token_ids"] = list(comp.token_ids)
        if comp is not None and comp.logprobs is not None:
            metrics["logprobs"] = list(comp.logprobs)
        step: dict[str, Any] = {
            "source": "agent",
            "timestamp": _iso(rec.timings.start_ns),
            "message": text,
            "metrics": metrics,
            "extra": {"call_id": rec.call_id, "role": rec.role, "turn": rec.turn},
        }
        if rec.model:
            step["model_name"] = rec.model
        if reasoning:
            step["reasoning_content"] = reasoning
        if calls:
            step["tool_calls"] = calls
        last_agent = add(step)
    models = [r.model for r in s.records if r.model]
    return {
        "schema_version": ATIF_SCHEMA_VERSION,
        "session_id": s.sample_id,
        "agent": {
            "name": "sclate",
            "version": "1",
            **({"model_name": models[0]} if models else {}),
        },
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": totals["prompt"],
            "total_completion_tokens": totals["completion"],
            "total_cached_tokens": totals["cached"],
            "total_steps": len(steps),
        },
        "extra": _metadata(s),
    }


def _check_atif(s: Sample, row: dict[str, Any]) -> None:
    steps = row["steps"]
    if not steps:
        raise _fail(s, "atif", "no steps")
    for i, st in enumerate(steps, start=1):
        if st["step_id"] != i:
            raise _fail(s, "atif", f"step ids not sequential at {i}")
        if st["source"] not in ("system", "user", "agent"):
            raise _fail(s, "atif", f"step {i}: bad source {st['source']!r}")
        m = st.get("metrics") or {}
        ids, lps = m.get("completion_token_ids"), m.get("logprobs")
        if ids is not None and lps is not None and len(ids) != len(lps):
            raise _fail(s, "atif", f"step {i}: {len(lps)} logprobs for {len(ids)} token ids")


# -- writing ----------------------------------------------------------------


def _write_atomic(out: Path, rows: list[dict[str, Any]]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False, allow_nan=False))
                f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def rows_for(samples: Iterable[Sample], format: str) -> list[dict[str, Any]]:
    """Each sample's row in ``format``, checked against the format's contract
    (ExportContractError naming the first bad sample)."""
    rows: list[dict[str, Any]] = []
    for s in samples:
        _check_common(s, format)
        if len(s.token_rewards) != len(s.response_ids):
            raise _fail(s, format, "token rewards not aligned with response ids")
        if format == "skyrl":
            rows.append(_skyrl_row(s))
        elif format == "verl":
            rows.append(_verl_row(s))
        else:
            row = _atif_row(s)
            _check_atif(s, row)
            rows.append(row)
    return rows


def write_rows(out_path: str | os.PathLike[str], rows: list[dict[str, Any]]) -> None:
    """Write JSON Lines atomically (a temp file renamed over ``out_path``)."""
    _write_atomic(Path(out_path), rows)


def refuse_unrewarded(left_out: list[LeftOut], total: int) -> FailedPrecondition:
    """The NO_REWARDS error for an export that would leave these samples out."""
    counts: dict[str, int] = {}
    for lo in left_out:
        counts[lo.reason] = counts.get(lo.reason, 0) + 1
    why = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()))
    first = ", ".join(lo.sample_id for lo in left_out[:3])
    return FailedPrecondition(
        f"{len(left_out)} of {total} samples have no reward ({why}; e.g. {first}): no verdict of a round "
        "they belong to is stored yet; export once those rounds are graded, or leave them out",
        reason="NO_REWARDS",
    )


def export_samples(
    samples: Iterable[Sample],
    format: str,
    out_path: str | os.PathLike[str],
    *,
    unrewarded: str = "skip",
) -> ExportReport:
    """Write the rewarded samples as JSON Lines in ``format``; report the rest.

    ``unrewarded="skip"`` (default) leaves out every sample whose reward is
    None and names it in the report with its reason; ``"refuse"`` raises
    FailedPrecondition (reason NO_REWARDS) instead when there is one. Either
    way an export that would leave out every one of at least one sample is
    refused (an empty training file is never the intent); no sample at all
    writes an empty file. Nothing is written when anything is refused, and
    every row is checked first (ExportContractError naming the sample).
    """
    check_export_args(format, unrewarded)
    all_samples = list(samples)
    kept = [s for s in all_samples if s.reward is not None]
    left_out = [LeftOut(s.sample_id, left_out_reason(s), s.run) for s in all_samples if s.reward is None]
    if left_out and (unrewarded == "refuse" or not kept):
        raise refuse_unrewarded(left_out, len(all_samples))
    rows = rows_for(kept, format)
    write_rows(out_path, rows)
    return ExportReport(len(rows), tuple(left_out))


def export(samples: Iterable[Sample], format: str, out_path: str | os.PathLike[str]) -> int:
    """Validate every sample for ``format`` and write them as JSON Lines.

    Returns the number of rows written. Raises ExportContractError naming the
    first bad sample, a sample without a reward included (nothing is written
    then), and InvalidArgument for an unknown format. :func:`export_samples`
    leaves unrewarded samples out instead.
    """
    check_export_args(format)
    rows = rows_for(samples, format)
    write_rows(out_path, rows)
    return len(rows)
