"""Structured output against the real SmolLM2-135M: replies that must parse, and do.

Unconstrained, this model answers a request for JSON with prose (one test
shows it), so every parse below is the grammar's doing. Sampling is seeded and
schemas small, so generations stay short on 2 cores.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from sclated.errors import InvalidArgument
from sclated.model import (
    Finish,
    ModelServerConfig,
    RunningModelServer,
    SamplingParams,
    TokenStep,
    default_gguf_path,
    start_model_server,
)

from .helpers import post_json, post_sse

llama_cpp = pytest.importorskip("llama_cpp")

pytestmark = [pytest.mark.model, pytest.mark.asyncio(loop_scope="module")]

CAPITAL = [
    {"role": "system", "content": "You answer in JSON."},
    {"role": "user", "content": 'What is the capital of France? Reply with a JSON object like {"capital": "..."}.'},
]
EXTRACT = [
    {
        "role": "system",
        "content": "Extract facts about the user. Return JSON with a key 'facts' holding a list of strings.",
    },
    {"role": "user", "content": "Hi, my name is John. I am a software engineer and I love pizza."},
]

MEM0 = {
    "type": "object",
    "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
    "required": ["facts"],
}
"""The shape of Mem0's fact extraction."""

HINDSIGHT = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "maxItems": 2,
            "items": {
                "type": "object",
                "properties": {
                    "what": {"type": "string", "maxLength": 60},
                    "fact_type": {"type": "string", "enum": ["world", "experience", "opinion"]},
                    "entities": {
                        "type": "array",
                        "maxItems": 2,
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string", "maxLength": 30},
                                "kind": {"type": "string", "enum": ["person", "place", "thing"]},
                            },
                            "required": ["name", "kind"],
                        },
                    },
                },
                "required": ["what", "fact_type", "entities"],
            },
        }
    },
    "required": ["facts"],
}
"""Hindsight-like: nested objects and enums, bounded so a rambling model still closes it in time."""


def json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "facts", "schema": schema, "strict": True}}


def conforms(value: Any, schema: dict[str, Any]) -> bool:
    """The subset of JSON Schema used here (the converter admits no undeclared properties)."""
    kind = schema.get("type")
    if "enum" in schema and value not in schema["enum"]:
        return False
    if kind == "string":
        return isinstance(value, str) and len(value) <= schema.get("maxLength", math.inf)
    if kind == "array":
        return (
            isinstance(value, list)
            and len(value) <= schema.get("maxItems", math.inf)
            and all(conforms(item, schema["items"]) for item in value)
        )
    if kind == "object":
        props = schema.get("properties", {})
        return (
            isinstance(value, dict)
            and all(key in value for key in schema.get("required", []))
            and all(key in props and conforms(item, props[key]) for key, item in value.items())
        )
    raise AssertionError(f"schema type {kind!r} not handled by this checker")


def parse_as(text: str, schema: dict[str, Any]) -> Any:
    value = json.loads(text)  # strict: raw control characters in strings fail too
    assert conforms(value, schema), text
    return value


def is_valid(text: str, schema: dict[str, Any]) -> bool:
    try:
        return conforms(json.loads(text), schema)
    except json.JSONDecodeError:
        return False


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[RunningModelServer]:
    running = await start_model_server(ModelServerConfig(port=0, n_ctx=2048, n_threads=2, embeddings=False))
    try:
        yield running
    finally:
        await running.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """An independent vocab-only load: what the returned token ids must decode to."""
    return llama_cpp.Llama(str(default_gguf_path()), vocab_only=True, verbose=False)


async def chat(server: RunningModelServer, session: aiohttp.ClientSession, **body: Any) -> dict[str, Any]:
    return await post_json(session, f"{server.url}/v1/chat/completions", {"model": "smol", **body})


async def test_json_object_replies_parse_for_several_seeds(
    server: RunningModelServer, session: aiohttp.ClientSession
) -> None:
    finished = 0
    for seed in (1, 4, 5, 6, 7):
        out = await chat(
            server,
            session,
            messages=CAPITAL,
            response_format={"type": "json_object"},
            temperature=0.5,
            seed=seed,
            max_tokens=120,
        )
        choice = out["choices"][0]
        if choice["finish_reason"] == "length":
            # Any JSON object is allowed, so the model may ramble inside one.
            continue
        finished += 1
        assert choice["finish_reason"] == "stop"
        assert isinstance(json.loads(choice["message"]["content"]), dict), choice["message"]["content"]
    assert finished >= 4


