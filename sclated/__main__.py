"""`sclated` / `python -m sclated`: run the daemon, or one of its local tools.

``sclated --listen ... --state-dir ...`` (or ``--config FILE``) runs the
daemon; ``sclated doctor | images build | model serve | bench NAME | demo``
runs a local tool (:mod:`sclated._tools`).
"""

from __future__ import annotations

import os
import sys

GRPC_FORK_SUPPORT = "GRPC_ENABLE_FORK_SUPPORT"


def without_grpc_fork_handlers() -> None:
    """Keep gRPC's fork handlers out of this process; call it before grpc is imported.

    With them, a child forked while gRPC's threads are busy (the daemon starting its model
    server, a bench starting a daemon) can die of SIGSEGV between fork and exec: one start
    in forty did under load (found by `sclated bench faults`: daemons and model servers
    that "did not become ready (exit -11)"). Nothing here forks without exec'ing, which is
    all the handlers are for. An explicit setting in the environment is kept."""
    os.environ.setdefault(GRPC_FORK_SUPPORT, "0")


def main(argv: list[str] | None = None) -> int:
    without_grpc_fork_handlers()
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
