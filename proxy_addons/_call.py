"""One model call in flight: what the hooks learn of it, and the record it
becomes when it ends (mitmproxy-free, so tests drive it directly)."""

import asyncio
import codecs
import dataclasses
import hashlib
import json
import time
from collections.abc import Collection
from typing import Any

from proxy_addons import _attribution, _branch_hints, _sse, _tokens
from proxy_addons.record import MAX_RECORD_BYTES, SCHEMA_VERSION, ApiKind, Chunk, Record, Timings, dumps


@dataclasses.dataclass
class Call:
    call_id: str
    run: str
    role: str
    api: ApiKind
    method: str
    path: str
    start_ns: int
    thread: str = ""
    thread_source: str = "derived"
    turn: int | None = None
    parent_thread: str | None = None
    branch_hint: str | None = None
    request_body: Any = None
    injected: list[str] = dataclasses.field(default_factory=list)
    body_hash: str = ""
    retry_of: str | None = None
    unleased: bool = False
    lease: asyncio.Task[None] | None = None
    """The ``call_start`` round trip, asked for at the request's headers."""
    first_byte_ns: int | None = None
    streamed: bool = False
    chunks: list[Chunk] = dataclasses.field(default_factory=list)
    text_parts: list[str] = dataclasses.field(default_factory=list)
    decoder: codecs.IncrementalDecoder | None = None
    memory_system: str = ""
    """The run's memory system (``mem0``, ``hindsight``; empty: the harness's own)."""
    via_memory_system: bool = False
    """The call came in on the memory system's listener (``memory:system``)."""

    def with_hints(self, hints: _attribution.Hints) -> None:
        self.turn, self.parent_thread, self.branch_hint = hints.turn, hints.parent_thread, hints.branch_hint
        if hints.thread:
            self.thread, self.thread_source = hints.thread, "header"

    def read_request(
        self,
        raw: bytes,
        request_tokens: bool,
        roles: Collection[str] = (),
        run_model: str = "",
        output_bound: int = 0,
        sampling_seed: int | None = None,
        seed_apis: Collection[str] = (),
    ) -> bytes:
        """Note the request body; returns the body to forward (with the token
        flags when ``request_tokens``; an output bound of ``output_bound`` tokens
        when the call sets none; a role's model name replaced by ``run_model``,
        the call then attributed to that role; a seed derived from
        ``sampling_seed`` when the call sets none and its API is one of ``seed_apis``)."""
        self.body_hash = hashlib.sha256(raw).hexdigest()
        body = _sse.json_or_none(raw.decode("utf-8", "replace")) if raw else None
        if not self.thread:
            self.thread = _attribution.derive_thread(self.api, body)
        if self.branch_hint is None:
            self.branch_hint = _branch_hints.from_body(self.api, body)
        forward = raw
        role = _attribution.model_role(body, roles)
        if role is not None and run_model and isinstance(body, dict):
            # Rare and small (background calls): re-serialising the body is fine here.
            self.role = role
            body["model"] = run_model
            forward = json.dumps(body, ensure_ascii=False).encode()
            self.injected.append("model")
        if request_tokens or output_bound:
            forward, added = _tokens.with_token_flags(self.api, forward, body, output_bound, token_flags=request_tokens)
            self.injected.extend(added)
        if sampling_seed is not None and self.api in seed_apis:
            forward, seeded = _tokens.with_seed(forward, body, _tokens.call_seed(sampling_seed, self.body_hash))
            if seeded:
                self.injected.append("seed")
        self.request_body = body if body is not None or not raw else raw.decode("utf-8", "replace")
        return forward

    def start_stream(self) -> None:
        self.streamed = True
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def stream_chunk(self, chunk: bytes) -> None:
        assert self.decoder is not None
        text = self.decoder.decode(chunk)
        self.chunks.append(Chunk(t_ns=time.time_ns(), size=len(chunk), text=text))
        self.text_parts.append(text)

    def response_body(self, raw: bytes | None) -> tuple[Any, bool, int]:
        """The response as JSON (or text), whether a stream ended properly, and how
        many of its events were malformed."""
        if self.streamed:
            if self.decoder is not None:
                tail = self.decoder.decode(b"", final=True)
                if tail:
                    self.text_parts.append(tail)
            return _sse.assemble_stream(self.api, "".join(self.text_parts))
        if raw is None:
            return None, True, 0
        text = raw.decode("utf-8", "replace")
        parsed = _sse.json_or_none(text) if text else None
        return (parsed if parsed is not None else (text or None)), True, 0

    def _read_response(
        self, status: int | None, raw: bytes | None, error: str | None, unreadable: str, warnings: list[str]
    ) -> tuple[Any, str | None, bool, _tokens.Tokens]:
        """The response's body, the call's error and whether it is complete, and its tokens
        (``warnings`` gets what was wrong with it)."""
        body, finished, malformed = self.response_body(raw)
        if error is not None and finished and self.streamed and _client_left(error):
            # Codex closes its connection as soon as it has read a response's final
            # event, sometimes before the proxy sees the stream end: the call was
            # answered in full (the final event went through), so it is not a failure.
            warnings.append(f"the client left after the final event ({error})")
            error = None
        complete = error is None and status is not None and status < 400
        if self.streamed and self.api not in ("other", "openai_embeddings") and not finished:
            complete = False
            if error is None:
                warnings.append("stream ended without a final event")
        if malformed:
            complete = False
            warnings.append(f"{malformed} malformed stream event(s) left out of the response")
        if unreadable:
            complete = False
            warnings.append(unreadable)
        elif complete and not (self.streamed and self.api == "openai_embeddings"):  # (its streams are not read)
            # A 2xx answer that is not a response of its API (HTML, invalid JSON, an
            # empty body, fields of the wrong shape) is a failed call: bad_response.
            problem = _not_a_response(self.api, body)
            if problem is not None:
                complete = False
                warnings.append(problem)
        if self.api == "openai_embeddings":
            body = _without_vectors(body)
        tokens = _tokens.extract_tokens(self.api, body)
        warnings.extend(tokens.warnings)
        return body, error, complete, tokens

    def to_record(
        self, status: int | None, raw: bytes | None, error: str | None, end_ns: int, *, unreadable: str = ""
    ) -> Record:
        """The call's record: ``status`` and ``raw`` body of the response
        (None without one; ignored for a stream, whose chunks were kept),
        ``error`` when the flow failed, ``unreadable`` why the body could not be
        read as it says it is (its content-encoding)."""
        warnings: list[str] = []
        try:
            body, error, complete, tokens = self._read_response(status, raw, error, unreadable, warnings)
        except Exception as exc:  # a response this proxy cannot read is still recorded, as failed
            body, complete, tokens = None, False, _tokens.Tokens(None, [], None, None, [])
            error = f"sclate: the proxy could not read the response ({type(exc).__name__}: {exc})"[:500]
        model = self.request_body.get("model") if isinstance(self.request_body, dict) else None
        if model is None and isinstance(body, dict):
            model = body.get("model")
        return Record(
            schema=SCHEMA_VERSION,
            call_id=self.call_id,
            run=self.run,
            role=self.role,
            api=self.api,
            method=self.method,
            path=self.path,
            model=model if isinstance(model, str) else None,
            stream=self.streamed,
            sampling=_attribution.sampling_of(self.request_body),
            injected=self.injected,
            request=self.request_body,
            status=status,
            response=body,
            chunks=self.chunks,
            prompt_token_ids=tokens.prompt_token_ids,
            completions=tokens.completions,
            usage=tokens.usage,
            finish_reason=tokens.finish_reason,
            timings=Timings(start_ns=self.start_ns, first_byte_ns=self.first_byte_ns, end_ns=end_ns),
            error=error,
            complete=complete,
            thread=self.thread,
            thread_source=self.thread_source,
            turn=self.turn,
            parent_thread=self.parent_thread,
            branch_hint=self.branch_hint,
            retry_of=self.retry_of,
            unleased=self.unleased,
            warnings=warnings,
            component=_attribution.component_of(self.role, self.api, self.memory_system, self.via_memory_system),
        )


