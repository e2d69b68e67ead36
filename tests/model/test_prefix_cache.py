"""Long prompts on the real model: the prefix cache and a stretched context.

Harnesses (OpenClaw, Hermes) resend a session's whole history with every call;
the engine keeps the KV cells of a shared prefix and decodes only the rest.
The cache must change nothing but the work done: a cached call's tokens equal
those of a server that decodes every prompt whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from sclated.model import ModelServerConfig, RunningModelServer, start_model_server

from .helpers import post_json

pytest.importorskip("llama_cpp")

pytestmark = [pytest.mark.model, pytest.mark.asyncio(loop_scope="module")]

# About 1,300 tokens: three whole batches of 512 after the next turn is added.
NOTES = " ".join(f"Note {i}: the build on shelf {i % 7} uses flag {i * 13 % 97}." for i in range(90))

FACTS = " ".join(f"Fact {i}: the user's parcel {i} went to room {i * 7 % 23} on day {i % 30}." for i in range(80))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cached() -> AsyncIterator[RunningModelServer]:
    running = await start_model_server(ModelServerConfig(port=0, n_ctx=4096, n_threads=2))
    try:
        yield running
    finally:
        await running.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def uncached() -> AsyncIterator[RunningModelServer]:
    running = await start_model_server(ModelServerConfig(port=0, n_ctx=4096, n_threads=2, prefix_cache=False))
    try:
        yield running
    finally:
        await running.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def turn(messages: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "model": "smol",
        "messages": messages,
        "max_tokens": 12,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
        "logprobs": True,
    }


async def health(session: aiohttp.ClientSession, server: RunningModelServer) -> dict[str, Any]:
    async with session.get(f"{server.url}/health") as r:
        body: dict[str, Any] = await r.json()
        return body


async def test_a_session_reuses_its_history_and_gets_the_same_tokens(
    cached: RunningModelServer, uncached: RunningModelServer, session: aiohttp.ClientSession
) -> None:
    first = [{"role": "system", "content": NOTES}, {"role": "user", "content": "Which flag is on shelf 3?"}]
    a = await post_json(session, f"{cached.url}/v1/chat/completions", turn(first))
    reply = a["choices"][0]["message"]["content"]
    second = [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": "And on shelf 5?"}]
    b = await post_json(session, f"{cached.url}/v1/chat/completions", turn(second))
    fresh = await post_json(session, f"{uncached.url}/v1/chat/completions", turn(second))

    n_first, n_second = len(a["prompt_token_ids"]), len(b["prompt_token_ids"])
    assert n_first > 1024 and b["prompt_token_ids"][:n_first] == a["prompt_token_ids"]
    # Whole batches of the first prompt are reused; the rest is decoded.
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == n_first // 512 * 512
    assert fresh["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # The cache changes nothing but the work: same prompt, same greedy tokens.
    assert fresh["prompt_token_ids"] == b["prompt_token_ids"]
    assert b["choices"][0]["token_ids"] == fresh["choices"][0]["token_ids"]

    stats = (await health(session, cached))["prompts"]
    assert stats["cached_tokens"] >= n_first // 512 * 512
    assert stats["decoded_tokens"] == stats["prompt_tokens"] - stats["cached_tokens"]
    assert stats["prompt_tokens"] >= n_first + n_second and 0 < stats["cache_hit_rate"] < 1
    assert stats["decoded_tokens_per_s"] > 0
    assert (await health(session, uncached))["prompts"]["cached_tokens"] == 0


async def test_an_earlier_prompt_is_continued_after_another_one(
    cached: RunningModelServer, uncached: RunningModelServer, session: aiohttp.ClientSession
) -> None:
    # A memory system's fixed prompt, then an agent's call, then the memory system again:
    # the second call must not cost the first one its prefix.
    memory = [{"role": "system", "content": FACTS}, {"role": "user", "content": "I moved to Lyon in May."}]
    a = await post_json(session, f"{cached.url}/v1/chat/completions", turn(memory))
    agent = [{"role": "user", "content": "List the files in the workspace."}]
    b = await post_json(session, f"{cached.url}/v1/chat/completions", turn(agent))
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    more = [*memory, {"role": "assistant", "content": "Noted."}, {"role": "user", "content": "My cat is Tom."}]
    c = await post_json(session, f"{cached.url}/v1/chat/completions", turn(more))
    fresh = await post_json(session, f"{uncached.url}/v1/chat/completions", turn(more))

    n_first = len(a["prompt_token_ids"])
    assert n_first > 1024 and c["prompt_token_ids"][:n_first] == a["prompt_token_ids"]
    assert c["usage"]["prompt_tokens_details"]["cached_tokens"] == n_first // 512 * 512
    assert fresh["prompt_token_ids"] == c["prompt_token_ids"]
    assert c["choices"][0]["token_ids"] == fresh["choices"][0]["token_ids"]
    assert [t["logprob"] for t in c["choices"][0]["logprobs"]["content"]] == [
        t["logprob"] for t in fresh["choices"][0]["logprobs"]["content"]
    ]

    cache = (await health(session, cached))["prompts"]["prefix_cache"]
    assert cache["slots"] == 4 and cache["restores"] >= 1
    # The context holds the last prompt's whole batches; the agent's call was too short to keep.
    assert cache["prefixes"][0] == len(c["prompt_token_ids"]) // 512 * 512
    assert 0 < cache["snapshot_bytes"] <= cache["snapshot_bytes_limit"]
    assert (await health(session, uncached))["prompts"]["prefix_cache"]["slots"] == 0


async def test_another_prompt_reuses_nothing_past_the_shared_prefix(
    cached: RunningModelServer, session: aiohttp.ClientSession
) -> None:
    long = [{"role": "system", "content": NOTES}, {"role": "user", "content": "Shelf 1?"}]
    await post_json(session, f"{cached.url}/v1/chat/completions", turn(long))
    other = [{"role": "system", "content": "Be brief. " + NOTES}, {"role": "user", "content": "Shelf 1?"}]
    out = await post_json(session, f"{cached.url}/v1/chat/completions", turn(other))
    # The two differ within the first batch: nothing whole is shared.
    assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


async def test_a_prompt_beyond_the_context_is_the_apis_own_error(
    cached: RunningModelServer, session: aiohttp.ClientSession
) -> None:
    body = {"model": "smol", "max_tokens": 4, "messages": [{"role": "user", "content": NOTES * 4}]}
    out = await post_json(session, f"{cached.url}/v1/chat/completions", body, 400)
    assert out["error"]["code"] == "context_length_exceeded"
    # OpenAI's wording, which clients parse for the limit.
    assert "maximum context length is 4096 tokens" in out["error"]["message"]
    out = await post_json(session, f"{cached.url}/v1/messages", body, 400)
    assert out["error"]["type"] == "invalid_request_error"
    assert out["error"]["message"].startswith("prompt is too long")


async def test_a_context_past_the_trained_one_is_stretched_and_served(session: aiohttp.ClientSession) -> None:
    server = await start_model_server(ModelServerConfig(port=0, n_ctx=16384, n_threads=2))
    try:
        async with session.get(f"{server.url}/v1/models") as r:
            model = (await r.json())["data"][0]
        assert model["context_length"] == 16384 and model["trained_context_length"] == 8192
        assert model["rope_scaling"] == {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8192}
        # Longer than SmolLM2 was trained on, and answered.
        # Just past it (~8,300 tokens): every token more is decoding time on two cores.
        body = turn(
            [
                {"role": "system", "content": NOTES * 5 + NOTES[: len(NOTES) // 2]},
                {"role": "user", "content": "Shelf 2?"},
            ]
        )
        body["max_tokens"] = 4
        out = await post_json(session, f"{server.url}/v1/chat/completions", body)
        assert 8192 < out["usage"]["prompt_tokens"] < 16384
        assert len(out["choices"][0]["token_ids"]) == 4
    finally:
        await server.close()


async def test_the_trained_context_is_not_stretched(cached: RunningModelServer, session: aiohttp.ClientSession) -> None:
    async with session.get(f"{cached.url}/v1/models") as r:
        model = (await r.json())["data"][0]
    assert model["context_length"] == 4096 and model["rope_scaling"] is None
