"""The prefix cache's slots, on the engine itself with small batches (quick on 2 cores).

Each prompt is continued from whichever kept prefix shares the most whole
batches with it, the least recently used dropped first, within a byte bound;
whatever it is continued from, its tokens and logprobs are a cold decode's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from sclated.model import ModelServerConfig
from sclated.model._engine import Engine, Finish, SamplingParams, TokenStep

pytest.importorskip("llama_cpp")

pytestmark = [pytest.mark.model, pytest.mark.asyncio(loop_scope="module")]

BATCH = 32
GREEDY = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True, top_logprobs=3)


def config(**kw: Any) -> ModelServerConfig:
    return ModelServerConfig(port=0, n_ctx=1024, n_threads=2, n_batch=BATCH, embeddings=False, **kw)


async def load(**kw: Any) -> Engine:
    return await Engine.load(config(**kw))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cold() -> AsyncIterator[Engine]:
    engine = await load(prefix_cache=False)
    try:
        yield engine
    finally:
        await engine.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def prompts(cold: Engine) -> dict[str, list[int]]:
    """Prompts of a few batches each that differ within their first batch."""
    texts = {
        "a": " ".join(f"Shelf {i} holds box {i * 3 % 17}." for i in range(15)),
        "b": " ".join(f"Room {i} is painted colour {i * 5 % 13}." for i in range(15)),
        "c": " ".join(f"Train {i} leaves at {i % 24} hours." for i in range(15)),
        "more": " Which shelf holds box 4? Answer in one word.",
        "other": " Which room is painted colour 2? Answer briefly.",
    }
    out = {k: await cold.tokenize(v) for k, v in texts.items()}
    if cold.add_bos:  # no BOS in the middle
        out["more"], out["other"] = out["more"][1:], out["other"][1:]
    assert all(len(out[k]) > 3 * BATCH for k in "abc")
    return out


async def run(engine: Engine, ids: list[int]) -> tuple[list[tuple[int, float, tuple[Any, ...]]], int]:
    """Greedy tokens with their logprobs and alternatives, and the cached prompt tokens."""
    steps: list[tuple[int, float, tuple[Any, ...]]] = []
    cached = -1
    async for item in engine.generate(ids, GREEDY):
        if isinstance(item, TokenStep):
            steps.append((item.token_id, item.logprob, item.top_logprobs))
        elif isinstance(item, Finish):
            cached = item.cached_tokens
    return steps, cached


def whole(ids: list[int]) -> int:
    return len(ids) // BATCH * BATCH


async def test_each_prompt_continues_its_own_prefix_exactly(cold: Engine, prompts: dict[str, list[int]]) -> None:
    a, b, c, more = prompts["a"], prompts["b"], prompts["c"], prompts["more"]
    engine = await load(prefix_cache_slots=3)
    try:
        for ids in (a, b, c):
            assert (await run(engine, ids))[1] == 0
        assert (await run(engine, b + more))[1] == whole(b)
        # A is the oldest prompt, two others since, and is still kept.
        got, cached = await run(engine, a + more)
        assert cached == whole(a)
        want, none = await run(cold, a + more)
        assert none == 0 and got == want
        assert (await run(engine, c + more))[1] == whole(c)
        stats = engine.stats.as_json()["prefix_cache"]
        assert stats["slots"] == 3 and stats["restores"] == 3
        assert stats["prefixes"] == [whole(c + more), whole(a + more), whole(b + more)]
        assert stats["snapshot_bytes"] > 0
    finally:
        await engine.close()


async def test_a_fixed_prompt_is_kept_once_between_other_calls(prompts: dict[str, list[int]]) -> None:
    # A memory system's extraction call: the same long prompt, then one call's own text.
    a, b = prompts["a"], prompts["b"]
    engine = await load(prefix_cache_slots=3)
    try:
        for i, other in enumerate((b, b + prompts["other"], b + prompts["more"])):
            _, cached = await run(engine, a + prompts["more"][: 4 + i])
            # From the previous call's whole batches.
            assert cached == (0 if i == 0 else whole(a + prompts["more"][: 3 + i]))
            _, cached = await run(engine, other)
            assert cached == (0 if i == 0 else whole(b))
        # One prefix of each prompt, not one per call.
        assert len(engine.stats.prefixes) == 2
        assert engine.stats.restores == 4
    finally:
        await engine.close()


async def test_the_least_recently_used_prefix_goes_first(prompts: dict[str, list[int]]) -> None:
    a, b, c, more = prompts["a"], prompts["b"], prompts["c"], prompts["more"]
    engine = await load(prefix_cache_slots=2)  # the context and one snapshot
    try:
        for ids in (a, b, c):
            await run(engine, ids)
        assert (await run(engine, b + more))[1] == whole(b)
        assert (await run(engine, a + more))[1] == 0
        assert len(engine.stats.prefixes) == 2
    finally:
        await engine.close()


@pytest.mark.parametrize("kw", [{"prefix_cache_slots": 1}, {"prefix_cache_bytes": 0}, {"prefix_cache": False}], ids=str)
async def test_without_room_only_the_last_prompt_is_kept(prompts: dict[str, list[int]], kw: dict[str, Any]) -> None:
    a, b, more = prompts["a"], prompts["b"], prompts["more"]
    engine = await load(**kw)
    try:
        await run(engine, a)
        await run(engine, b)
        assert (await run(engine, a + more))[1] == 0
        assert (await run(engine, a + more + more))[1] == (0 if kw.get("prefix_cache") is False else whole(a + more))
        assert engine.stats.snapshot_bytes == 0 and engine.stats.restores == 0
    finally:
        await engine.close()


async def test_structured_output_after_a_restored_prefix(cold: Engine, prompts: dict[str, list[int]]) -> None:
    grammar = 'root ::= "{\\"shelf\\": " [0-9] [0-9]? "}"'
    params = SamplingParams(max_tokens=12, temperature=0, grammar=grammar)
    engine = await load(prefix_cache_slots=2)
    try:
        await run(engine, prompts["a"])
        await run(engine, prompts["b"])
        ids = prompts["a"] + prompts["more"]
        outs = []
        for e in (engine, cold):
            text, cached = "", -1
            async for item in e.generate(ids, params):
                if isinstance(item, TokenStep):
                    text += item.text
                elif isinstance(item, Finish):
                    text += item.text
                    cached = item.cached_tokens
            outs.append((text, cached))
        assert outs[0][1] == whole(prompts["a"]) and outs[1][1] == 0
        assert outs[0][0] == outs[1][0] and outs[0][0].startswith('{"shelf": ')
    finally:
        await engine.close()


async def test_bad_slot_settings_are_refused() -> None:
    from sclated.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="prefix_cache_slots"):
        await load(prefix_cache_slots=0)
    with pytest.raises(InvalidArgument, match="prefix_cache_bytes"):
        await load(prefix_cache_bytes=-1)


async def test_the_command_line_sets_the_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    from sclated.model import __main__ as cli

    seen: list[ModelServerConfig] = []
    monkeypatch.setattr(cli, "serve_forever", seen.append)
    assert cli.main(["--prefix-cache-slots", "8", "--prefix-cache-bytes", "512M"]) == 0
    assert cli.main(["--no-prefix-cache"]) == 0
    assert (seen[0].prefix_cache_slots, seen[0].prefix_cache_bytes, seen[0].prefix_cache) == (8, 512 << 20, True)
    assert (seen[1].prefix_cache_slots, seen[1].prefix_cache) == (ModelServerConfig.prefix_cache_slots, False)
    with pytest.raises(SystemExit):
        cli.main(["--prefix-cache-bytes", "lots"])
