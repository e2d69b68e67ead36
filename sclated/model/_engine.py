"""One llama.cpp model behind a single worker thread.

``llama_cpp.Llama`` is not thread safe and every call into it blocks, so all of
them (load, tokenize, decode, sample) run on one dedicated thread and never on
the event loop. Generation streams from that thread to the loop through an
``asyncio.Queue`` fed with ``call_soon_threadsafe``, one item per sampled token,
so callers see each token as soon as it exists.

Sampling is done here, in numpy, from the raw logits of the last decoded
position rather than with llama.cpp's sampler chain: that way the token ids we
report are exactly the ones fed back into the model, and the log-probabilities
are those of the model's own distribution at that step.

Structured output keeps that design: llama.cpp's grammar sampler is used only
as a mask (the tokens it rejects get -inf) on those same logits before the
numpy sampler draws, and is told each drawn token so it follows the text.

The prefix cache keeps several prompt prefixes (``prefix_cache_slots``): the
context's one sequence holds the last call's KV cells, and the prefixes of
earlier calls are snapshots of that sequence's cells in RAM
(``llama_state_seq_get_data``), taken only when a call is about to cut the
context's prefix and only of whole batches (at least ``n_batch`` tokens),
within ``prefix_cache_bytes`` all told. A new prompt continues from whichever
shares the longest whole-batch prefix with it: the context as it is, or a
snapshot copied back (``llama_state_seq_set_data``); the least recently used
snapshot goes first. Snapshots rather than several sequences in one context
(``n_seq_max``), by measurement (SmolLM2-135M, 2 cores, a 2,048-token prefix
with another prompt decoded between):

* one context, unified KV (``kv_unified``): a sequence's logits then depend
  on the other sequences' cells beside it (up to 0.67 apart from a fresh
  decode, far past rounding), so a cached call would not equal a full
  decode; and every decode attends over all slots' cells;
* one context, a KV stream per sequence: exact, but it reserves
  ``slots x n_ctx`` cells up front (1.5 GB for 4 slots of 16,384), copies
  between sequences only whole streams, and needs a batch loop of our own in
  place of llama-cpp-python's ``eval`` (sequence 0 only);
* snapshots: exact (bit-identical logits: the cells come back at the same
  places with the same bytes), 23 KB a token, 47 MB saved or restored in
  5 ms into warm memory (in ``sclated bench model``'s interleaved case,
  0.1-0.3 s a save or restore of an 8.7k-token, 200 MB prefix, against
  ~65 s to decode that prompt), RAM spent only on prefixes worth keeping,
  and ``eval`` unchanged.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import ctypes
import hashlib
import logging
import threading
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from sclated.errors import InvalidArgument, ModelUnavailable

from ._config import ModelServerConfig

__all__ = [
    "PROMPT_TOO_LONG",
    "Backend",
    "ContextInfo",
    "Engine",
    "Finish",
    "PromptStats",
    "SamplingParams",
    "TokenStep",
    "TopLogprob",
]

log = logging.getLogger("sclated.model")

T = TypeVar("T")

FinishReason = Literal["stop", "length"]

PROMPT_TOO_LONG = "PROMPT_TOO_LONG"
"""The reason of the InvalidArgument for a prompt beyond the context (each API words it its own way)."""

# OpenAI caps top_logprobs at 20; more would only slow every step down.
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion. ``max_tokens`` None means up to the context end."""

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    top_logprobs: int = 0
    grammar: str | None = None
    """GBNF text (start rule ``root``) the completion must match; None leaves it unconstrained.

    Made from a request's response format by ``_grammar``; the generation ends
    when the grammar admits nothing but the end of generation.
    """


@dataclass(frozen=True)
class TopLogprob:
    token_id: int
    token: str
    logprob: float
    bytes: bytes


@dataclass(frozen=True)
class TokenStep:
    """One sampled token.

    ``text`` is the part of the completion text this token releases: it can be
    empty (a token ending mid UTF-8 character, an end-of-generation token, or
    text held back because it may be the start of a stop sequence) and can
    carry text held back by earlier tokens.
    """

    token_id: int
    piece: bytes
    logprob: float
    top_logprobs: tuple[TopLogprob, ...]
    text: str
    is_eog: bool


