"""The main job, end to end: a real daemon process, locally built images, the
embedded model, a MetaClaw scenario with the reference harness in a sandbox,
simulated days, captured tokens, scores and scheduler measurements.

Used by `sclated demo` (a report for people) and `sclated bench e2e` (one JSON
object). Both talk to the daemon only through its gRPC API, as any client.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from sclate._json import message_to_json
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

__all__ = ["DemoFailed", "demo_problems", "run_demo_cli", "run_e2e"]

Progress = Callable[[str], None]


class DemoFailed(Exception):
    """The demo cannot show a working substrate: what went wrong and what to do."""

    def __init__(self, what: str, todo: str) -> None:
        super().__init__(what)
        self.what = what
        self.todo = todo


async def _check_model(model_url: str | None, out_dir: Path, progress: Progress) -> None:
    """Before anything else: the model must really produce tokens (with token ids when embedded)."""
    from sclated.doctor import check_embedded_model, check_model

    progress(f"model: checking that {model_url or 'the embedded model'} produces tokens")
    if model_url:
        check = await check_model(model_url, require_token_ids=False)
    else:
        await asyncio.to_thread((out_dir / "model-check").mkdir, parents=True, exist_ok=True)
        check = await check_embedded_model(out_dir / "model-check")
    if not check.ok:
        raise DemoFailed(f"the model does not work: {check.detail}", check.fix)
    progress(f"model: ok ({check.detail})")


def demo_problems(run: dict[str, Any]) -> list[str]:
    """Why a finished demo run does not show a working substrate (empty: it does)."""
    problems: list[str] = []
    if run.get("state") != "SUCCEEDED":
        problems.append(f"the run ended {run.get('state')}: {run.get('state_reason', '')}")
    results = run.get("results") or {}
    capture = results.get("capture") or {}
    if not (capture.get("prompt_tokens") or capture.get("completion_tokens")):
        problems.append(
            f"the run captured no tokens ({capture.get('calls', 0)} calls, {capture.get('calls_failed', 0)} failed)"
        )
    rows = run.get("export_rows") or {}
    if not any(rows.values()):
        problems.append("no trajectory was exported (0 rows)")
    return problems


def _default_out() -> Path:
    return Path.cwd() / "out" / "demo"


async def _ensure_images(progress: Progress) -> None:
    from adapters.reference_harness.image import register_image
    from sclated.runtime import build_all

    register_image()
    progress("images: checking (content-hashed; built only when a recipe changed)")
    built = await build_all(lambda line: progress(f"  {line}"))
    for b in built:
        progress(f"images: {b.ref} {'built' if b.built else 'present'}")


async def _start_daemon(
    state_dir: Path, progress: Progress, data_dir: Path | None = None
) -> tuple[asyncio.subprocess.Process, str, str]:
    """The daemon, its gRPC address and its HTTP one (the run viewer, on loopback)."""
    from sclated.bench import data_root_args, start_daemon_process

    progress(f"daemon: starting sclated (state in {state_dir})")
    # The data directory is the daemon's data root: it reads no host path outside its roots.
    proc, ready = await start_daemon_process(
        state_dir, "--drain-grace-s", "5", "--http-listen", "127.0.0.1:0", *data_root_args(data_dir)
    )
    progress(f"daemon: serving on {ready['tcp']} and {ready['unix']}; the run viewer on http://{ready['http']}/")
    return proc, str(ready["tcp"]), str(ready["http"])


def viewer_url(http: str, run_name: str) -> str:
    """Where the run viewer shows ``run_name`` (``runs/ID``)."""
    return f"http://{http}/#/{run_name}"


VIEWER_PORT = 7480
"""The port `sclated demo` suggests for serving the viewer again (any free one does)."""


def serve_again_command(state_dir: Path) -> str:
    """The command that serves a finished demo's runs in the viewer again."""
    exe = Path(sys.executable).with_name("sclated")
    return f"{exe} --state-dir {state_dir} --listen 127.0.0.1:0 --http-listen 127.0.0.1:{VIEWER_PORT}"


