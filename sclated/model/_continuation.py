"""Token-faithful multi-turn prompts: a conversation's next prompt extends the
tokens its earlier calls really had.

A chat API gets the whole conversation as text on every call. Rendering it
with the chat template and tokenizing it again does not give back the ids the
model sampled for its own earlier replies (tokenization is not invertible, a
harness may strip or re-serialise a reply, a tool call comes back as JSON the
template writes its own way), so the capture sees a prompt that does not
start with the previous call's prompt and completion, and a trainer gets
fragments instead of one multi-turn sample.

So the server keeps, per exchange, the exact ids of its prompt and of the
completion it sampled, under a hash of the exchange's messages: the request's,
then the reply as the server returned it. A new request whose messages start
with such an exchange (the same messages, its assistant message equal to the
server's reply: same content but for surrounding whitespace, same tool names
and arguments as JSON values) is prompted with those ids followed by the
tokens of what the template writes after that reply (its turn's closing, the
new messages, the generation prompt; :meth:`ChatRenderer.continuation`). An
end-of-generation token the model sampled stands for the turn's closing token
the template writes (``<|im_end|>``), so it is not written twice; a reply cut
by the token limit or a stop sequence gets the template's closing whole.
When there are several, the longest kept exchange wins. Anything else (no
kept exchange, a template that is not prefix-stable there, a reply that ended
with an end-of-generation token the template does not close the turn with, a
prompt that would not fit the context) is rendered whole, as without this.

Memory is bounded: an LRU of exchanges, at most ``max_entries`` of them and
``max_bytes`` of ids (4 bytes a token). A lock guards the table: lookups,
inserts and evictions are atomic whatever thread or task makes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from sclated.errors import InvalidArgument

from ._chat import ChatMessage, ChatRenderer, ToolMode
from ._tools import ToolSpec

__all__ = ["ENV_FLAG", "ChatPrompt", "ContinuationStats", "Conversations", "Tokenizer", "continuation_from_env"]

ENV_FLAG = "SCLATE_MODEL_TOKEN_CONTINUATION"
"""``0`` (or ``false``, ``off``, ``no``) turns the continuation off for ``python -m sclated.model``."""


class Tokenizer(Protocol):
    """What the continuation needs of a model (:class:`~sclated.model.Engine` is one)."""

    @property
    def n_ctx(self) -> int: ...

    async def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]: ...


def continuation_from_env(default: bool = True) -> bool:
    """Whether :data:`ENV_FLAG` leaves the continuation on (unset or empty: ``default``)."""
    value = os.environ.get(ENV_FLAG, "").strip().lower()
    if not value:
        return default
    return value not in ("0", "false", "off", "no")


_TRIES = 3
"""At most this many kept exchanges a request extends are tried, the longest first."""

_ENTRY_OVERHEAD = 256
"""Bytes counted per kept exchange besides its ids (the key, the object)."""


def _canonical_arguments(arguments: str) -> str:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _exact(message: ChatMessage) -> bytes:
    """A message as the template may see it: every field, exactly."""
    calls = [[c.id, c.name, c.arguments] for c in message.tool_calls]
    return json.dumps(
        [message.role, message.content, calls, message.tool_call_id, message.name], ensure_ascii=False
    ).encode()


def _reply(message: ChatMessage) -> bytes:
    """An assistant message as compared with the reply the server sent: content but for
    surrounding whitespace, tool calls by name and arguments (as JSON values); not the
    call ids (a harness may rename them; the template gets them from later messages)."""
    calls = [[c.name, _canonical_arguments(c.arguments)] for c in message.tool_calls]
    return json.dumps(["assistant", message.content.strip(), calls], ensure_ascii=False).encode()


def _update(hasher: Any, data: bytes) -> None:
    hasher.update(len(data).to_bytes(8, "little"))
    hasher.update(data)


def render_key(tools: Sequence[ToolSpec], mode: ToolMode, forced: str | None) -> bytes:
    """What besides the messages shapes a rendered prompt: the tools and how they are offered."""
    spec = [[t.name, t.description, t.parameters] for t in tools] if mode != "none" else []
    return json.dumps([spec, mode, forced], sort_keys=True, ensure_ascii=False).encode()


@dataclass(frozen=True, eq=False)
class _Kept:
    """One exchange: the prompt's ids and the sampled completion's, back to back."""

    ids: npt.NDArray[np.int32]
    closing: str | None
    """The text of the end-of-generation token the completion ended with; None if it
    ended otherwise (the token limit, a stop sequence, a complete grammar)."""

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes) + _ENTRY_OVERHEAD


@dataclass
class ContinuationStats:
    """What the continuation did since the server started (``GET /health``)."""

    continued: int = 0
    """Chat prompts built on a kept exchange."""
    rendered: int = 0
    """Chat prompts rendered whole (no kept exchange, or a fallback)."""
    fallbacks: dict[str, int] = field(default_factory=dict)
    """Why a prompt with a kept exchange was rendered whole after all, by reason."""
    kept: int = 0
    evicted: int = 0

    def as_json(self, entries: int, nbytes: int, limits: tuple[int, int]) -> dict[str, Any]:
        return {
            "continued": self.continued,
            "rendered": self.rendered,
            "fallbacks": dict(sorted(self.fallbacks.items())),
            "kept": self.kept,
            "evicted": self.evicted,
            "entries": entries,
            "bytes": nbytes,
            "max_entries": limits[0],
            "max_bytes": limits[1],
        }


@dataclass
class ChatPrompt:
    """A chat request's prompt ids and what is needed to keep its exchange."""

    ids: list[int]
    continued: int = 0
    """Leading ids taken from a kept exchange (0: rendered whole)."""
    _state: Any = None
    """The message hash after the request's messages (None: nothing to keep)."""