@dataclass(frozen=True)
class Finish:
    """The end of a generation. ``text`` is any trailing text released only now."""

    reason: FinishReason
    text: str = ""
    stop_sequence: str | None = None
    cached_tokens: int = 0
    """Prompt tokens taken from the prefix cache (not decoded again)."""


@dataclass(frozen=True)
class ContextInfo:
    """The context a model serves, against the one it was trained on."""

    n_ctx: int
    trained: int
    """The model's training context (``<arch>.context_length``); 0 when the file does not say."""
    rope_scaling: str | None = None
    """``yarn`` when ``n_ctx`` exceeds ``trained`` (RoPE stretched by ``factor``); None otherwise."""
    factor: float = 1.0

    def as_json(self) -> dict[str, Any]:
        scaling = (
            {"type": self.rope_scaling, "factor": self.factor, "original_max_position_embeddings": self.trained}
            if self.rope_scaling
            else None
        )
        return {"context_length": self.n_ctx, "trained_context_length": self.trained, "rope_scaling": scaling}


@dataclass
class PromptStats:
    """What the engine did with prompts since it started (``GET /health``)."""

    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens reused from the prefix cache (the context's or a snapshot's KV cells)."""
    decoded_tokens: int = 0
    """Prompt tokens actually decoded (``prompt_tokens - cached_tokens``)."""
    decode_s: float = 0.0
    """Wall time spent on prompts: decoding them, and saving and restoring snapshots."""
    slots: int = 0
    """``prefix_cache_slots``; 0 with the prefix cache off."""
    prefixes: tuple[int, ...] = ()
    """Tokens of each prefix kept: the context's first, then the snapshots, most recently used first."""
    snapshot_bytes: int = 0
    snapshot_bytes_limit: int = 0
    restores: int = 0
    """Calls that continued from a snapshot rather than the context as it was."""
    snapshot_s: float = 0.0
    """Wall time spent saving and restoring snapshots (part of ``decode_s``)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "decoded_tokens": self.decoded_tokens,
            "decode_s": round(self.decode_s, 6),
            "cache_hit_rate": self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0,
            "decoded_tokens_per_s": self.decoded_tokens / self.decode_s if self.decode_s > 0 else 0.0,
            "prefix_cache": {
                "slots": self.slots,
                "prefixes": list(self.prefixes),
                "snapshot_bytes": self.snapshot_bytes,
                "snapshot_bytes_limit": self.snapshot_bytes_limit,
                "restores": self.restores,
                "snapshot_s": round(self.snapshot_s, 6),
            },
        }


def common_prefix(cached: npt.NDArray[np.intc], prompt: Sequence[int] | npt.NDArray[np.intc]) -> int:
    """How many leading tokens ``prompt`` shares with the cached ones."""
    n = min(len(cached), len(prompt))
    if n == 0:
        return 0
    differ = np.nonzero(cached[:n] != np.asarray(prompt[:n], dtype=cached.dtype))[0]
    return int(differ[0]) if differ.size else n


@dataclass(eq=False)  # compared by identity (list.remove), never by their arrays
class _Snapshot:
    """A prefix's KV cells, saved from sequence 0 (``llama_state_seq_get_data``)."""

    tokens: npt.NDArray[np.intc]
    """The prefix: whole batches, as a fresh decode of it computes them."""
    data: npt.NDArray[np.uint8]
    used: int
    """When it was last saved or restored (a counter of the engine's), for LRU eviction."""


@dataclass
class _Failure:
    error: BaseException


_Item = TokenStep | Finish | _Failure