async def serve_viewer(state_dir: Path, run_name: str, progress: Progress) -> None:
    """A daemon on ``state_dir`` serving the viewer until cancelled (Ctrl-C), then stopped."""
    from sclated.bench import start_daemon_process

    proc, ready = await start_daemon_process(state_dir, "--drain-grace-s", "1", "--http-listen", "127.0.0.1:0")
    progress(f"viewer: {viewer_url(str(ready['http']), run_name)}  (serving until Ctrl-C)")
    try:
        await proc.wait()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.shield(proc.wait())


def _fmt_sim(ts: Any) -> str:
    return str(ts.ToDatetime(tzinfo=dt.UTC).strftime("%a %Y-%m-%d %H:%M"))


async def run_e2e(
    *,
    out_dir: Path,
    data_dir: Path | None = None,
    scenario: str = "tiny",
    subset: tuple[str, ...] = (),
    harness_options: dict[str, Any] | None = None,
    progress: Progress = lambda _: None,
    model_url: str | None = None,
) -> dict[str, Any]:
    """Run one MetaClaw scenario through a fresh daemon; return the run as a dict plus artefact paths.

    ``data_dir`` must be absolute: the daemon resolves it on its side."""
    await asyncio.to_thread(out_dir.mkdir, parents=True, exist_ok=True)
    state_dir = out_dir / "state"
    await _check_model(model_url, out_dir, progress)
    await _ensure_images(progress)
    proc, addr, http = await _start_daemon(state_dir, progress, data_dir)
    t0 = time.monotonic()
    try:
        async with grpc.aio.insecure_channel(addr) as channel:
            stub = pb_grpc.SclateStub(channel)
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(
                    name="metaclaw",
                    scenario="" if data_dir else scenario,
                    data_dir=str(data_dir) if data_dir else "",
                    subset=list(subset),
                ),
                agent=pb.AgentSpec(harness="reference", model=pb.ModelEndpoint(base_url=model_url or "")),
                clock=pb.ClockSpec(mode=pb.HYBRID),
                labels={"origin": "demo"},
            )
            if harness_options:
                run.agent.options.update(harness_options)
            created = await stub.CreateRun(pb.CreateRunRequest(run=run, request_id=f"e2e-{time.time_ns()}"))
            progress(f"run: {created.name} created; the embedded model starts with the first sandbox")
            progress(f"viewer: {viewer_url(http, created.name)}  (live while the run runs)")
            async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name)):
                kind = ev.WhichOneof("kind")
                when = _fmt_sim(ev.sim_time)
                if kind == "fire" and any(
                    e in ("deliver_prompt", "agent_control", "exec_in_sandbox") for e in ev.fire.effects
                ):
                    progress(f"  [{when}] {ev.fire.event_id} ({', '.join(ev.fire.effects)})")
                elif kind == "jump":
                    progress(f"  [{when}] clock jumped from {_fmt_sim(ev.jump.from_time)}")
                elif kind == "turn":
                    reply = ev.turn.reply.replace("\n", " ")[:70]
                    delay = ev.turn.delivery_delay_ms
                    rid = ev.turn.round_id or "turn"
                    progress(f"  [{when}] {rid} answered (delivered in {delay:.1f} ms): {reply!r}")
                elif kind == "verdict":
                    score = f"{ev.verdict.score:.2f}" if ev.verdict.graded else "ungradable"
                    progress(f"  [{when}] verdict {ev.verdict.round_id}: {score} ({ev.verdict.reason})")
                elif kind == "state":
                    progress(f"run: {pb.State.Name(ev.state.state)} {ev.state.reason}")
            final = await stub.GetRun(pb.GetRunRequest(name=created.name))
            exports: dict[str, str] = {}
            export_rows: dict[str, int] = {}
            for fmt in ("skyrl", "atif"):
                path = out_dir / f"trajectories.{fmt}.jsonl"
                rows = 0
                data = bytearray()
                try:
                    async for chunk in stub.ExportTrajectories(
                        pb.ExportTrajectoriesRequest(run=created.name, format=fmt)
                    ):
                        data += chunk.data
                        rows = rows or chunk.rows
                except grpc.aio.AioRpcError as exc:
                    progress(f"export {fmt}: {exc.details()}")
                    continue
                tmp = path.with_suffix(".tmp")
                await asyncio.to_thread(tmp.write_bytes, bytes(data))
                await asyncio.to_thread(os.replace, tmp, path)
                exports[fmt] = str(path)
                export_rows[fmt] = rows
                progress(f"export: {rows} {fmt} rows -> {path}")
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
        # A daemon stopped mid-run keeps the run's sandbox for a resume that
        # will never come here: the demo's daemon is gone, so are its sandboxes.
        from sclated.bench import reap_daemon_sandboxes

        await reap_daemon_sandboxes(state_dir)
    # Every field, numbers as numbers (a score of 0 is not a missing score).
    out: dict[str, Any] = message_to_json(final)
    out["exports"] = exports
    out["export_rows"] = export_rows
    out["wall_s_total"] = time.monotonic() - t0
    out["state_dir"] = str(state_dir)
    return out


