"""`sclated` / `python -m sclated`: run the daemon."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from sclated.daemon import build_parser, load_config, run_daemon
    from sclated.errors import SclateError

    args = build_parser().parse_args(argv)
    try:
        config = load_config(args)
    except SclateError as exc:
        print(f"sclated: {exc.message}", file=sys.stderr)
        return 2
    return run_daemon(config)


if __name__ == "__main__":
    sys.exit(main())
