"""`sclated bench model`: long harness prompts on the embedded model.

A session as OpenClaw or Hermes makes it: a long system prompt (a tool list
and instructions), and every call resends the whole history plus one new user
message. Two servers of the same model answer the same calls side by side, in
alternating order: one with the prefix cache (the default), one decoding
every prompt whole. Figures: prompt tokens decoded per second, the cache hit
rate, each call's wall time on both, and whether both gave the same tokens
(the cache must change the work, never the answer).
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import aiohttp

from sclated.model import ModelServerConfig, RunningModelServer, start_model_server

__all__ = ["bench_model"]

_QUESTIONS = (
    "List the files in the workspace.",
    "Which of them changed today?",
    "Summarise the sprint notes in two lines.",
    "Write the summary to notes/summary.md.",
    "What did I ask you first today?",
    "Schedule a reminder for tomorrow at nine.",
)


def _system_prompt(n_tools: int) -> str:
    """A harness-like system prompt: instructions and ``n_tools`` JSON tool schemas."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": f"Tool {i}: reads, writes or lists files in folder {i % 9} of the workspace; "
                "returns JSON with the result and any error.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "a path inside the workspace"},
                        "content": {"type": "string", "description": "what to write, when writing"},
                        "limit": {"type": "integer", "description": f"at most this many entries (default {i + 10})"},
                    },
                    "required": ["path"],
                },
            },
        }
        for i in range(n_tools)
    ]
    return (
        "You are a personal assistant working in the user's workspace. Use the tools to read and write files; "
        "answer briefly.\n\n# Tools\n" + json.dumps(tools, indent=1)
    )


async def _call(session: aiohttp.ClientSession, server: RunningModelServer, body: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    async with session.post(f"{server.url}/v1/chat/completions", json=body) as r:
        out: dict[str, Any] = await r.json()
        if r.status != 200:
            raise RuntimeError(f"model call failed: HTTP {r.status}: {out}")
    out["_wall_ms"] = (time.perf_counter() - started) * 1000
    return out


async def _stats(session: aiohttp.ClientSession, server: RunningModelServer) -> dict[str, Any]:
    async with session.get(f"{server.url}/health") as r:
        body: dict[str, Any] = await r.json()
    prompts: dict[str, Any] = body["prompts"]
    return prompts


async def bench_model(*, quick: bool) -> dict[str, Any]:
    n_tools, turns, n_ctx = (12, 3, 8192) if quick else (40, len(_QUESTIONS), 16384)
    config = ModelServerConfig(port=0, n_ctx=n_ctx)
    cached = await start_model_server(config)
    try:
        whole = await start_model_server(ModelServerConfig(port=0, n_ctx=n_ctx, prefix_cache=False))
        try:
            return await _session(cached, whole, _system_prompt(n_tools), turns, quick)
        finally:
            await whole.close()
    finally:
        await cached.close()


async def _session(
    cached: RunningModelServer, whole: RunningModelServer, system: str, turns: int, quick: bool
) -> dict[str, Any]:
    messages: list[dict[str, str]] = [{"role": "system", "content": system}]
    rows: list[dict[str, Any]] = []
    same = True
    async with aiohttp.ClientSession() as session:
        for i in range(turns):
            messages.append({"role": "user", "content": _QUESTIONS[i % len(_QUESTIONS)]})
            body = {
                "model": "bench",
                "messages": messages,
                "max_tokens": 16,
                "temperature": 0,
                "return_token_ids": True,
            }
            # Alternate which server goes first, so neither always runs on a warmer machine.
            if i % 2 == 0:
                a = await _call(session, cached, body)
                b = await _call(session, whole, body)
            else:
                b = await _call(session, whole, body)
                a = await _call(session, cached, body)
            same = same and a["choices"][0]["token_ids"] == b["choices"][0]["token_ids"]
            rows.append(
                {
                    "prompt_tokens": a["usage"]["prompt_tokens"],
                    "cached_tokens": a["usage"]["prompt_tokens_details"]["cached_tokens"],
                    "cached_ms": round(a["_wall_ms"], 1),
                    "whole_ms": round(b["_wall_ms"], 1),
                }
            )
            messages.append({"role": "assistant", "content": a["choices"][0]["message"]["content"]})
        with_cache = await _stats(session, cached)
        without = await _stats(session, whole)
    later = rows[1:]  # the first call has nothing to reuse
    return {
        "quick": quick,
        "context": cached.engine.context.as_json(),
        "turns": turns,
        "prompt_tokens_first": rows[0]["prompt_tokens"],
        "prompt_tokens_last": rows[-1]["prompt_tokens"],
        "prompt_tokens_per_s": round(without["decoded_tokens_per_s"], 1),
        "prompt_tokens_per_s_cached_server": round(with_cache["decoded_tokens_per_s"], 1),
        "cache_hit_rate": round(with_cache["cache_hit_rate"], 4),
        "cache_hit_rate_after_first": round(
            sum(r["cached_tokens"] for r in later) / max(1, sum(r["prompt_tokens"] for r in later)), 4
        ),
        "call_ms_p50_cached": round(statistics.median(r["cached_ms"] for r in later), 1) if later else None,
        "call_ms_p50_whole": round(statistics.median(r["whole_ms"] for r in later), 1) if later else None,
        "same_tokens": same,
        "calls": rows,
        "targets": {"same_tokens": True, "cache_hit_rate_after_first": 0.5},
        "meets_targets": same
        and bool(later)
        and sum(r["cached_tokens"] for r in later) / max(1, sum(r["prompt_tokens"] for r in later)) >= 0.5,
        "notes": "cached = the prefix cache on (the default); whole = every prompt decoded whole "
        "(--no-prefix-cache). Calls alternate which server goes first. prompt_tokens_per_s: decoded prompt "
        "tokens per second of decode time on the whole server (attention grows with the prompt, so longer "
        "prompts decode slower). The cache reuses whole n_batch (512) batches only, so up to 511 shared "
        "tokens are decoded again: that keeps a cached call's tokens equal to a whole decode (same_tokens).",
    }