def _num(value: Any, fmt: str = ".2f") -> str:
    return format(value, fmt) if isinstance(value, int | float) else "-"


def _print_report(run: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    c = Console()
    r = run.get("results") or {}
    s = r.get("scheduler") or {}
    c.rule(f"[bold]sclated demo: {run['name']} {run['state']}")
    t = Table("round", "kind", "score", "reason", title="rounds")
    for x in r.get("round_scores", []):
        t.add_row(
            x["round_id"],
            x.get("kind", ""),
            _num(x.get("score")) if x.get("graded") else "ungradable",
            x.get("reason", ""),
        )
    c.print(t)
    m = Table(show_header=False, title="scheduler")
    m.add_row(
        "score",
        f"{_num(r.get('score'), '.3f')} over {r.get('rounds_graded', 0)}/{r.get('rounds', 0)} gradable rounds",
    )
    m.add_row(
        "events",
        f"{s.get('events_fired', 0)} fired of {s.get('events_scheduled', 0)} scheduled",
    )
    m.add_row(
        "deliveries",
        f"{s.get('deliveries', 0)} ({s.get('deliveries_checked', 0)} checked on the harness's clock): "
        f"{s.get('out_of_order', 0)} out of order, {s.get('early_deliveries', 0)} early, "
        f"{s.get('negative_delays', 0)} negative delays",
    )
    m.add_row(
        "delivery delay",
        f"p50 {_num(s.get('delivery_delay_ms_p50'))} ms, max {_num(s.get('delivery_delay_ms_max'))} ms",
    )
    m.add_row(
        "simulated span",
        f"{float(s.get('sim_span_s', 0)) / 86400:.2f} days in {float(s.get('run_wall_s', 0)):.0f} s of wall time",
    )
    m.add_row(
        "compression",
        f"{s.get('compression_ratio', 0):,.0f}x; agent's own limit {s.get('compression_limit_agent', 0):,.0f}x "
        f"({100 * float(s.get('compression_vs_agent_limit', 0)):.0f}% of it); {s.get('jumps', 0)} jumps",
    )
    overhead = s.get("overhead_s") or {}
    top = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(overhead.items(), key=lambda kv: -kv[1])[:4])
    m.add_row(
        "wall time",
        f"agent {float(s.get('agent_s', 0)):.1f} s; overhead {100 * float(s.get('overhead_fraction', 0)):.1f}% ({top})",
    )
    for call in r.get("calls", []):
        failed = f", {call['failed']} failed {call.get('failed_by_cause')}" if call.get("failed") else ""
        m.add_row(
            f"calls ({call['role']})",
            f"{call.get('calls', 0)} calls, {call.get('prompt_tokens', 0)} prompt + "
            f"{call.get('completion_tokens', 0)} completion tokens{failed}",
        )
    cap = r.get("capture") or {}
    if cap:
        m.add_row(
            "capture",
            f"{cap.get('calls_lost', 0)} lost, {cap.get('calls_unleased', 0)} unleased, "
            f"{cap.get('calls_recovered_at_close', 0)} recovered at close (drain: {cap.get('drain', '')})",
        )
    for fmt, rows in (run.get("export_rows") or {}).items():
        m.add_row(f"export ({fmt})", f"{rows} rows")
    c.print(m)
    for w in r.get("warnings", []):
        c.print(f"[bold yellow]warning:[/] {w}")
    # Paths in full (a table would cut them at the terminal's width).
    if r.get("report_path"):
        print(f"report:               {r['report_path']}")
    if r.get("plot_path"):
        print(f"timeline plot:        {r['plot_path']}")
    for fmt, path in run.get("exports", {}).items():
        print(f"trajectories ({fmt}): {path}")


