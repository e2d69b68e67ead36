"""`sclate`: the command-line client of sclated.

It speaks gRPC only (grpcio, protobuf, the stubs in ``sclate_api``, rich for
tables) and imports nothing of the daemon's packages (``sclated``,
``adapters``, ``proxy_addons``): ``pip install ./clients/python`` is the
client alone. The local tools (doctor, images, model, bench, demo) are
``sclated`` subcommands; their old ``sclate`` spellings point there.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]

DEFAULT_ENDPOINT = "127.0.0.1:7431"
SYSTEM_SOCKET = Path("/run/sclated/sclated.sock")


class CliError(Exception):
    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


# -- connection ------------------------------------------------------------------
def default_endpoint() -> str:
    env = os.environ.get("SCLATE_ENDPOINT")
    if env:
        return env
    if SYSTEM_SOCKET.exists():
        return f"unix:{SYSTEM_SOCKET}"
    return DEFAULT_ENDPOINT


class Client:
    """A thin synchronous wrapper: the stub, the token, readable errors."""

    def __init__(self, endpoint: str, token: str | None, tls_ca: Path | None = None) -> None:
        import grpc
        from sclate_api.v1 import sclate_pb2_grpc

        self._grpc = grpc
        if tls_ca is not None:
            creds = grpc.ssl_channel_credentials(tls_ca.read_bytes())
            self.channel = grpc.secure_channel(endpoint, creds)
        else:
            self.channel = grpc.insecure_channel(endpoint)
        self.stub = sclate_pb2_grpc.SclateStub(self.channel)
        self.endpoint = endpoint
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()

    def call(self, method: str, request: Any, *, timeout: float | None = 30.0) -> Any:
        fn = getattr(self.stub, method)
        try:
            return fn(request, metadata=self._metadata, timeout=timeout)
        except self._grpc.RpcError as exc:
            raise self._error(exc) from None

    def stream(self, method: str, request: Any) -> Iterator[Any]:
        fn = getattr(self.stub, method)
        try:
            yield from fn(request, metadata=self._metadata)
        except self._grpc.RpcError as exc:
            raise self._error(exc) from None

    def _error(self, exc: Any) -> CliError:
        code = exc.code()
        trailers = {m.key: m.value for m in (exc.trailing_metadata() or ())}
        extra = ", ".join(f"{k.removeprefix('sclate-')}={v}" for k, v in trailers.items() if k.startswith("sclate-"))
        if code == self._grpc.StatusCode.UNAVAILABLE and not trailers:
            return CliError(
                f"cannot reach sclated at {self.endpoint}: {exc.details()}. Is the daemon running? "
                "(start it with `sclated --state-dir DIR`, or pass --endpoint)"
            )
        return CliError(f"{code.name}: {exc.details()}" + (f" ({extra})" if extra else ""))


def _to_dict(msg: Any) -> dict[str, Any]:
    """Every field of ``msg``, numbers as numbers (see :mod:`sclate._json`)."""
    from sclate._json import message_to_json

    out: dict[str, Any] = message_to_json(msg)
    return out


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


def _kv(items: Sequence[str] | None, what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"{what} {item!r} must be KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _parse_time(text: str) -> dt.datetime:
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"--start {text!r} is not an ISO 8601 time") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


# -- runs ---------------------------------------------------------------------------
def _run_name(name: str) -> str:
    return name if name.startswith("runs/") else f"runs/{name}"


def _state_name(value: int) -> str:
    from sclate_api.v1 import sclate_pb2 as pb

    return str(pb.State.Name(value))


def cmd_runs_create(args: argparse.Namespace, client: Client) -> int:
    from sclate_api.v1 import sclate_pb2 as pb

    run = pb.Run(
        benchmark=pb.BenchmarkSpec(
            name=args.benchmark,
            scenario=args.scenario or "",
            data_dir=args.data_dir or "",
            subset=args.subset or [],
        ),
        agent=pb.AgentSpec(
            harness=args.harness,
            memory=args.memory or "",
            model=pb.ModelEndpoint(
                base_url=args.model_url or "",
                api=args.model_api or "",
                model=args.model or "",
                api_key_env=args.model_key_env or "",
                skip_token_ids=bool(args.model_no_token_ids),
            ),
        ),
        clock=pb.ClockSpec(mode=pb.ClockMode.Value(args.clock.upper()), rate=args.rate or 0.0),
        labels={k: str(v) for k, v in _kv(args.label, "--label").items()},
    )
    if args.data_dir:
        run.benchmark.data_dir = str(Path(args.data_dir).resolve())
    bopts = _kv(args.benchmark_option, "--benchmark-option")
    if bopts:
        run.benchmark.options.update(bopts)
    aopts = _kv(args.agent_option, "--agent-option")
    if aopts:
        run.agent.options.update(aopts)
    if args.start:
        run.clock.start_time.FromDatetime(_parse_time(args.start))
    created = client.call(
        "CreateRun",
        pb.CreateRunRequest(run=run, run_id=args.run_id or "", request_id=args.request_id or str(uuid.uuid4())),
    )
    if not args.wait:
        _show_run(created, args.output)
        return 0
    final = _wait(client, created.name, args.output)
    _show_run(final, args.output)
    return 0 if final.state == pb.SUCCEEDED else 1


def _wait(client: Client, name: str, output: str) -> Any:
    from sclate_api.v1 import sclate_pb2 as pb

    if output == "json":
        for _ in client.stream("WatchRun", pb.WatchRunRequest(name=name)):
            pass
        return client.call("GetRun", pb.GetRunRequest(name=name))
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

    console = Console(stderr=True)
    fires = verdicts = 0
    state = "PENDING"
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        console=console,
        transient=True,
    ) as prog:
        task = prog.add_task(f"{name}: {state}", total=None)
        for ev in client.stream("WatchRun", pb.WatchRunRequest(name=name)):
            kind = ev.WhichOneof("kind")
            sim = ev.sim_time.ToDatetime(tzinfo=dt.UTC).strftime("%Y-%m-%d %H:%M")
            if kind == "fire":
                fires += 1
            elif kind == "verdict":
                verdicts += 1
                score = f"{ev.verdict.score:.2f}" if ev.verdict.graded else "ungradable"
                console.print(f"  verdict {ev.verdict.round_id}: {score}")
            elif kind == "state":
                state = _state_name(ev.state.state)
                console.print(f"  {state}: {ev.state.reason}")
            prog.update(task, description=f"{name}: {state}  sim {sim}  fires {fires}  verdicts {verdicts}")
    return client.call("GetRun", pb.GetRunRequest(name=name))


def _score_text(results: Any) -> str:
    """A run's score for a table; "ungraded" while no round has been graded."""
    return f"{results.score:.3f}" if results.HasField("score") else "ungraded"