_RESPONSE_LISTS = {
    "openai_chat": "choices",
    "openai_completions": "choices",
    "openai_responses": "output",
    "anthropic_messages": "content",
    "openai_embeddings": "data",
}
"""The list every response of an API has (what its answer is in)."""


def _not_a_response(api: str, body: Any) -> str | None:
    """Why ``body`` is not a response of ``api`` (None: it is one, or the API is not a model's)."""
    key = _RESPONSE_LISTS.get(api)
    if key is None:
        return None
    if not isinstance(body, dict):
        what = "empty" if body is None else "not a JSON object"
        return f"the response body is {what}: not a {api} response"
    if not isinstance(body.get(key), list):
        return f"the response has no {key} list: not a {api} response"
    return None


def bounded(rec: Record, limit: int = MAX_RECORD_BYTES) -> tuple[Record, str]:
    """``rec`` and its JSON text, at most ``limit`` bytes: a record past it (a body of
    tens of megabytes) keeps the sizes of its bodies, not their text, and counts as
    failed (what a trainer would learn from is gone); the daemon's control socket
    refuses longer lines."""
    text = dumps(rec)
    if len(text) <= limit // 4 or len(size := text.encode()) <= limit:
        return rec, text
    first = len(size)
    out = Record(**rec)  # type: ignore[typeddict-item]
    out["chunks"] = [Chunk(t_ns=c["t_ns"], size=c["size"], text="") for c in rec["chunks"]]
    out["response"] = None
    out["complete"] = False
    left_out = ["the response body", "the stream's text"]
    text = dumps(out)
    if len(text.encode()) > limit:
        out["request"] = None
        left_out.append("the request body")
        text = dumps(out)
    if len(text.encode()) > limit:
        out["prompt_token_ids"] = None
        out["completions"] = []
        out["chunks"] = []
        left_out.append("the token ids and the chunks")
    out["warnings"] = [
        *rec["warnings"],
        f"the record was {first} bytes, past the {limit} bytes a record may have: {', '.join(left_out)} left out",
    ]
    return out, dumps(out)


def _without_vectors(body: Any) -> Any:
    """An embeddings response with each vector replaced by its length: a record keeps
    what a reader counts (inputs, dimensions, usage), not kilobytes of floats per call
    (base64 vectors are counted in float32s)."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return body
    data: list[Any] = []
    for item in body["data"]:
        if isinstance(item, dict) and "embedding" in item:
            vector = item["embedding"]
            dims = len(vector) if isinstance(vector, list) else len(str(vector)) * 3 // 4 // 4
            item = {k: v for k, v in item.items() if k != "embedding"} | {"dimensions": dims}
        data.append(item)
    return body | {"data": data}


def _client_left(error: str) -> bool:
    """Whether a flow's error is the client closing its side (mitmproxy's words)."""
    return "client disconnected" in error.lower()