class _TextStream:
    """Turns token bytes into released text, honouring stop sequences.

    Text that could still become a stop sequence is held back until the next
    token shows whether it is one, so a stop sequence never leaks out.
    """

    def __init__(self, stops: Sequence[str]):
        self._stops = [s for s in stops if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._text = ""
        self._released = 0

    def feed(self, data: bytes) -> tuple[str, str | None]:
        """Add bytes; return (newly released text, the stop sequence hit if any)."""
        self._text += self._decoder.decode(data)
        if self._stops:
            # A stop can only start where it could overlap text not yet released.
            start = max(0, self._released - max(len(s) for s in self._stops) + 1)
            hit: tuple[int, str] | None = None
            for stop in self._stops:
                idx = self._text.find(stop, start)
                if idx != -1 and (hit is None or idx < hit[0]):
                    hit = (idx, stop)
            if hit is not None:
                end = max(hit[0], self._released)
                out = self._text[self._released : end]
                self._released = end
                return out, hit[1]
        safe = len(self._text) - self._held_suffix()
        out = self._text[self._released : safe]
        self._released = max(self._released, safe)
        return out, None

    def flush(self) -> str:
        self._text += self._decoder.decode(b"", final=True)
        out = self._text[self._released :]
        self._released = len(self._text)
        return out

    def _held_suffix(self) -> int:
        """Length of the longest text suffix that is a proper prefix of a stop."""
        best = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(self._text)), best, -1):
                if self._text.endswith(stop[:n]):
                    best = n
                    break
        return best


@dataclass
class _Model:
    """The llama.cpp objects; touched only on the worker thread."""

    llm: Any
    lib: Any
    vocab: Any
    n_vocab: int
    pieces: dict[int, bytes] = field(default_factory=dict)
    special_pieces: dict[int, bytes] = field(default_factory=dict)


_GRAMMAR_ROOT = b"root"