class Conversations:
    """The kept exchanges of a model server, and the prompts built on them."""

    def __init__(self, *, max_entries: int = 1024, max_bytes: int = 128 * 1024**2, enabled: bool = True):
        if max_entries < 0 or max_bytes < 0:
            raise InvalidArgument("continuation limits cannot be negative", field="continuation_entries")
        self.enabled = enabled
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.stats = ContinuationStats()
        self._kept: OrderedDict[bytes, _Kept] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def as_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "enabled": self.enabled,
                **self.stats.as_json(len(self._kept), self._bytes, (self.max_entries, self.max_bytes)),
            }

    async def prompt(
        self,
        engine: Tokenizer,
        renderer: ChatRenderer,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        mode: ToolMode = "auto",
        forced: str | None = None,
    ) -> ChatPrompt:
        """The prompt of a chat request: on the longest kept exchange its messages
        start with, or rendered whole (exactly as :meth:`ChatRenderer.render` and
        ``engine.tokenize`` would)."""
        if not self.enabled:
            ids = await engine.tokenize(renderer.render(messages, tools, mode, forced))
            return ChatPrompt(ids)
        hasher = hashlib.blake2b(digest_size=16)
        _update(hasher, render_key(tools, mode, forced))
        found: list[tuple[int, _Kept]] = []
        for i, message in enumerate(messages):
            if message.role == "assistant" and i > 0:
                probe = hasher.copy()
                _update(probe, _reply(message))
                kept = self._get(probe.digest())
                if kept is not None:
                    found.append((i, kept))
            _update(hasher, _exact(message))
        # The longest first; a template that fails one usually fails the shorter ones
        # too, and each try renders the conversation a few times: only a few are tried.
        for reply, kept in reversed(found[-_TRIES:]):
            continued = await self._continue(engine, renderer, messages, reply, kept, tools, mode, forced)
            if continued is not None:
                with self._lock:
                    self.stats.continued += 1
                return ChatPrompt(continued, len(kept.ids), hasher)
        ids = await engine.tokenize(renderer.render(messages, tools, mode, forced))
        with self._lock:
            self.stats.rendered += 1
        return ChatPrompt(ids, 0, hasher)

    async def _continue(
        self,
        engine: Tokenizer,
        renderer: ChatRenderer,
        messages: Sequence[ChatMessage],
        reply: int,
        kept: _Kept,
        tools: Sequence[ToolSpec],
        mode: ToolMode,
        forced: str | None,
    ) -> list[int] | None:
        rest = renderer.continuation(messages, reply, tools, mode, forced)
        if rest is None:
            self._fallback("template_not_prefix_stable")
            return None
        if kept.closing is not None:
            # The sampled end-of-generation token is the turn's closing token.
            if not rest.startswith(kept.closing):
                self._fallback("closing_differs")
                return None
            rest = rest[len(kept.closing) :]
        ids = [int(i) for i in kept.ids]
        if rest:
            ids += await engine.tokenize(rest, add_bos=False)
        if len(ids) >= engine.n_ctx:
            # The whole render may be a little shorter; it gets the usual check.
            self._fallback("beyond_context")
            return None
        return ids

    def _fallback(self, reason: str) -> None:
        with self._lock:
            self.stats.fallbacks[reason] = self.stats.fallbacks.get(reason, 0) + 1

    def _get(self, key: bytes) -> _Kept | None:
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
            return kept

    def remember(
        self,
        prompt: ChatPrompt,
        completion_ids: Sequence[int],
        reply: ChatMessage,
        closing: str | None,
    ) -> None:
        """Keep an exchange: the prompt, the ``completion_ids`` sampled for it, and the
        ``reply`` the server sent (as a harness will send it back). ``closing``: the
        text of the end-of-generation token the completion ended with, if it did."""
        if not self.enabled or prompt._state is None or not completion_ids:
            return
        hasher = prompt._state.copy()
        _update(hasher, _reply(reply))
        key = hasher.digest()
        kept = _Kept(np.asarray([*prompt.ids, *completion_ids], dtype=np.int32), closing)
        if kept.nbytes > self.max_bytes or self.max_entries == 0:
            return
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._kept[key] = kept
            self._bytes += kept.nbytes
            self.stats.kept += 1
            while len(self._kept) > self.max_entries or self._bytes > self.max_bytes:
                _, gone = self._kept.popitem(last=False)
                self._bytes -= gone.nbytes
                self.stats.evicted += 1
