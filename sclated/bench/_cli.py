"""`sclate bench NAME [--json] [options]`: each prints ONE JSON object with --json."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
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


async def _e2e_bench(args: argparse.Namespace) -> dict[str, Any]:
    import sys
    import tempfile

    from sclated.e2e import run_e2e

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="sclate-bench-e2e-") as tmp:
        run = await run_e2e(
            out_dir=Path(tmp),
            data_dir=args.data_dir.resolve() if args.data_dir else None,
            harness_options={"max_tokens": args.max_tokens, "max_steps": 3},
            progress=progress if not args.json else (lambda _: None),
        )
    r = run.get("results", {})
    s = r.get("scheduler", {})
    calls = r.get("calls", [])
    return {
        "data": str(args.data_dir) if args.data_dir else "builtin:tiny",
        "state": run.get("state"),
        "rounds": int(r.get("rounds", 0)),
        "rounds_graded": int(r.get("rounds_graded", 0)),
        "score": float(r.get("score", 0.0)),
        "events_fired": int(s.get("events_fired", 0)),
        "events_scheduled": int(s.get("events_scheduled", 0)),
        "in_order": bool(s.get("in_order", False)),
        "delivery_delay_ms_p50": float(s.get("delivery_delay_ms_p50", 0.0)),
        "delivery_delay_ms_max": float(s.get("delivery_delay_ms_max", 0.0)),
        "compression_ratio": float(s.get("compression_ratio", 0.0)),
        "compression_limit": float(s.get("compression_limit", 0.0)),
        "jumps": int(s.get("jumps", 0)),
        "sim_span_days": float(s.get("sim_span_s", 0.0)) / 86400,
        "wall_s": float(s.get("wall_s", 0.0)),
        "calls_by_role": {c["role"]: int(c.get("calls", 0)) for c in calls},
        "tokens_by_role": {
            c["role"]: int(c.get("prompt_tokens", 0)) + int(c.get("completion_tokens", 0)) for c in calls
        },
    }


def _e2e(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    return _e2e_bench(args)


BENCHES: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]]] = {
    "scheduler": _scheduler,
    "daemon": _daemon,
    "sandbox": _sandbox,
    "proxy": _proxy,
    "e2e": _e2e,
}


def run_bench_cli(which: str, argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=f"sclate bench {which}")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    p.add_argument("--runs", type=int, default=1000, help="daemon: concurrent runs")
    p.add_argument(
        "--turn-ms", type=int, default=1000, help="daemon: the scripted agent's busy time per turn (a fast model call)"
    )
    p.add_argument("--data-dir", type=Path, default=None, help="e2e: upstream MetaClaw data (default: built-in tiny)")
    p.add_argument("--max-tokens", type=int, default=96, help="e2e: the harness's max_tokens per model call")
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