class _GrammarMask:
    """llama.cpp's grammar sampler, used only to mask logits; touched only on the worker thread.

    The sampler never draws: :meth:`allowed` runs it over the whole vocabulary
    (a token array whose logits are all 0, so whatever it sets to -inf is what
    the grammar rejects) and :meth:`accept` advances it by the token our own
    sampler drew. It holds native memory: :meth:`close` it (in a ``finally``).
    """

    def __init__(self, model: _Model, grammar: str):
        lib = model.lib
        self._lib = lib
        # numpy owns the llama_token_data cells; the array struct points into them.
        self._cells = np.zeros(model.n_vocab, dtype=[("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        assert self._cells.itemsize == ctypes.sizeof(lib.llama_token_data)
        self._cells["id"] = np.arange(model.n_vocab, dtype=np.int32)
        self._array = lib.llama_token_data_array(
            data=self._cells.ctypes.data_as(lib.llama_token_data_p),
            size=model.n_vocab,
            selected=-1,
            sorted=False,
        )
        self._sampler: Any = lib.llama_sampler_init_grammar(model.vocab, grammar.encode("utf-8"), _GRAMMAR_ROOT)
        if not self._sampler:  # a NULL pointer: llama.cpp could not parse the grammar
            raise InvalidArgument(
                "the requested response format gives a grammar llama.cpp cannot use "
                "(too many repetitions or too complex a schema)",
                reason="GRAMMAR_REJECTED",
            )

    def allowed(self) -> npt.NDArray[np.bool_]:
        """Which tokens the grammar accepts next (end-of-generation ones only once it is complete)."""
        self._cells["logit"] = 0.0
        self._lib.llama_sampler_apply(self._sampler, ctypes.byref(self._array))
        allowed: npt.NDArray[np.bool_] = ~np.isneginf(self._cells["logit"])
        return allowed

    def accept(self, token: int) -> None:
        # Only ever a token allowed() admitted: llama.cpp aborts the process on any other.
        self._lib.llama_sampler_accept(self._sampler, token)

    def close(self) -> None:
        if self._sampler is not None:
            self._lib.llama_sampler_free(self._sampler)
            self._sampler = None


class Backend(Protocol):
    """What the HTTP layer needs from a model; :class:`Engine` is the real one."""

    @property
    def n_ctx(self) -> int: ...

    @property
    def context(self) -> ContextInfo: ...

    @property
    def stats(self) -> PromptStats: ...

    async def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]: ...

    def check_prompt(self, prompt_ids: Sequence[int], field: str = "prompt") -> None: ...

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[TokenStep | Finish, None]: ...


class Engine:
    """The served model. Create with :meth:`load`; every method is loop-safe."""

    def __init__(self, config: ModelServerConfig, path: Path):
        self.config = config
        self.path = path
        self.n_ctx = config.n_ctx
        self.context = ContextInfo(config.n_ctx, 0)
        self.stats = PromptStats()
        self._whole_batches = 0
        """Leading context positions decoded in whole aligned batches (see ``_decode_prompt``)."""
        self._snapshots: list[_Snapshot] = []
        """Earlier prompts' prefixes kept in RAM; touched only on the worker thread."""
        self._clock = 0
        if config.prefix_cache:
            self.stats.slots = config.prefix_cache_slots
            self.stats.snapshot_bytes_limit = config.prefix_cache_bytes
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sclate-model")
        self._model: _Model | None = None
        self._closed = False
        self.chat_template: str | None = None
        self.bos_token = ""
        self.eos_token = ""
        self.add_bos = False
        self._eog_cache: list[int] | None = None

    @classmethod
    async def load(cls, config: ModelServerConfig) -> Engine:
        path = config.gguf_path()
        if not path.is_file():
            raise ModelUnavailable(f"GGUF file not found: {path}", reason="MODEL_FILE_MISSING")
        if config.n_ctx < 16:
            raise InvalidArgument("n_ctx must be at least 16", field="n_ctx")
        if config.prefix_cache_slots < 1:
            raise InvalidArgument("prefix_cache_slots must be at least 1", field="prefix_cache_slots")
        if config.prefix_cache_bytes < 0:
            raise InvalidArgument("prefix_cache_bytes cannot be negative", field="prefix_cache_bytes")
        engine = cls(config, path)
        try:
            await engine._run(engine._load)
        except BaseException:
            engine._executor.shutdown(wait=False)
            raise
        return engine

    async def _run(self, fn: Callable[[], T]) -> T:
        if self._closed:
            raise ModelUnavailable("the model server is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn)

    def _load(self) -> None:
        try:
            import llama_cpp
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ModelUnavailable(
                "llama-cpp-python is not installed (pip install 'sclate[model]')",
                reason="MODEL_PACKAGE_MISSING",
            ) from exc
        n_ctx = self.config.n_ctx
        try:
            trained = _trained_context(llama_cpp, self.path)
            stretch: dict[str, Any] = {}
            if trained and n_ctx > trained:
                # Past its training context a RoPE model's attention falls
                # apart; YaRN spreads the positions over the trained range.
                stretch = {
                    "rope_scaling_type": llama_cpp.LLAMA_ROPE_SCALING_TYPE_YARN,
                    "rope_freq_scale": trained / n_ctx,
                    "yarn_orig_ctx": trained,
                }
            llm = llama_cpp.Llama(
                model_path=str(self.path),
                n_ctx=n_ctx,
                n_threads=self.config.n_threads,
                n_batch=self.config.n_batch,
                logits_all=False,
                verbose=False,
                **stretch,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelUnavailable(f"cannot load {self.path}: {exc}") from exc
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self._model = _Model(llm=llm, lib=llama_cpp, vocab=vocab, n_vocab=int(llm.n_vocab()))
        self.n_ctx = int(llm.n_ctx())
        self.context = ContextInfo(
            self.n_ctx,
            trained,
            "yarn" if trained and self.n_ctx > trained else None,
            round(self.n_ctx / trained, 4) if trained and self.n_ctx > trained else 1.0,
        )
        if self.context.rope_scaling:
            log.info("context %d > trained %d: RoPE stretched (YaRN x%g)", self.n_ctx, trained, self.context.factor)
        meta: dict[str, str] = dict(llm.metadata)
        self.chat_template = meta.get("tokenizer.chat_template")
        self.bos_token = self._piece(int(llm.token_bos()), special=True).decode(errors="replace")
        self.eos_token = self._piece(int(llm.token_eos()), special=True).decode(errors="replace")
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))

    @property
    def n_vocab(self) -> int:
        return self._require().n_vocab

    def _require(self) -> _Model:
        if self._model is None:
            raise ModelUnavailable("the model is not loaded")
        return self._model

    def _piece(self, token_id: int, *, special: bool) -> bytes:
        model = self._require()
        cache = model.special_pieces if special else model.pieces
        piece = cache.get(token_id)
        if piece is None:
            piece = bytes(model.llm.detokenize([token_id], special=special))
            cache[token_id] = piece
        return piece

    async def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]:
        """Token ids of ``text`` as the model will see it (special tokens parsed).

        A BOS is prepended only when the vocabulary asks for one and the text
        does not already start with it (chat templates often render it), and
        never with ``add_bos`` False (text that continues a prompt).
        """

        def work() -> list[int]:
            model = self._require()
            bos = add_bos and self.add_bos and not (self.bos_token and text.startswith(self.bos_token))
            ids = model.llm.tokenize(text.encode("utf-8"), add_bos=bos, special=True)
            return [int(i) for i in ids]

        return await self._run(work)

    async def detokenize(self, ids: Sequence[int]) -> str:
        def work() -> str:
            return b"".join(self._piece(int(i), special=True) for i in ids).decode("utf-8", errors="replace")

        return await self._run(work)

    def check_prompt(self, prompt_ids: Sequence[int], field: str = "prompt") -> None:
        """Reject a prompt that cannot be run, naming the request field it came from."""
        if not prompt_ids:
            raise InvalidArgument(f"'{field}' renders to an empty prompt", field=field)
        if len(prompt_ids) >= self.n_ctx:
            # OpenAI's own words: clients parse the limit out of them (a harness
            # that compacts its history learns how far it may go).
            raise InvalidArgument(
                f"This model's maximum context length is {self.n_ctx} tokens, including the completion. "
                f"However, your '{field}' resulted in {len(prompt_ids)} tokens. Please reduce its length.",
                field=field,
                reason=PROMPT_TOO_LONG,
            )
        n_vocab = self.n_vocab
        for tid in prompt_ids:
            if not 0 <= tid < n_vocab:
                raise InvalidArgument(f"token id {tid} in '{field}' is not in the vocabulary", field=field)

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[TokenStep | Finish, None]:
        """Yield each sampled token as it is produced, then one :class:`Finish`.

        Leaving the iteration early (a client that hung up) stops the worker
        after its current token.
        """
        self.check_prompt(prompt_ids)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        cancel = threading.Event()

        def emit(item: _Item) -> None:
            # The loop may already be gone when a client hangs up during shutdown.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(queue.put_nowait, item)

        def work() -> None:
            try:
                self._generate(list(prompt_ids), params, emit, cancel)
            except BaseException as exc:
                emit(_Failure(exc))

        future = loop.run_in_executor(self._executor, work)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, _Failure):
                    if isinstance(item.error, InvalidArgument | ModelUnavailable):
                        raise item.error
                    raise ModelUnavailable(f"generation failed: {item.error}") from item.error
                yield item
                if isinstance(item, Finish):
                    break
        finally:
            cancel.set()
            # Wait for the worker to let go of the model so a cancelled request
            # cannot overlap the next one's bookkeeping; it stops within a token.
            with contextlib.suppress(BaseException):
                await asyncio.shield(future)

    def _generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        emit: Callable[[_Item], None],
        cancel: threading.Event,
    ) -> None:
        if cancel.is_set():
            return
        model = self._require()
        # Made before the prompt is decoded, so a grammar llama.cpp refuses costs nothing.
        grammar = _GrammarMask(model, params.grammar) if params.grammar is not None else None
        try:
            self._decode_and_sample(prompt_ids, params, emit, cancel, grammar)
        finally:
            if grammar is not None:
                grammar.close()

    def _decode_and_sample(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        emit: Callable[[_Item], None],
        cancel: threading.Event,
        grammar: _GrammarMask | None,
    ) -> None:
        model = self._require()
        llm, lib = model.llm, model.lib
        n_vocab = model.n_vocab
        rng = np.random.default_rng(params.seed if params.seed is not None else prompt_seed(prompt_ids))
        text = _TextStream(params.stop)
        budget = self.n_ctx - len(prompt_ids)
        if params.max_tokens is not None:
            budget = min(budget, params.max_tokens)
        n_top = min(max(params.top_logprobs, 0), MAX_TOP_LOGPROBS)

        cached = self._decode_prompt(llm, prompt_ids)
        generated = 0
        while True:
            if cancel.is_set():
                return
            ptr = lib.llama_get_logits_ith(llm.ctx, -1)
            logits = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,)).astype(
                np.float64
            )
            if grammar is not None:
                # Masked before the log-softmax on purpose: under a grammar the
                # reported logprobs are those of the distribution the token was
                # really drawn from, the model's renormalised over the tokens
                # the grammar allows (trainers weigh each token by it), not the
                # unconstrained model's.
                logits[~grammar.allowed()] = -np.inf
            logprobs = _log_softmax(logits)
            if params.ignore_eos:
                for eog in self._eog_ids():
                    logits[eog] = -np.inf
            if grammar is not None and not np.isfinite(logits).any():
                # The grammar is complete and admits only an end of generation,
                # which ignore_eos forbids: the output is done all the same.
                emit(Finish("stop", text.flush(), cached_tokens=cached))
                return
            token = _sample(logits, params, rng)
            generated += 1
            is_eog = bool(lib.llama_vocab_is_eog(model.vocab, token))
            if grammar is not None and not is_eog:
                grammar.accept(token)
            top: tuple[TopLogprob, ...] = ()
            if n_top:
                idx = np.argpartition(-logprobs, n_top)[:n_top]
                idx = idx[np.argsort(-logprobs[idx], kind="stable")]
                # Tokens a grammar rejects (-inf, which JSON cannot carry) could
                # not have been drawn; fewer than n_top alternatives are listed.
                idx = idx[np.isfinite(logprobs[idx])]
                top = tuple(
                    TopLogprob(
                        token_id=int(i),
                        token=self._piece(int(i), special=True).decode("utf-8", errors="replace"),
                        logprob=float(logprobs[i]),
                        bytes=self._piece(int(i), special=True),
                    )
                    for i in idx
                )
            if is_eog:
                emit(
                    TokenStep(
                        token,
                        self._piece(token, special=True),
                        float(logprobs[token]),
                        top,
                        "",
                        True,
                    )
                )
                emit(Finish("stop", text.flush(), cached_tokens=cached))
                return
            released, stop_hit = text.feed(self._piece(token, special=False))
            emit(
                TokenStep(
                    token,
                    self._piece(token, special=True),
                    float(logprobs[token]),
                    top,
                    released,
                    False,
                )
            )
            if stop_hit is not None:
                emit(Finish("stop", "", stop_hit, cached_tokens=cached))
                return
            if generated >= budget:
                emit(Finish("length", text.flush(), cached_tokens=cached))
                return
            llm.eval([token])

    def _decode_prompt(self, llm: Any, prompt_ids: list[int]) -> int:
        """Decode the prompt into the context; returns how many tokens came from the cache.

        With the prefix cache, the KV cells of the longest prefix the prompt
        shares with the context or a kept snapshot (see :meth:`_resume`) are
        kept and only the rest is decoded. A call's output must not depend on
        the calls before it, and llama.cpp's kernels give slightly different
        numbers for a position decoded in a batch of another size (enough to
        flip a greedy near-tie). So only whole batches are reused: positions
        decoded in full ``n_batch`` batches starting at a multiple of
        ``n_batch``, exactly as a fresh decode of the new prompt computes
        them, and the decode resumes at such a boundary. The result is the
        fresh decode's, bit for bit, minus up to one batch of work. Without
        the cache (or after any error, which leaves the context unknown) the
        context starts empty.
        """
        batch = int(llm.n_batch)
        started = time.perf_counter()
        reuse = 0
        try:
            if self.config.prefix_cache:
                reuse = self._resume(llm, prompt_ids, batch)
            if reuse > 0:
                llm.n_tokens = reuse  # eval() drops the KV cells from here on
            else:
                llm.reset()
            self._whole_batches = 0
            llm.eval(prompt_ids[reuse:])
        except BaseException:
            llm.reset()
            self._whole_batches = 0
            self._update_prefix_stats()
            raise
        # Generated tokens are decoded one at a time: never reusable as whole batches.
        self._whole_batches = len(prompt_ids) // batch * batch
        stats = self.stats
        stats.calls += 1
        stats.prompt_tokens += len(prompt_ids)
        stats.cached_tokens += reuse
        stats.decoded_tokens += len(prompt_ids) - reuse
        stats.decode_s += time.perf_counter() - started
        self._update_prefix_stats()
        return reuse

    def _resume(self, llm: Any, prompt_ids: list[int], batch: int) -> int:
        """Set the context up to continue the prompt; returns the tokens it keeps.

        The source is the context as it is or the snapshot sharing the most
        whole batches with the prompt (the context on a tie: no copy). When
        the context's prefix is about to be cut (another source, or a prompt
        that leaves it part way), it is saved first. A restored snapshot that
        the prompt takes (but for at most a batch) is dropped: the context
        now carries it, and will save it again before cutting it.
        """
        limit = len(prompt_ids) - 1  # at least one token is decoded, for the logits
        kept = self._whole_batches if llm.n_tokens > 0 else 0
        reuse = 0
        if kept:
            reuse = min(common_prefix(llm.input_ids[: llm.n_tokens], prompt_ids), kept, limit) // batch * batch
        source: _Snapshot | None = None
        for snap in self._snapshots:
            # Snapshots are whole batches: only the prompt's last token caps them.
            n = min(common_prefix(snap.tokens, prompt_ids), limit) // batch * batch
            if n > reuse or (source is not None and n == reuse and snap.used > source.used):
                source, reuse = snap, n
        if source is not None or reuse < kept:
            self._save_context(llm, kept, batch, keep=source)
        if source is not None:
            if not self._restore(llm, source):
                return 0
            if len(source.tokens) - reuse <= batch:
                self._snapshots.remove(source)
        self._evict(self.config.prefix_cache_slots - 1, self.config.prefix_cache_bytes)
        return reuse

    def _save_context(self, llm: Any, kept: int, batch: int, keep: _Snapshot | None) -> None:
        """Snapshot the context's first ``kept`` positions (whole batches) before they are cut."""
        if self.config.prefix_cache_slots < 2 or kept < batch:
            return
        lib = self._require().lib
        tokens = np.array(llm.input_ids[:kept], dtype=np.intc)
        for snap in self._snapshots:
            if len(snap.tokens) >= kept and common_prefix(snap.tokens, tokens) >= kept:
                snap.used = self._tick()  # already kept whole
                return
        started = time.perf_counter()
        # Only the whole batches are worth keeping: drop the rest (the prompt's
        # tail and the generated tokens) from the context first.
        lib.llama_memory_seq_rm(lib.llama_get_memory(llm.ctx), 0, kept, -1)
        llm.n_tokens = min(int(llm.n_tokens), kept)
        size = int(lib.llama_state_seq_get_size(llm.ctx, 0))
        limit = self.config.prefix_cache_bytes
        if size > limit:
            return
        # Older snapshots this one covers but for at most a batch are replaced
        # by it (a memory system's fixed prompt with one call's text after it).
        self._snapshots = [
            s
            for s in self._snapshots
            if s is keep or len(s.tokens) - common_prefix(s.tokens, tokens) // batch * batch > batch
        ]
        # Room before allocating, so RAM stays within the limit (the snapshot
        # about to be restored is kept: at worst one over, until _evict).
        self._evict(len(self._snapshots), limit - size, keep=keep)
        data = np.empty(size, dtype=np.uint8)
        written = int(
            lib.llama_state_seq_get_data(llm.ctx, data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), size, 0)
        )
        if written != size:
            log.warning("prefix cache: saving %d tokens wrote %d of %d bytes; not kept", kept, written, size)
        else:
            self._snapshots.append(_Snapshot(tokens, data, self._tick()))
        self.stats.snapshot_s += time.perf_counter() - started

    def _restore(self, llm: Any, snap: _Snapshot) -> bool:
        """Load a snapshot into the context in place of what it holds; False (and an empty context) on failure."""
        lib = self._require().lib
        started = time.perf_counter()
        lib.llama_memory_seq_rm(lib.llama_get_memory(llm.ctx), 0, -1, -1)
        llm.n_tokens = 0
        size = len(snap.data)
        read = int(
            lib.llama_state_seq_set_data(llm.ctx, snap.data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), size, 0)
        )
        self.stats.snapshot_s += time.perf_counter() - started
        if read != size:
            log.warning("prefix cache: restoring %d tokens read %d of %d bytes; dropped", len(snap.tokens), read, size)
            self._snapshots.remove(snap)
            llm.reset()
            return False
        n = len(snap.tokens)
        llm.input_ids[:n] = snap.tokens
        llm.n_tokens = n
        snap.used = self._tick()
        self.stats.restores += 1
        return True

    def _evict(self, count: int, nbytes: int, keep: _Snapshot | None = None) -> None:
        """Drop the least recently used snapshots (but ``keep``) until at most ``count`` and ``nbytes`` remain."""
        by_age = sorted((s for s in self._snapshots if s is not keep), key=lambda s: s.used)
        total = sum(len(s.data) for s in self._snapshots)
        n = len(self._snapshots)
        for snap in by_age:
            if n <= count and total <= nbytes:
                break
            self._snapshots.remove(snap)
            n -= 1
            total -= len(snap.data)

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _update_prefix_stats(self) -> None:
        if not self.config.prefix_cache:
            return
        snaps = sorted(self._snapshots, key=lambda s: -s.used)
        self.stats.prefixes = (self._whole_batches, *(len(s.tokens) for s in snaps))
        self.stats.snapshot_bytes = sum(len(s.data) for s in snaps)

    def _eog_ids(self) -> list[int]:
        model = self._require()
        cached = self._eog_cache
        if cached is None:
            cached = [i for i in range(model.n_vocab) if model.lib.llama_vocab_is_eog(model.vocab, i)]
            self._eog_cache = cached
        return cached

    async def close(self) -> None:
        if self._closed:
            return

        def release() -> None:
            self._snapshots.clear()
            if self._model is not None:
                self._model.llm.close()
                self._model = None

        try:
            await self._run(release)
        finally:
            self._closed = True
            await asyncio.to_thread(self._executor.shutdown, wait=True)