def _show_run(run: Any, output: str) -> None:
    if output == "json":
        _print_json(_to_dict(run))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(show_header=False, box=None)
    t.add_row("name", run.name)
    t.add_row("state", f"{_state_name(run.state)}  {run.state_reason}")
    t.add_row(
        "benchmark",
        f"{run.benchmark.name} {run.benchmark.scenario or run.benchmark.data_dir}".strip(),
    )
    t.add_row("agent", run.agent.harness)
    if run.node:
        t.add_row("node", run.node)
    if run.HasField("sim_time"):
        t.add_row("sim time", run.sim_time.ToDatetime(tzinfo=dt.UTC).isoformat())
    if run.HasField("history_expire_time"):
        when = run.history_expire_time.ToDatetime(tzinfo=dt.UTC).isoformat()
        t.add_row(
            "history",
            f"expired {when} by the daemon's retention: events, journal and captured calls are gone"
            if run.history_expired
            else f"kept until {when} (the daemon's retention), then events, journal and captured calls expire",
        )
    if run.HasField("results"):
        r = run.results
        t.add_row("score", f"{_score_text(r)} ({r.rounds_graded}/{r.rounds} rounds graded)")
        s = r.scheduler
        if s.events_scheduled:
            t.add_row(
                "scheduler",
                f"{s.events_fired}/{s.events_scheduled} fired, {s.jumps} jumps, "
                f"compression {s.compression_ratio:,.0f}x (agent's own limit {s.compression_limit_agent:,.0f}x)",
            )
            t.add_row(
                "deliveries",
                f"{s.deliveries} ({s.deliveries_checked} checked on the harness's clock): {s.out_of_order} out of "
                f"order, {s.early_deliveries} early, {s.negative_delays} negative delays; delay p50 "
                f"{s.delivery_delay_ms_p50:.1f} ms, max {s.delivery_delay_ms_max:.1f} ms",
            )
            top = sorted(s.overhead_s.items(), key=lambda kv: -kv[1])[:3]
            t.add_row(
                "wall time",
                f"{s.run_wall_s:.1f} s: agent {s.agent_s:.1f} s, overhead {100 * s.overhead_fraction:.1f}% "
                f"({', '.join(f'{k} {v:.1f} s' for k, v in top)})",
            )
        for c in r.calls:
            failed = f", {c.failed} failed ({', '.join(f'{k} {v}' for k, v in c.failed_by_cause.items())})"
            t.add_row(
                f"calls ({c.role})",
                f"{c.calls} calls, {c.prompt_tokens} prompt + {c.completion_tokens} completion tokens"
                + (failed if c.failed else ""),
            )
        roles = {c.role for c in r.calls}
        for c in r.components:
            if c.role not in roles:  # finer than a role: memory:mem0, memory:embeddings
                t.add_row(
                    f"  {c.role}", f"{c.calls} calls, {c.prompt_tokens} prompt + {c.completion_tokens} completion"
                )
        if r.HasField("memory_token_share"):
            t.add_row("memory share", f"{100 * r.memory_token_share:.1f}% of tokens")
        if r.HasField("capture"):
            cap = r.capture
            t.add_row(
                "capture",
                f"{cap.calls_lost} lost, {cap.calls_unleased} unleased, "
                f"{cap.calls_recovered_at_close} recovered at close (drain: {cap.drain or '-'})",
            )
        for j in r.judges:
            t.add_row("judge", f"{j.endpoint} {j.model}" + (" (embedded: not comparable)" if j.embedded else ""))
        for w in r.warnings:
            t.add_row("[bold yellow]warning[/]", w)
        if r.report_path:
            t.add_row("report", r.report_path)
        if r.plot_path:
            t.add_row("plot", r.plot_path)
    console.print(t)


