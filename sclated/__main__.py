"""`sclated` / `python -m sclated`: run the daemon."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from sclated.daemon import build_parser, load_config, run_daemon
    from sclated.daemon._config import check_startup
    from sclated.errors import SclateError

    args = build_parser().parse_args(argv)
    try:
        config = load_config(args)
        check_startup(config)
        # Start-up errors the checks above cannot see first (the tokens file,
        # an address taken meanwhile) come out of run_daemon as SclateError too.
        return run_daemon(config)
    except SclateError as exc:
        # One line, no traceback: what is wrong and where (file, line).
        print(f"sclated: {exc.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