def _trained_context(llama_cpp: Any, path: Path) -> int:
    """The training context a GGUF declares (0 when it does not), read from its vocabulary-only load."""
    probe = llama_cpp.Llama(model_path=str(path), vocab_only=True, n_ctx=16, verbose=False)
    try:
        meta: dict[str, str] = dict(probe.metadata)
    finally:
        probe.close()
    arch = meta.get("general.architecture", "")
    try:
        return int(meta.get(f"{arch}.context_length", "0"))
    except ValueError:
        return 0


def _log_softmax(logits: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    top = float(np.max(logits))
    shifted = logits - top
    result: npt.NDArray[np.float64] = shifted - np.log(np.sum(np.exp(shifted)))
    return result


def prompt_seed(prompt_ids: Sequence[int]) -> int:
    """The sampling seed of a request that names none: derived from its prompt, so the
    same prompt gets the same sample and a replayed run the same answers (a memory
    system's extraction at temperature 0.1 included). A request that wants another
    sample of the same prompt passes its own ``seed``."""
    digest = hashlib.blake2b(np.asarray(prompt_ids, dtype=np.int64).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _sample(logits: npt.NDArray[np.float64], params: SamplingParams, rng: np.random.Generator) -> int:
    """Greedy at temperature 0, else temperature, top-k and nucleus sampling."""
    if params.temperature <= 0.0:
        return int(np.argmax(logits))
    candidates = np.arange(logits.shape[0])
    scaled = logits / params.temperature
    if 0 < params.top_k < logits.shape[0]:
        candidates = np.argpartition(-scaled, params.top_k)[: params.top_k]
    if params.top_p < 1.0:
        order = candidates[np.argsort(-scaled[candidates], kind="stable")]
        probs = np.exp(scaled[order] - scaled[order[0]])
        probs /= probs.sum()
        # Keep the smallest head whose mass reaches top_p (at least one token).
        keep = int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1
        candidates = order[:keep]
    chosen = scaled[candidates]
    probs = np.exp(chosen - np.max(chosen))
    probs /= probs.sum()
    return int(candidates[int(rng.choice(len(candidates), p=probs))])
