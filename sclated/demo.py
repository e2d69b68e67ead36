"""`sclated demo`: a multi-day scenario through the scheduler, in process, with a report.

It runs the built-in synthetic benchmark (timed tasks, a condition and DAG
events each simulated day, grading, session start/stop) against the scripted
in-daemon agent on a HYBRID clock, and prints what happened: fires, jumps,
delivery delays, compression against its limit, per-day scores.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
from typing import Any

from sclated.runs import RunSpec, RunWorker, default_registry

__all__ = ["run_demo_cli", "run_inprocess_demo"]


class _MemorySink:
    """Collects a run's events in memory (the daemon's sink makes them durable)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any], int]] = []

    def emit(self, kind: str, payload: dict[str, Any], sim_ns: int) -> None:
        self.events.append((kind, payload, sim_ns))

    def journal(self, entry: dict[str, Any]) -> None:
        pass

    def progress(self, sim_ns: int) -> None:
        pass


async def run_inprocess_demo(days: int = 5, events_per_day: int = 4, turn_ms: int = 40) -> dict[str, Any]:
    spec = RunSpec.from_dict(
        {
            "benchmark": {
                "name": "synthetic",
                "options": {"days": days, "events_per_day": events_per_day},
            },
            "agent": {"harness": "scripted", "options": {"turn_ms": turn_ms}},
        }
    )
    sink = _MemorySink()
    worker = RunWorker("demo", spec, default_registry(), sink)
    outcome = await worker.run()
    return {
        "state": outcome.state,
        "reason": outcome.reason,
        "results": outcome.results,
        "events": sink.events,
    }


def _fmt(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).strftime("%a %Y-%m-%d %H:%M")


def _print_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    res = report["results"]
    s = res["scheduler"]
    console.rule("[bold]sclated demo: synthetic multi-day scenario, scripted agent, hybrid clock")
    tl = Table("simulated time", "event", title="timeline (first 24 lines)")
    shown = 0
    for kind, payload, sim_ns in report["events"]:
        if kind == "fire" and shown < 24:
            tl.add_row(_fmt(sim_ns), f"{payload['event_id']}  ({', '.join(payload['effects'])})")
            shown += 1
    console.print(tl)
    days = Table("day", "score", "reason", title="grading")
    for r in res["round_scores"]:
        days.add_row(r["round_id"], f"{r['score']:.2f}" if r["graded"] else "ungradable", r["reason"])
    console.print(days)
    m = Table(show_header=False, title="scheduler measurements")
    m.add_row("state", f"{report['state']} ({report['reason']})")
    m.add_row(
        "events fired / scheduled",
        f"{s['events_fired']} / {s['events_scheduled']}  in order: {s['in_order']}",
    )
    m.add_row(
        "delivery delay",
        f"p50 {s['delivery_delay_ms_p50']:.2f} ms, max {s['delivery_delay_ms_max']:.2f} ms",
    )
    m.add_row("simulated span", f"{s['sim_span_s'] / 86400:.2f} days")
    m.add_row("wall time", f"{s['wall_s']:.2f} s")
    m.add_row("clock jumps", str(s["jumps"]))
    ratio, limit = s["compression_ratio"], s["compression_limit"]
    m.add_row(
        "compression",
        f"{ratio:,.0f}x of a possible {limit:,.0f}x ({ratio / limit:.1%} of the limit)",
    )
    score = "none graded" if res["score"] is None else f"{res['score']:.3f}"
    m.add_row("score", f"{score} over {res['rounds_graded']} graded days")
    console.print(m)


def run_demo_cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="sclated demo")
    p.add_argument("--days", type=int, default=5)
    p.add_argument("--events-per-day", type=int, default=4)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        report = runner.run(run_inprocess_demo(args.days, args.events_per_day))
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "events"}, indent=2))
    else:
        _print_report(report)
    return 0 if report["state"] == "SUCCEEDED" else 1
