"""`sclated bench NAME [--json] [options]`: each prints ONE JSON object with --json.

Benchmarks clean up after themselves, also when they fail or are interrupted:
SIGINT and SIGTERM cancel the benchmark (so every ``finally`` runs: containers
removed by label, temporary directories deleted), and every child process is
started with :func:`spawn` in a process group of its own, which
:func:`end_group` ends as a whole; whatever group is still registered when the
command returns is killed there. With ``setpriv`` on the machine, children
also get SIGKILL if this process dies without any chance to clean up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

__all__ = ["BENCHES", "FAULTS_PARTS", "FUZZ_PARTS", "end_group", "run_bench_cli", "spawn"]

# Spelled out so that parsing options imports no fuzz part; tests/bench/test_fuzz.py
# holds it to sclated.bench._fuzz.PARTS.
FUZZ_PARTS = ("api", "control_socket", "proxy", "adapters")
# The same for `bench faults --only`; tests/bench/test_faults.py holds it to
# sclated.bench._faults (its parts, then the sandbox part's faults).
FAULTS_PARTS = (
    "kill",
    "disk",
    "sigterm",
    "sandbox",
    "mitmdump_kill",
    "container_kill",
    "container_pause",
    "harness_kill",
    "control_close",
    "model_kill",
    "sigterm_snapshot",
    "sigterm_restore",
)

# Process groups (= leader pids) started by spawn() and not yet ended.
_GROUPS: set[int] = set()


async def spawn(*cmd: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """Start ``cmd`` as the leader of a new process group (session), registered
    for :func:`end_group` and the last-resort kill at exit."""
    argv = list(cmd)
    setpriv = shutil.which("setpriv")
    if setpriv is not None:
        # Dies with us even if we are SIGKILLed (no finally runs then).
        argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
    proc = await asyncio.create_subprocess_exec(*argv, start_new_session=True, **kwargs)
    _GROUPS.add(proc.pid)
    return proc


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # pid reused by someone else's group: not ours any more
        return False
    return True


async def end_group(proc: asyncio.subprocess.Process, *, sig: int = signal.SIGTERM, grace_s: float = 10.0) -> int:
    """Send ``sig`` to the whole group of ``proc``, wait up to ``grace_s`` for the
    leader, then SIGKILL whatever is left of the group; returns the exit code."""
    pgid = proc.pid
    try:
        if proc.returncode is None:
            _signal_group(pgid, sig)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), grace_s)
        # Members the leader left behind (or the leader itself, if it did not stop).
        _signal_group(pgid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        return await proc.wait()
    finally:
        _GROUPS.discard(pgid)


def kill_groups() -> None:
    """SIGKILL every group :func:`spawn` started that was not ended (the last resort)."""
    for pgid in list(_GROUPS):
        _signal_group(pgid, signal.SIGKILL)
        _GROUPS.discard(pgid)


def _scheduler(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._scheduler import bench_scheduler

    return bench_scheduler(quick=args.quick)


def _daemon(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._daemon import bench_daemon

    runs = args.runs if args.runs is not None else (20 if args.quick else 1000)
    return bench_daemon(runs=runs, turn_ms=args.turn_ms, days=1 if args.quick else 2)


def _sandbox(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._sandbox import bench_sandbox

    rounds = args.rounds if args.rounds is not None else (3 if args.quick else 20)
    return bench_sandbox(rounds=rounds, quick=args.quick)


def _proxy(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._proxy import bench_proxy

    return bench_proxy(quick=args.quick, with_model=not args.no_model, in_sandbox=not args.no_sandbox)


def _model(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._model import bench_model

    return bench_model(quick=args.quick)


def _e2e(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._e2e import bench_e2e

    return bench_e2e(args)


def _harness(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._harness import bench_harness

    args.harness = args.harness or "hermes"
    return bench_harness(args)


def _memory(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._memory import bench_memory

    return bench_memory(args)


def _gaia2(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._gaia2 import bench_gaia2

    return bench_gaia2(args)


def _branches(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._branches import bench_branches

    return bench_branches(args)


def _rollouts(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._rollouts import bench_rollouts

    return bench_rollouts(args)


def _fuzz(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._fuzz import bench_fuzz

    return bench_fuzz(args)


def _faults(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._faults import bench_faults

    return bench_faults(args)


def _soak(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._soak import bench_soak

    return bench_soak(args)


def _cluster(args: argparse.Namespace) -> Coroutine[Any, Any, dict[str, Any]]:
    from sclated.bench._cluster import bench_cluster

    return bench_cluster(args)


BENCHES: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]]] = {
    "scheduler": _scheduler,
    "daemon": _daemon,
    "sandbox": _sandbox,
    "proxy": _proxy,
    "model": _model,
    "e2e": _e2e,
    "harness": _harness,
    "memory": _memory,
    "gaia2": _gaia2,
    "branches": _branches,
    "rollouts": _rollouts,
    "fuzz": _fuzz,
    "faults": _faults,
    "soak": _soak,
    "cluster": _cluster,
}


def run_bench_cli(which: str, argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=f"sclated bench {which}")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    p.add_argument(
        "--runs",
        type=int,
        default=None,
        help="daemon: concurrent runs (default 1000; 20 with --quick); cluster: runs per executor (24; 12)",
    )
    p.add_argument(
        "--rounds", type=int, default=None, help="sandbox: start rounds, ours and raw Docker alternating (default 20)"
    )
    p.add_argument("--no-model", action="store_true", help="proxy: skip the embedded model (echo upstream only)")
    p.add_argument("--no-sandbox", action="store_true", help="proxy: skip the in-sandbox measurement")
    p.add_argument(
        "--turn-ms", type=int, default=1000, help="daemon: the scripted agent's busy time per turn (a fast model call)"
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="e2e, harness, branches: upstream MetaClaw data (default: built-in tiny)",
    )
    p.add_argument(
        "--max-tokens", type=int, default=96, help="e2e, harness, branches: the harness's max_tokens per model call"
    )
    p.add_argument(
        "--harness",
        default=None,
        help="harness, branches: which harness (see `sclate agents list`; default hermes, branches: reference)",
    )
    p.add_argument("--benchmark", default="metaclaw", help="branches: the benchmark to run (default metaclaw)")
    p.add_argument("--scenario", default="tiny", help="branches: its built-in scenario (default tiny)")
    p.add_argument(
        "--compare",
        action="store_true",
        help="branches: run twice, the embedded model's token continuation off then on, and print both",
    )
    p.add_argument(
        "--pair", action="append", help="memory: HARNESS+SYSTEM, e.g. reference+mem0 (repeatable; default all)"
    )
    p.add_argument(
        "--gaia2-n", type=int, action="append", help="gaia2: events per scenario (repeatable; default 1000 and 10000)"
    )
    p.add_argument(
        "--subset", action="append", help="harness, branches: keep this MetaClaw day (repeatable; default all)"
    )
    p.add_argument(
        "--model-n-ctx",
        type=int,
        default=16384,
        help="harness, branches: the embedded model's context (default 16384: a harness resends its whole session)",
    )
    p.add_argument("--count", type=int, default=8, help="rollouts: the group's size K (default 8)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="fuzz, faults, soak, cluster: the campaign's seed (default random; printed)",
    )
    p.add_argument("--requests", type=int, default=10_000, help="fuzz: API requests to send (default 10000)")
    p.add_argument(
        "--part",
        action="append",
        choices=FUZZ_PARTS,
        help="fuzz: run only this part (repeatable)",
    )
    p.add_argument(
        "--daemon-kills", type=int, default=None, help="faults: SIGKILLs of the daemon (default 20; 5 with --quick)"
    )
    p.add_argument("--verbose", action="store_true", help="faults: progress on stderr also with --json")
    p.add_argument(
        "--only",
        action="append",
        choices=FAULTS_PARTS,
        help="faults: run only this part, or this one fault of the sandbox part (repeatable)",
    )
    p.add_argument("--keep", type=Path, default=None, help="faults: copy each daemon's state directory here")
    p.add_argument("--minutes", type=float, default=3.0, help="soak: how long the load is held (default 3)")
    p.add_argument("--lanes", type=int, default=4, help="soak: runs in flight at once (default 4)")
    p.add_argument(
        "--sandboxed-lanes",
        type=int,
        default=1,
        help="soak: of the lanes, how many run the reference harness in Docker (default 1; 0: scripted only)",
    )
    p.add_argument("--watchers", type=int, default=3, help="soak: watchers connecting and disconnecting (default 3)")
    p.add_argument(
        "--retention", default="10s", help="soak: the daemon's retention of finished runs' history (default 10s)"
    )
    p.add_argument("--warmup-s", type=float, default=30.0, help="soak: the same load before the start point (30)")
    p.add_argument("--no-reports", action="store_true", help="soak: the daemon writes no run reports")
    p.add_argument("--nodes", type=int, default=2, help="cluster: Ray nodes besides the head (default 2)")
    args = p.parse_args(argv)
    bench = BENCHES.get(which)
    if bench is None:
        print(f"sclated bench: no benchmark named {which!r}; have: {', '.join(BENCHES)}")
        return 2
    import uvloop

    got: list[int] = []

    async def main() -> dict[str, Any]:
        # SIGINT and SIGTERM cancel the benchmark, so its finally blocks clean up;
        # a second signal while it cleans up is noted, not obeyed.
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()

        def on_signal(sig: int) -> None:
            if not got:
                print(f"sclated bench {which}: {signal.Signals(sig).name}, cleaning up", file=sys.stderr, flush=True)
                task.cancel()
            got.append(sig)

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            return await bench(args)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            result: dict[str, Any] = runner.run(main())
    except asyncio.CancelledError:
        if not got:
            raise
        return 128 + got[0]
    finally:
        kill_groups()
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>28}: {v}")
    return 0