async def test_json_object_stream_parses_and_matches_the_whole_reply(
    server: RunningModelServer, session: aiohttp.ClientSession
) -> None:
    body = {
        "messages": CAPITAL,
        "response_format": {"type": "json_object"},
        "temperature": 0.5,
        "seed": 4,
        "max_tokens": 120,
        "return_token_ids": True,
    }
    whole = await chat(server, session, **body)
    events, _ = await post_sse(session, f"{server.url}/v1/chat/completions", body)
    assert events[-1].data == "[DONE]"
    choices = [e.data["choices"][0] for e in events[:-1] if e.data["choices"]]
    text = "".join(c["delta"].get("content") or "" for c in choices)
    assert isinstance(json.loads(text), dict), text
    assert text == whole["choices"][0]["message"]["content"]
    # Seeded sampling under a grammar is the same draw in both modes.
    assert [t for c in choices for t in c["token_ids"]] == whole["choices"][0]["token_ids"]
    assert choices[-1]["finish_reason"] == "stop"


async def test_mem0_schema_replies_validate(server: RunningModelServer, session: aiohttp.ClientSession) -> None:
    for temperature, seed in ((0.0, None), (0.7, 1), (0.7, 2), (0.7, 3)):
        out = await chat(
            server,
            session,
            messages=EXTRACT,
            response_format=json_schema(MEM0),
            temperature=temperature,
            seed=seed,
            max_tokens=150,
        )
        choice = out["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        parse_as(choice["message"]["content"], MEM0)


async def test_hindsight_schema_with_nested_objects_and_enums_validates(
    server: RunningModelServer, session: aiohttp.ClientSession
) -> None:
    kinds = set()
    for temperature, seed in ((0.0, None), (0.7, 1), (0.7, 2)):
        out = await chat(
            server,
            session,
            messages=EXTRACT,
            response_format=json_schema(HINDSIGHT),
            temperature=temperature,
            seed=seed,
            max_tokens=300,
        )
        choice = out["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        value = parse_as(choice["message"]["content"], HINDSIGHT)
        kinds |= {e["kind"] for f in value["facts"] for e in f["entities"]}
    assert kinds <= {"person", "place", "thing"} and kinds


async def test_without_response_format_the_same_prompt_is_not_valid_json(
    server: RunningModelServer, session: aiohttp.ClientSession
) -> None:
    """What the tests above would see if the grammar were silently dropped."""
    body = {"messages": EXTRACT, "temperature": 0, "max_tokens": 60, "return_token_ids": True}
    free = (await chat(server, session, **body))["choices"][0]
    held = (await chat(server, session, **body, response_format=json_schema(MEM0)))["choices"][0]
    assert is_valid(held["message"]["content"], MEM0)
    assert not is_valid(free["message"]["content"], MEM0) or free["token_ids"] != held["token_ids"], free
    # A "text" format is no constraint at all: the same draw as none.
    text = (await chat(server, session, **body, response_format={"type": "text"}))["choices"][0]
    assert text["token_ids"] == free["token_ids"]


async def test_constrained_token_ids_and_logprobs_are_the_sampled_ones(
    server: RunningModelServer, session: aiohttp.ClientSession, tokenizer: Any
) -> None:
    out = await chat(
        server,
        session,
        messages=CAPITAL,
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=60,
        logprobs=True,
        top_logprobs=5,
    )
    choice = out["choices"][0]
    ids, content = choice["token_ids"], choice["logprobs"]["content"]
    assert choice["finish_reason"] == "stop"
    assert len(ids) == len(content) == out["usage"]["completion_tokens"]
    assert ids[-1] == tokenizer.token_eos()
    assert tokenizer.detokenize(ids[:-1]).decode() == choice["message"]["content"]
    json.loads(choice["message"]["content"])
    for entry, tid in zip(content, ids, strict=True):
        assert entry["bytes"] == list(tokenizer.detokenize([tid], special=True))
        tops = entry["top_logprobs"]
        # Greedy under a grammar takes the most likely token the grammar allows.
        assert tops[0]["token"] == entry["token"] and tops[0]["logprob"] == entry["logprob"]
        # Logprobs come from the masked distribution, renormalised: the listed
        # tokens' probabilities never exceed 1, and when fewer than asked are
        # listed they are all the grammar allowed, so they sum to 1.
        mass = sum(math.exp(t["logprob"]) for t in tops)
        assert mass <= 1 + 1e-6
        if len(tops) < 5:
            assert mass == pytest.approx(1.0, abs=1e-6)
    first = content[0]["top_logprobs"]
    assert len(first) < 5 and all(t["token"].startswith("{") for t in first), first


async def test_responses_text_format_whole_and_streamed(
    server: RunningModelServer, session: aiohttp.ClientSession
) -> None:
    fmt = {"type": "json_schema", "name": "facts", "schema": MEM0, "strict": True}
    body = {
        "model": "smol",
        "input": EXTRACT[1]["content"],
        "instructions": EXTRACT[0]["content"],
        "text": {"format": fmt},
        "temperature": 0.7,
        "seed": 1,
        "max_output_tokens": 150,
        "return_token_ids": True,
    }
    whole = await post_json(session, f"{server.url}/v1/responses", body)
    assert whole["status"] == "completed" and whole["text"] == {"format": fmt}
    text = whole["output"][0]["content"][0]["text"]
    parse_as(text, MEM0)
    events, _ = await post_sse(session, f"{server.url}/v1/responses", body)
    deltas = "".join(e.data["delta"] for e in events if e.event == "response.output_text.delta")
    done = events[-1].data["response"]
    assert events[-1].event == "response.completed"
    assert deltas == text and done["token_ids"] == whole["token_ids"]

    obj = await post_json(session, f"{server.url}/v1/responses", {**body, "text": {"format": {"type": "json_object"}}})
    assert isinstance(json.loads(obj["output"][0]["content"][0]["text"]), dict)


async def test_completions_take_a_response_format(server: RunningModelServer, session: aiohttp.ClientSession) -> None:
    schema = {"type": "object", "properties": {"capital": {"type": "string", "maxLength": 20}}, "required": ["capital"]}
    body = {
        "prompt": "The capital of France, as JSON:",
        "max_tokens": 40,
        "temperature": 0,
        "response_format": json_schema(schema),
    }
    out = await post_json(session, f"{server.url}/v1/completions", body)
    assert out["choices"][0]["finish_reason"] == "stop"
    parse_as(out["choices"][0]["text"], schema)


@pytest.mark.parametrize(
    ("path", "extra", "field"),
    [
        ("/v1/chat/completions", {"response_format": {"type": "xml"}}, "response_format.type"),
        ("/v1/chat/completions", {"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        (
            "/v1/chat/completions",
            {"response_format": {"type": "json_schema", "json_schema": {"name": "facts"}}},
            "response_format.json_schema.schema",
        ),
        (
            "/v1/chat/completions",
            {"response_format": json_schema({"type": "wat"}), "stream": True},
            "response_format.json_schema.schema",
        ),
        ("/v1/completions", {"response_format": "json"}, "response_format"),
        ("/v1/responses", {"text": {"format": {"type": "bogus"}}}, "text.format.type"),
        ("/v1/responses", {"text": {"format": {"type": "json_schema", "schema": []}}}, "text.format.schema"),
    ],
)
async def test_bad_formats_are_a_400_naming_the_field(
    server: RunningModelServer, session: aiohttp.ClientSession, path: str, extra: dict[str, Any], field: str
) -> None:
    bases: dict[str, dict[str, Any]] = {
        "/v1/chat/completions": {"messages": CAPITAL},
        "/v1/completions": {"prompt": "Hello"},
        "/v1/responses": {"input": "Hello"},
    }
    base = bases[path]
    out = await post_json(session, f"{server.url}{path}", {**base, "max_tokens": 4, **extra}, status=400)
    assert out["error"]["param"] == field
    assert out["error"]["type"] == "invalid_request_error"


async def collect(server: RunningModelServer, prompt: list[int], params: SamplingParams) -> list[TokenStep | Finish]:
    return [item async for item in server.engine.generate(prompt, params)]


async def test_a_complete_grammar_ends_the_generation(server: RunningModelServer) -> None:
    prompt = await server.engine.tokenize("<|im_start|>user\nYes or no?<|im_end|>\n<|im_start|>assistant\n")
    grammar = 'root ::= "yes" | "no"'
    items = await collect(server, prompt, SamplingParams(temperature=0, max_tokens=20, grammar=grammar))
    *steps, finish = items
    assert isinstance(finish, Finish) and finish.reason == "stop"
    assert all(isinstance(s, TokenStep) for s in steps)
    assert isinstance(steps[-1], TokenStep) and steps[-1].is_eog
    text = "".join(s.text for s in steps if isinstance(s, TokenStep)) + finish.text
    assert text in ("yes", "no")
    # With end-of-generation tokens banned, a complete grammar still ends it.
    banned = await collect(
        server, prompt, SamplingParams(temperature=0, max_tokens=20, grammar=grammar, ignore_eos=True)
    )
    assert isinstance(banned[-1], Finish) and banned[-1].reason == "stop"
    assert [s.token_id for s in banned[:-1] if isinstance(s, TokenStep)] == [
        s.token_id for s in steps[:-1] if isinstance(s, TokenStep)
    ]


async def test_grammar_llama_cpp_refuses_is_invalid_and_the_engine_carries_on(server: RunningModelServer) -> None:
    prompt = await server.engine.tokenize("Hello")
    with pytest.raises(InvalidArgument) as caught:
        await collect(server, prompt, SamplingParams(max_tokens=4, grammar="root ::= (("))
    assert caught.value.reason == "GRAMMAR_REJECTED"
    # A constrained generation abandoned mid-way frees its grammar and leaves the engine usable.
    gen = server.engine.generate(prompt, SamplingParams(max_tokens=50, ignore_eos=True, grammar='root ::= [a-z]+ "."'))
    assert isinstance(await anext(gen), TokenStep)
    await gen.aclose()
    items = await collect(server, prompt, SamplingParams(temperature=0, max_tokens=4))
    assert isinstance(items[-1], Finish)
