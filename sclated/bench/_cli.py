"""`sclate bench NAME [--json] [options]`: each prints ONE JSON object with --json."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["BENCHES", "run_bench_cli"]


def _scheduler(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._scheduler import bench_scheduler

    return bench_scheduler(quick=args.quick)


def _daemon(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._daemon import bench_daemon

    return bench_daemon(runs=args.runs, turn_ms=args.turn_ms)


def _sandbox(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.runtime._bench import bench_sandbox

    return bench_sandbox()


def _proxy(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._proxy import bench_proxy

    return bench_proxy(quick=args.quick)


BENCHES: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]]] = {
    "scheduler": _scheduler,
    "daemon": _daemon,
    "sandbox": _sandbox,
    "proxy": _proxy,
}


def run_bench_cli(which: str, argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=f"sclate bench {which}")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    p.add_argument("--runs", type=int, default=1000, help="daemon: concurrent runs")
    p.add_argument(
        "--turn-ms", type=int, default=200, help="daemon: the scripted agent's busy time per turn"
    )
    args = p.parse_args(argv)
    bench = BENCHES.get(which)
    if bench is None:
        print(f"sclate bench: no benchmark named {which!r}; have: {', '.join(BENCHES)}")
        return 2
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        result: dict[str, Any] = runner.run(bench(args))
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>28}: {v}")
    return 0