def cmd_runs_get(args: argparse.Namespace, client: Client) -> int:
    from sclate_api.v1 import sclate_pb2 as pb

    _show_run(client.call("GetRun", pb.GetRunRequest(name=_run_name(args.name))), args.output)
    return 0


def cmd_runs_list(args: argparse.Namespace, client: Client) -> int:
    from sclate_api.v1 import sclate_pb2 as pb

    runs: list[Any] = []
    token = ""
    while True:
        resp = client.call(
            "ListRuns",
            pb.ListRunsRequest(page_size=args.page_size, page_token=token, filter=args.filter or ""),
        )
        runs.extend(resp.runs)
        token = resp.next_page_token
        if not token or not args.all:
            break
    if args.output == "json":
        _print_json({"runs": [_to_dict(r) for r in runs], "next_page_token": token})
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table("name", "state", "benchmark", "agent", "score", "created")
    for r in runs:
        t.add_row(
            r.name,
            _state_name(r.state),
            r.benchmark.name,
            r.agent.harness,
            _score_text(r.results) if r.HasField("results") else "",
            r.create_time.ToDatetime(tzinfo=dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        )
    Console().print(t)
    if token:
        print(f"more: --page-token {token} (or --all)")
    return 0


def _event_line(ev: Any) -> str:
    kind = ev.WhichOneof("kind")
    sim = ev.sim_time.ToDatetime(tzinfo=dt.UTC).isoformat(timespec="seconds")
    body = getattr(ev, kind)
    if kind == "fire":
        detail = f"{body.event_id} ({', '.join(body.effects)})"
    elif kind == "jump":
        start = body.from_time.ToDatetime(tzinfo=dt.UTC).isoformat(timespec="seconds")
        end = body.to_time.ToDatetime(tzinfo=dt.UTC).isoformat(timespec="seconds")
        detail = f"{start} -> {end}"
    elif kind == "lease":
        detail = f"{body.change} {body.lease} by {body.holder} (held {body.held_count})"
    elif kind == "turn":
        detail = f"{body.round_id} {body.phase} delay {body.delivery_delay_ms:.1f} ms: {body.reply[:60]!r}"
    elif kind == "verdict":
        detail = f"{body.round_id} score {body.score:.2f}" if body.graded else f"{body.round_id} ungradable"
    else:
        detail = f"{_state_name(body.state)} {body.reason}"
    return f"{ev.seq:>6} {sim} {kind:<7} {detail}"


def cmd_runs_watch(args: argparse.Namespace, client: Client) -> int:
    from sclate_api.v1 import sclate_pb2 as pb

    if (args.name is None) == (args.group is None):
        raise CliError("give a run NAME or --group GROUP")
    if args.group is not None:
        stream = client.stream("WatchGroup", pb.WatchGroupRequest(group=args.group))
    else:
        stream = client.stream("WatchRun", pb.WatchRunRequest(name=_run_name(args.name), after_seq=args.after_seq))
    for ev in stream:
        if args.output == "json":
            print(json.dumps(_to_dict(ev)), flush=True)
        elif args.group is not None:
            print(f"{ev.run:<24} {_event_line(ev)}", flush=True)
        else:
            print(_event_line(ev), flush=True)
    return 0


def write_atomic(out: Path, chunks: Iterator[bytes]) -> None:
    """Write ``chunks`` to ``out`` via a temp file and a rename: a failed or
    interrupted download leaves neither a partial file nor the temp file."""
    import tempfile

    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            for data in chunks:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cmd_runs_export(args: argparse.Namespace, client: Client) -> int:
    from sclate_api.v1 import sclate_pb2 as pb

    if (args.name is None) == (args.group is None):
        raise CliError("give a run NAME or --group GROUP")
    req = pb.ExportTrajectoriesRequest(
        run=_run_name(args.name) if args.name is not None else "",
        group=args.group or "",
        format=args.format,
        trainable_roles=args.role or [],
        roles=args.role or [],
        reward_mode=args.reward_mode,
        unrewarded=args.unrewarded,
    )
    rows = 0
    left_out: list[Any] = []

    def chunks() -> Iterator[bytes]:
        nonlocal rows
        for chunk in client.stream("ExportTrajectories", req):
            rows = chunk.rows or rows
            left_out.extend(chunk.left_out)
            yield chunk.data

    write_atomic(args.out, chunks())
    print(f"wrote {rows} {args.format} rows to {args.out}")
    if left_out:
        reasons: dict[str, int] = {}
        for lo in left_out:
            reasons[lo.reason] = reasons.get(lo.reason, 0) + 1
        detail = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
        print(f"left out {len(left_out)} trajectories without a reward ({detail})", file=sys.stderr)
    return 0


def cmd_runs_trajectories(args: argparse.Namespace, client: Client) -> int:
    from sclate_api.v1 import sclate_pb2 as pb

    req = pb.StreamTrajectoriesRequest(
        run=_run_name(args.name), trainable_roles=args.role or [], roles=args.role or [], reward_mode=args.reward_mode
    )
    for t in client.stream("StreamTrajectories", req):
        if args.output == "json":
            print(json.dumps(_to_dict(t)), flush=True)
            continue
        reward = f"{t.reward:.3f}" if t.HasField("reward") else "-"
        print(
            f"{t.trajectory_id}  {t.role}  {t.branch_reason}  calls {len(t.call_ids)}  "
            f"prompt {len(t.prompt_token_ids)}  response {len(t.response_ids)}  "
            f"trained {sum(t.loss_mask)}  logprobs {'yes' if t.rollout_logprobs else 'no'}  "
            f"reward {reward}",
            flush=True,
        )
    return 0


# -- snapshots ---------------------------------------------------------------------
def _snapshot_name(text: str) -> str:
    name = text if text.startswith("runs/") else f"runs/{text}"
    if name.count("/") != 3 or name.split("/")[2] != "snapshots":
        raise CliError(f"{text!r} is not a snapshot name: RUN/snapshots/ID (or runs/RUN/snapshots/ID)")
    return name


def _show_snapshots(snaps: Sequence[Any], output: str) -> None:
    if output == "json":
        _print_json({"snapshots": [_to_dict(s) for s in snaps]})
        return
    from rich.console import Console
    from rich.table import Column, Table

    t = Table(Column("name", no_wrap=True), "sim time", "created", "journal", "session", "image")
    for s in snaps:
        t.add_row(
            s.name,
            s.sim_time.ToDatetime(tzinfo=dt.UTC).isoformat(timespec="seconds"),
            s.create_time.ToDatetime(tzinfo=dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
            str(s.journal_length),
            "saved" if s.session_saved else "fresh",
            s.image or "-",
        )
    Console().print(t)


def cmd_runs_snapshot(args: argparse.Namespace, client: Client) -> int:
    from sclate_api.v1 import sclate_pb2 as pb

    snap = client.call(
        "SaveSnapshot",
        pb.SaveSnapshotRequest(
            run=_run_name(args.name), snapshot_id=args.id or "", at_turn_boundary=args.at_turn_boundary
        ),
        timeout=args.timeout,
    )
    _show_snapshots([snap], args.output)
    return 0


def cmd_runs_snapshots(args: argparse.Namespace, client: Client) -> int:
    from sclate_api.v1 import sclate_pb2 as pb

    resp = client.call("ListSnapshots", pb.ListSnapshotsRequest(run=_run_name(args.name)))
    _show_snapshots(list(resp.snapshots), args.output)
    return 0


def cmd_runs_restore(args: argparse.Namespace, client: Client) -> int:
    from sclate_api.v1 import sclate_pb2 as pb

    labels: dict[str, str] = {}
    for item in args.label or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--label {item!r} must be KEY=VALUE")
        labels[key] = value
    if labels and not args.branch:
        raise CliError("--label names labels of the new run: use it with --branch")
    request = pb.RestoreSnapshotRequest(
        snapshot=_snapshot_name(args.snapshot), new_run_id=args.branch or "", labels=labels
    )
    _show_run(client.call("RestoreSnapshot", request, timeout=120), args.output)
    return 0


def cmd_runs_branch(args: argparse.Namespace, client: Client) -> int:
    from sclate_api.v1 import sclate_pb2 as pb

    labels: dict[str, str] = {}
    for item in args.label or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--label {item!r} must be KEY=VALUE")
        labels[key] = value
    request = pb.BranchRunRequest(
        snapshot=_snapshot_name(args.snapshot),
        count=args.count,
        group_id=args.group or "",
        labels=labels,
        sampling_seeds=args.seed or [],
        request_id=args.request_id or "",
    )
    reply = client.call("BranchRun", request, timeout=300)
    if args.output == "json":
        _print_json(_to_dict(reply))
        return 0
    print(f"group {reply.group}: {len(reply.runs)} runs")
    for run in reply.runs:
        print(f"  {run.group_index:>3}  {run.name}  seed {run.agent.model.sampling_seed}  {_state_name(run.state)}")
    return 0


def _add_snapshot_commands(runs: Any) -> None:
    sn = runs.add_parser("snapshot", help="save a snapshot of a RUNNING run")
    sn.add_argument("name")
    sn.add_argument("--id", help="snapshot id (default: a fresh one)")
    sn.add_argument(
        "--at-turn-boundary",
        action="store_true",
        help="wait for the agent's turn in flight to end, so the session is saved with the snapshot "
        "(branches continue the conversation instead of starting a fresh session)",
    )
    sn.add_argument("--timeout", type=float, default=600, help="seconds to wait for the snapshot (default 600)")
    _add_output(sn)
    sn.set_defaults(func=cmd_runs_snapshot)
    sl = runs.add_parser("snapshots", help="list a run's snapshots")
    sl.add_argument("name")
    _add_output(sl)
    sl.set_defaults(func=cmd_runs_snapshots)
    rs = runs.add_parser(
        "restore",
        help="restore a snapshot into its run (once it ended), or into a new run (--branch)",
    )
    rs.add_argument("snapshot", help="RUN/snapshots/ID")
    rs.add_argument("--branch", metavar="NEW_RUN_ID", help="a new run from the snapshot")
    rs.add_argument("--label", action="append", metavar="KEY=VALUE", help="a label of the new run")
    _add_output(rs)
    rs.set_defaults(func=cmd_runs_restore)
    br = runs.add_parser("branch", help="K new runs from one snapshot, as one group (GRPO rollouts)")
    br.add_argument("snapshot", help="RUN/snapshots/ID")
    br.add_argument("--count", type=int, required=True, help="how many runs (1..64)")
    br.add_argument("--group", help="the group's id (runs GROUP-0 .. GROUP-K-1; default: a fresh one)")
    br.add_argument("--label", action="append", metavar="KEY=VALUE", help="a label of every run")
    br.add_argument("--seed", action="append", type=int, help="one sampling seed per run (repeat K times)")
    br.add_argument("--request-id", help="idempotency key: repeating it returns the same group")
    _add_output(br)
    br.set_defaults(func=cmd_runs_branch)


def _simple(method: str, request_cls: str) -> Callable[[argparse.Namespace, Client], int]:
    def run(args: argparse.Namespace, client: Client) -> int:
        from sclate_api.v1 import sclate_pb2 as pb

        resp = client.call(method, getattr(pb, request_cls)(name=_run_name(args.name)))
        if method == "DeleteRun":
            print(f"deleted {_run_name(args.name)}")
        else:
            _show_run(resp, args.output)
        return 0

    return run


def cmd_benchmarks_list(args: argparse.Namespace, client: Client) -> int:
    from sclate_api.v1 import sclate_pb2 as pb

    resp = client.call("ListBenchmarks", pb.ListBenchmarksRequest())
    if args.output == "json":
        _print_json(_to_dict(resp))
        return 0
    for b in resp.benchmarks:
        print(f"{b.name:<14} {b.description}  [data: {b.data_format}; scenarios: {', '.join(b.scenarios) or '-'}]")
    return 0


def cmd_agents_list(args: argparse.Namespace, client: Client) -> int:
    from sclate_api.v1 import sclate_pb2 as pb

    resp = client.call("ListAgents", pb.ListAgentsRequest())
    if args.output == "json":
        _print_json(_to_dict(resp))
        return 0
    for a in resp.agents:
        where = f"sandbox {a.image}" if a.sandboxed else "in-daemon"
        print(f"{a.name} {a.version}: {a.description}")
        print(f"    {where}; speaks: {', '.join(a.wire_apis) or '-'}; memory: {', '.join(a.memory_systems)}")
        print(f"    capabilities: {', '.join(a.capabilities) or '-'}")
        if a.process_clock:
            print(f"    its own process reads the {a.process_clock} clock")
    return 0


# -- tools that moved to sclated --------------------------------------------------------
# doctor, images, model, bench and demo run on the daemon's host with the
# daemon's code (Docker, the model server, the proxy): they are `sclated`
# subcommands. The client keeps the old spellings as pointers, and runs
# `sclated` when it is installed alongside, without importing any of it.
MOVED = {"doctor": "doctor", "images": "images build", "model": "model serve", "bench": "bench NAME", "demo": "demo"}
_WITH_SUBCOMMAND = ("images", "model", "bench")
_GLOBAL_WITH_VALUE = ("--endpoint", "--token", "--tls-ca")


def moved_command(argv: Sequence[str]) -> int | None:
    """The index of the command in ``argv`` if it is a tool that moved to `sclated`."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _GLOBAL_WITH_VALUE:
            i += 2
        elif arg in ("-h", "--help"):
            return None
        elif arg.startswith("-"):
            i += 1
        else:
            return i if arg in MOVED else None
    return None


def find_sclated() -> str | None:
    """The `sclated` next to this `sclate` (the same installation), else the one on PATH."""
    if sys.argv and sys.argv[0]:
        sibling = Path(sys.argv[0]).parent / "sclated"
        if sibling.is_file() and os.access(sibling, os.X_OK):
            return str(sibling)
    return shutil.which("sclated")


def run_moved(argv: Sequence[str]) -> int:
    """``sclate doctor ...`` and co: say where the command went, and run it there if possible."""
    cmd, *rest = argv
    words = [cmd, rest[0]] if cmd in _WITH_SUBCOMMAND and rest and not rest[0].startswith("-") else [cmd]
    spelled = " ".join(words)
    exe = find_sclated()
    where = f"running {exe} {spelled}" if exe else "sclated is not installed here: it comes with the daemon"
    print(f"sclate: `sclate {spelled}` moved: run `sclated {spelled}` ({where})", file=sys.stderr, flush=True)
    if exe is None:
        return 2
    os.execv(exe, [exe, *argv])


def _add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sclate",
        description="Client of the sclated daemon.",
        epilog="The local tools are the daemon's: sclated doctor | images build | model serve | bench NAME | demo.",
    )
    p.add_argument(
        "--endpoint",
        default=None,
        help=f"HOST:PORT or unix:PATH (env SCLATE_ENDPOINT; default {DEFAULT_ENDPOINT} or {SYSTEM_SOCKET})",
    )
    p.add_argument("--token", default=None, help="bearer token (env SCLATE_TOKEN)")
    p.add_argument("--tls-ca", type=Path, default=None, help="CA certificate to verify a TLS daemon")
    sub = p.add_subparsers(dest="command", required=True)

    runs = sub.add_parser("runs", help="create, inspect and control runs").add_subparsers(
        dest="runs_cmd", required=True
    )
    c = runs.add_parser("create", help="create a run")
    c.add_argument("--benchmark", required=True)
    c.add_argument("--scenario")
    c.add_argument("--data-dir")
    c.add_argument("--subset", action="append", help="an upstream id to keep (repeatable)")
    c.add_argument("--benchmark-option", action="append", metavar="KEY=VALUE")
    c.add_argument("--harness", required=True)
    c.add_argument("--memory")
    c.add_argument("--model-url", help="the agent's model endpoint (default: the daemon's embedded model)")
    c.add_argument("--model-api", choices=("openai", "anthropic"))
    c.add_argument("--model", help="the model name the harness asks the endpoint for")
    c.add_argument(
        "--model-key-env",
        metavar="NAME",
        help="the NAME of the daemon's environment variable holding the endpoint's API key",
    )
    c.add_argument(
        "--model-no-token-ids",
        action="store_true",
        help="the endpoint refuses token-id request fields (a hosted API): capture calls without token ids",
    )
    c.add_argument("--agent-option", action="append", metavar="KEY=VALUE")
    c.add_argument("--clock", choices=("hybrid", "realtime", "discrete"), default="hybrid")
    c.add_argument("--start", help="simulated start time (ISO 8601)")
    c.add_argument("--rate", type=float, help="REALTIME rate factor")
    c.add_argument("--label", action="append", metavar="KEY=VALUE")
    c.add_argument("--run-id")
    c.add_argument("--request-id", help="idempotency key (default: a fresh one)")
    c.add_argument("--wait", action="store_true", help="show live progress; exit 1 unless the run SUCCEEDED")
    _add_output(c)
    c.set_defaults(func=cmd_runs_create)
    for name, fn, help_ in (
        ("get", cmd_runs_get, "show a run"),
        ("cancel", _simple("CancelRun", "CancelRunRequest"), "cancel a run"),
        ("delete", _simple("DeleteRun", "DeleteRunRequest"), "delete a finished run"),
        ("resume", _simple("ResumeRun", "ResumeRunRequest"), "resume an INTERRUPTED run"),
    ):
        sp = runs.add_parser(name, help=help_)
        sp.add_argument("name")
        _add_output(sp)
        sp.set_defaults(func=fn)
    ls = runs.add_parser("list", help="list runs")
    ls.add_argument("--filter", help="e.g. 'state=RUNNING AND labels.team=a', 'group=g-1234'")
    ls.add_argument("--page-size", type=int, default=50)
    ls.add_argument("--all", action="store_true", help="follow every page")
    _add_output(ls)
    ls.set_defaults(func=cmd_runs_list)
    w = runs.add_parser("watch", help="stream a run's events (or a branch group's: --group)")
    w.add_argument("name", nargs="?")
    w.add_argument("--group", help="every run of a branch group, until all have ended")
    w.add_argument("--after-seq", type=int, default=0)
    _add_output(w)
    w.set_defaults(func=cmd_runs_watch)
    ex = runs.add_parser("export", help="export a run's (or a branch group's) trajectories for a trainer (JSON Lines)")
    ex.add_argument("name", nargs="?")
    ex.add_argument("--group", help="a branch group's continuations in the trainers' group layout (GRPO)")
    ex.add_argument("--format", required=True, choices=("skyrl", "verl", "atif"))
    ex.add_argument("--out", "-O", required=True, type=Path, help="file to write (atomically)")
    ex.add_argument(
        "--reward-mode",
        choices=("round", "run"),
        default="round",
        help="round: each trajectory rewarded by the rounds it earned (default); run: the run's mean score",
    )
    ex.add_argument(
        "--unrewarded",
        choices=("skip", "refuse"),
        default="skip",
        help="a trajectory no graded round rewards: left out and counted (default), or the export fails",
    )
    tr = runs.add_parser("trajectories", help="one summary line per trajectory of a run")
    tr.add_argument("name")
    tr.add_argument("--reward-mode", choices=("round", "run"), default="round")
    _add_output(tr)
    for sp, fn in ((ex, cmd_runs_export), (tr, cmd_runs_trajectories)):
        sp.add_argument(
            "--role",
            action="append",
            help="only this role's trajectories, trained (repeatable; --role memory: the memory calls on "
            "their own); default: every role's, the agent's trained",
        )
        sp.set_defaults(func=fn)
    _add_snapshot_commands(runs)

    b = sub.add_parser("benchmarks", help="benchmarks the daemon offers").add_subparsers(dest="b_cmd", required=True)
    bl = b.add_parser("list")
    _add_output(bl)
    bl.set_defaults(func=cmd_benchmarks_list)
    a = sub.add_parser("agents", help="agent harnesses the daemon offers").add_subparsers(dest="a_cmd", required=True)
    al = a.add_parser("list")
    _add_output(al)
    al.set_defaults(func=cmd_agents_list)

    for name, spelled in MOVED.items():
        moved = sub.add_parser(name, help=f"moved: `sclated {spelled}`", add_help=False)
        moved.add_argument("rest", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    at = moved_command(args_in)
    if at is not None:
        return run_moved(args_in[at:])
    parser = build_parser()
    args = parser.parse_args(args_in)
    if args.command in MOVED:  # reached past moved_command only through an abbreviated option
        return run_moved(args_in[len(args_in) - len(args.rest) - 1 :])
    try:
        client = Client(
            args.endpoint or default_endpoint(),
            args.token or os.environ.get("SCLATE_TOKEN"),
            args.tls_ca,
        )
        return int(args.func(args, client))
    except CliError as exc:
        print(f"sclate: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