def run_demo_cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="sclated demo", description="Run the main job end to end and print its report.")
    p.add_argument(
        "--data-dir", type=Path, help="upstream MetaClaw-Bench data (default: the project's own tiny scenario)"
    )
    p.add_argument("--subset", action="append", default=[], help="a day to keep, e.g. day01 (repeatable)")
    p.add_argument(
        "--out", type=Path, default=None, help="where state, report, plot and trajectories go (default ./out/demo)"
    )
    p.add_argument(
        "--model-url", help="an OpenAI-compatible endpoint for the agent (default: the embedded model)", default=None
    )
    p.add_argument("--json", action="store_true", help="print the final run as JSON")
    p.add_argument(
        "--serve",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="after the report, serve the run viewer until Ctrl-C (default: when stdin is a terminal)",
    )
    args = p.parse_args(argv)
    if args.data_dir is not None and not args.data_dir.is_dir():
        print(f"sclated demo: --data-dir {args.data_dir} is not a directory", file=sys.stderr)
        return 2
    out_dir = (args.out or _default_out()).resolve()
    log_hint = f"the daemon's log is {out_dir / 'state' / 'sclated.log'}"

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    import uvloop

    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            run = runner.run(
                run_e2e(
                    out_dir=out_dir,
                    data_dir=args.data_dir.resolve() if args.data_dir else None,
                    subset=tuple(args.subset),
                    harness_options={"max_tokens": 160, "max_steps": 4},
                    progress=progress,
                    model_url=args.model_url,
                )
            )
    except DemoFailed as exc:
        print(f"sclated demo failed: {exc.what}\nWhat to do: {exc.todo}", file=sys.stderr)
        return 1
    except Exception as exc:
        from sclated.errors import describe

        msg = describe(exc)
        print(
            f"sclated demo failed: {msg}\nWhat to do: run `sclated doctor` to check the engine, images, simulated "
            f"time and the model; {log_hint}.",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(run, indent=2))
    else:
        _print_report(run)
    state_dir = Path(run["state_dir"])
    serve = sys.stdin.isatty() if args.serve is None else args.serve
    if serve:
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(serve_viewer(state_dir, run["name"], progress))
        except KeyboardInterrupt:
            progress("viewer: stopped")
    else:
        progress(
            f"viewer: to see the run again, serve it with\n  {serve_again_command(state_dir)}\n"
            f"and open http://127.0.0.1:{VIEWER_PORT}/#/{run['name']}"
        )
    problems = demo_problems(run)
    if problems:
        print(
            "sclated demo failed: " + "; ".join(problems) + ".\nWhat to do: run `sclated doctor` (it checks that the "
            f"model produces tokens and that the capture proxy records them); {log_hint}; the model's log is "
            f"{out_dir / 'state' / 'model-server.log'}.",
            file=sys.stderr,
        )
        return 1
    return 0
