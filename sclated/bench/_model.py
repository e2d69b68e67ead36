"""`sclated bench model`: long harness prompts on the embedded model.

A session as OpenClaw or Hermes makes it: a long system prompt (a tool list
and instructions), and every call resends the whole history plus one new user
message. Two servers of the same model answer the same calls side by side, in
alternating order: one with the prefix cache (the default), one decoding
every prompt whole. Figures: prompt tokens decoded per second, the cache hit
rate, each call's wall time on both, and whether both gave the same tokens
(the cache must change the work, never the answer).

Then interleaved prompts, as a memory system beside an agent makes them:
Mem0's fact extraction sends the same ~8,700-token system prompt with each
store, between the agent's own calls (another, shorter prompt). Two servers
answer the same calls side by side: one keeping a single prefix (the last
call's, so each prompt evicts the other's) and one keeping several
(``prefix_cache_slots``). Figures per call on both: prompt tokens decoded,
cached tokens and wall time; and whether both gave the same tokens.
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
    result = await _bench_session(quick)
    interleaved = await _bench_interleaved(quick)
    result["interleaved"] = interleaved
    result["meets_targets"] = bool(result["meets_targets"] and interleaved["meets_targets"])
    return result


async def _bench_session(quick: bool) -> dict[str, Any]:
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


# The interleaved case: a memory system's long fixed prompt between an agent's calls.

INTERLEAVED_N_CTX = 16384
MEMORY_PROMPT_TOKENS = 8700
SLOTS = 4

_FACTS = (
    "I moved to Lyon in May and work at the hospital now.",
    "My daughter Ana starts school in September; she is allergic to peanuts.",
    "I switched from tea to coffee, black, two cups a day.",
    "My manager is Priya; our team ships the billing service.",
    "I am training for a half marathon in October.",
    "Please remember that my car is a blue 2014 Corolla.",
)
_NAMES = ("Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jon", "Kai", "Lena")
_CITIES = ("Lyon", "Porto", "Oslo", "Kyoto", "Quito", "Perth", "Accra", "Bergen", "Cusco", "Dakar", "Essen")
_THINGS = ("tennis", "chess", "jazz", "sushi", "hiking", "pottery", "cycling", "baking", "sailing", "opera")


def _memory_example(i: int) -> str:
    name, city, thing = _NAMES[i % len(_NAMES)], _CITIES[i * 7 % len(_CITIES)], _THINGS[i * 3 % len(_THINGS)]
    facts = json.dumps({"facts": [f"Name is {name}", f"Lives in {city}", f"Likes {thing}"]})
    return f"Input: Hi, I am {name} from {city} and I love {thing} (note {i}).\nOutput: {facts}\n\n"


_MEMORY_HEAD = (
    "You are a Personal Information Organizer, specialized in accurately storing facts, user memories, and "
    "preferences. Extract relevant pieces of information from the conversation and organize them into "
    "distinct, manageable facts. Return the facts in JSON with the key 'facts'. If nothing is relevant, return "
    'an empty list: {"facts": []}. Detect the language of the user input and record the facts in the same '
    "language. Here are some examples:\n\n"
)


async def _memory_prompt(server: RunningModelServer, target: int) -> str:
    """A Mem0-like fact extraction prompt of about ``target`` tokens (instructions and few-shot examples)."""
    head = len(await server.engine.tokenize(_MEMORY_HEAD))
    per = len(await server.engine.tokenize("".join(_memory_example(i) for i in range(20)))) / 20
    n = max(1, int((target - head) / per))
    return _MEMORY_HEAD + "".join(_memory_example(i) for i in range(n))


async def _bench_interleaved(quick: bool) -> dict[str, Any]:
    rounds = 3 if quick else len(_FACTS)
    one = await start_model_server(
        ModelServerConfig(port=0, n_ctx=INTERLEAVED_N_CTX, prefix_cache_slots=1, embeddings=False)
    )
    try:
        many = await start_model_server(
            ModelServerConfig(port=0, n_ctx=INTERLEAVED_N_CTX, prefix_cache_slots=SLOTS, embeddings=False)
        )
        try:
            memory = await _memory_prompt(one, MEMORY_PROMPT_TOKENS)
            return await _interleave(one, many, memory, _system_prompt(8), rounds, quick)
        finally:
            await many.close()
    finally:
        await one.close()


async def _interleave(
    one: RunningModelServer, many: RunningModelServer, memory: str, agent: str, rounds: int, quick: bool
) -> dict[str, Any]:
    history: list[dict[str, str]] = [{"role": "system", "content": agent}]
    rows: list[dict[str, Any]] = []
    same = True
    async with aiohttp.ClientSession() as session:
        for i in range(rounds):
            fact = _FACTS[i % len(_FACTS)]
            history.append({"role": "user", "content": _QUESTIONS[i % len(_QUESTIONS)]})
            calls = (
                ("memory", [{"role": "system", "content": memory}, {"role": "user", "content": f"Input: {fact}"}]),
                ("agent", history),
            )
            for kind, messages in calls:
                body = {
                    "model": "bench",
                    "messages": messages,
                    "max_tokens": 8,
                    "temperature": 0,
                    "return_token_ids": True,
                }
                # Alternate which server goes first, so neither always runs on a warmer machine.
                if len(rows) % 2 == 0:
                    a = await _call(session, one, body)
                    b = await _call(session, many, body)
                else:
                    b = await _call(session, many, body)
                    a = await _call(session, one, body)
                same = same and a["choices"][0]["token_ids"] == b["choices"][0]["token_ids"]
                row: dict[str, Any] = {"round": i, "kind": kind, "prompt_tokens": a["usage"]["prompt_tokens"]}
                for name, out in (("one_slot", a), (f"{SLOTS}_slots", b)):
                    cached = out["usage"]["prompt_tokens_details"]["cached_tokens"]
                    row[name] = {
                        "decoded_tokens": out["usage"]["prompt_tokens"] - cached,
                        "cached_tokens": cached,
                        "wall_ms": round(out["_wall_ms"], 1),
                    }
                rows.append(row)
            history.append({"role": "assistant", "content": a["choices"][0]["message"]["content"]})
        stats = {"one_slot": await _stats(session, one), f"{SLOTS}_slots": await _stats(session, many)}

    def summary(name: str) -> dict[str, Any]:
        mine = [r[name] for r in rows]
        later_memory = [r[name] for r in rows if r["kind"] == "memory" and r["round"] > 0]
        prompts = stats[name]
        return {
            "wall_s": round(sum(c["wall_ms"] for c in mine) / 1000, 1),
            "decoded_tokens": sum(c["decoded_tokens"] for c in mine),
            "cached_tokens": sum(c["cached_tokens"] for c in mine),
            "memory_call_ms_p50_after_first": (
                round(statistics.median(c["wall_ms"] for c in later_memory), 1) if later_memory else None
            ),
            "memory_cache_hit_rate_after_first": round(
                sum(c["cached_tokens"] for c in later_memory)
                / max(1, sum(c["cached_tokens"] + c["decoded_tokens"] for c in later_memory)),
                4,
            ),
            "prompt_tokens_per_s": round(prompts["decoded_tokens_per_s"], 1),
            "prefix_cache": prompts["prefix_cache"],
        }

    one_s, many_s = summary("one_slot"), summary(f"{SLOTS}_slots")
    hit = many_s["memory_cache_hit_rate_after_first"]
    return {
        "quick": quick,
        "n_ctx": INTERLEAVED_N_CTX,
        "rounds": rounds,
        "memory_prompt_tokens": rows[0]["prompt_tokens"],
        "agent_prompt_tokens_first": rows[1]["prompt_tokens"],
        "agent_prompt_tokens_last": rows[-1]["prompt_tokens"],
        "one_slot": one_s,
        f"{SLOTS}_slots": many_s,
        "speedup": round(one_s["wall_s"] / many_s["wall_s"], 2) if many_s["wall_s"] else None,
        "same_tokens": same,
        "calls": rows,
        "targets": {"same_tokens": True, "memory_cache_hit_rate_after_first": 0.9},
        "meets_targets": same and rounds > 1 and hit >= 0.9,
        "notes": "Each round: one memory call (a Mem0-like fact extraction prompt, fixed, plus one new fact) "
        "then one agent call (a tool list and the session so far, a different prompt), on two servers of the "
        f"same model at n_ctx {INTERLEAVED_N_CTX}: one_slot keeps only the last call's prefix "
        f"(--prefix-cache-slots 1: each prompt evicts the other's), {SLOTS}_slots keeps {SLOTS} "
        f"(--prefix-cache-slots {SLOTS}: earlier prefixes as KV snapshots in RAM). Reuse is in whole 512-token "
        "batches, so up to 511 shared tokens plus each call's own text are decoded again.",
    }
