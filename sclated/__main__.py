"""`sclated` / `python -m sclated`: run the daemon, or one of its local tools.

``sclated --listen ... --state-dir ...`` (or ``--config FILE``) runs the
daemon; ``sclated doctor | images build | model serve | bench NAME | demo``
runs a local tool (:mod:`sclated._tools`).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from sclated._tools import EPILOG, TOOLS, run_tool

    args_in = sys.argv[1:] if argv is None else argv
    if args_in and args_in[0] in TOOLS:
        return run_tool(args_in)

    from sclated.daemon import build_parser, check_startup, load_config, run_daemon
    from sclated.errors import SclateError

    parser = build_parser()
    parser.epilog = EPILOG
    args = parser.parse_args(args_in)
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
