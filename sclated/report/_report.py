"""The end-of-run report: ``report.json``, ``report.md`` and ``timeline.png``.

The run worker fills a :class:`Timeline` while the run goes (plain list
appends, cheap enough to call at every fire) and the daemon calls
:func:`write_report` once the run is over, through ``asyncio.to_thread``: it
renders a plot and writes files, so it blocks.

The three files appear together or not at all: each is written to a temporary
name in the output directory first and only renamed into place once all three
exist, so a failing plot never leaves a report that points at a missing image.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import itertools
import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["REPORT_SCHEMA", "ReportPaths", "Timeline", "finite_json", "write_report"]

REPORT_SCHEMA = 1
JSON_NAME = "report.json"
MARKDOWN_NAME = "report.md"
PLOT_NAME = "timeline.png"

_NS_PER_DAY = 86_400 * 10**9


@dataclass(slots=True)
class Timeline:
    """What happened when, in wall time (``time.monotonic_ns``) and simulated time.

    ``samples``: ``(wall_ns, sim_ns)``, one per fire (and per turn start).
    ``jumps``: ``(wall_ns, from_sim_ns, to_sim_ns)``.
    ``fires``: ``(wall_ns, sim_ns, event_id, effect_kinds)``.
    ``turns``: ``(start_wall_ns, end_wall_ns, sim_start_ns, round_id)``.
    ``start_wall_ns`` is the plot's zero; when unset the earliest wall time
    noted is used.
    """

    start_wall_ns: int | None = None
    samples: list[tuple[int, int]] = field(default_factory=list)
    jumps: list[tuple[int, int, int]] = field(default_factory=list)
    fires: list[tuple[int, int, str, tuple[str, ...]]] = field(default_factory=list)
    turns: list[tuple[int, int, int, str]] = field(default_factory=list)

    def note_fire(self, wall_ns: int, sim_ns: int, event_id: str, effect_kinds: Sequence[str]) -> None:
        self.samples.append((wall_ns, sim_ns))
        self.fires.append((wall_ns, sim_ns, event_id, tuple(effect_kinds)))

    def note_jump(self, wall_ns: int, from_sim_ns: int, to_sim_ns: int) -> None:
        self.jumps.append((wall_ns, from_sim_ns, to_sim_ns))

    def note_turn(self, start_wall_ns: int, end_wall_ns: int, sim_start_ns: int, round_id: str) -> None:
        self.samples.append((start_wall_ns, sim_start_ns))
        self.turns.append((start_wall_ns, end_wall_ns, sim_start_ns, round_id))

    def origin_wall_ns(self) -> int:
        if self.start_wall_ns is not None:
            return self.start_wall_ns
        walls = [w for w, _ in self.samples] + [j[0] for j in self.jumps]
        walls += [t[0] for t in self.turns]
        return min(walls) if walls else 0

    def copy(self) -> Timeline:
        """A snapshot: the run may still be appending while a report renders."""
        return Timeline(
            self.start_wall_ns,
            list(self.samples),
            list(self.jumps),
            list(self.fires),
            list(self.turns),
        )


@dataclass(frozen=True, slots=True)
class ReportPaths:
    json_path: Path
    markdown_path: Path
    plot_path: Path


def write_report(out_dir: Path, *, run_name: str, results: dict[str, Any], timeline: Timeline) -> ReportPaths:
    """Write the run's report files into ``out_dir`` (created if missing).

    Blocking; call it through ``asyncio.to_thread`` from async code. Raises
    whatever the file system or matplotlib raises, with nothing left behind.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = ReportPaths(out_dir / JSON_NAME, out_dir / MARKDOWN_NAME, out_dir / PLOT_NAME)
    tl = timeline.copy()
    doc = _report_doc(run_name, results, tl, paths)
    temps: list[tuple[Path, Path]] = []
    try:
        temps.append((_write_temp(out_dir, JSON_NAME, _dump_json(doc).encode()), paths.json_path))
        md = render_markdown(run_name, results, tl, paths)
        temps.append((_write_temp(out_dir, MARKDOWN_NAME, md.encode()), paths.markdown_path))
        png = _temp_path(out_dir, PLOT_NAME)
        temps.append((png, paths.plot_path))
        _render_plot(png, run_name, results, tl)
        # A figure is a web of reference cycles holding megabytes (the Agg canvas):
        # refcounting never frees it, and the daemon collects young objects rarely
        # (run_daemon's gc.set_threshold), so the figures of ended runs piled up,
        # ~2 MB each (`sclated bench soak`: +134 MB in 70 runs). Collect the young
        # generations now, where the figure is: a few milliseconds.
        gc.collect(1)
        _fsync_file(png)
        # JSON last: it is the index that names the other two, so a reader
        # that finds it can rely on them being there.
        for tmp, final in reversed(temps):
            os.replace(tmp, final)
    except BaseException:
        for tmp, _ in temps:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise
    with contextlib.suppress(OSError):
        _fsync_dir(out_dir)
    return paths


# -- JSON --------------------------------------------------------------------------


def finite_json(value: Any) -> Any:
    """Strict JSON has no NaN/Infinity (``compression_limit`` can be inf): use null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    return value


def _dump_json(doc: dict[str, Any]) -> str:
    return json.dumps(finite_json(doc), indent=2, allow_nan=False, default=str) + "\n"


def _report_doc(run_name: str, results: dict[str, Any], tl: Timeline, paths: ReportPaths) -> dict[str, Any]:
    return {
        "schema": REPORT_SCHEMA,
        "run": run_name,
        "generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        # Nested rather than merged so a results key can never shadow ours.
        "results": results,
        "timeline": {
            "fires": len(tl.fires),
            "jumps": len(tl.jumps),
            "turns": len(tl.turns),
        },
        "paths": {
            "json": str(paths.json_path),
            "markdown": str(paths.markdown_path),
            "plot": str(paths.plot_path),
        },
    }


# -- files -------------------------------------------------------------------------


def _temp_path(out_dir: Path, name: str) -> Path:
    fd, raw = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
    os.close(fd)
    return Path(raw)


def _write_temp(out_dir: Path, name: str, data: bytes) -> Path:
    fd, raw = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(raw)
        raise
    # mkstemp makes 0600; a report is meant to be read by others on the host.
    os.chmod(raw, 0o644)
    return Path(raw)


def _fsync_file(path: Path) -> None:
    os.chmod(path, 0o644)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- Markdown ----------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
        if value == int(value) and abs(value) < 1e15:
            return f"{value:.1f}"
        return f"{value:.4g}" if abs(value) >= 1e-3 else f"{value:.3g}"
    if isinstance(value, list | tuple):
        if not value:
            return "none"
        shown = ", ".join(str(v) for v in value[:10])
        return shown + (f", ... ({len(value)} in all)" if len(value) > 10 else "")
    return str(value)


def _cell(value: Any) -> str:
    # A pipe or newline inside a cell would break the table.
    return _fmt(value).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _sim_date(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def render_markdown(run_name: str, results: dict[str, Any], tl: Timeline, paths: ReportPaths) -> str:
    lines = [f"# Run report: {run_name}", ""]
    warnings = results.get("warnings")
    if isinstance(warnings, list) and warnings:
        lines += ["**Warnings** (read these before the score):", ""]
        lines += [f"- {w}" for w in warnings]
        lines.append("")
    lines += _table(
        ["score", "rounds", "rounds graded"],
        [[results.get("score"), results.get("rounds"), results.get("rounds_graded")]],
    )
    sched = results.get("scheduler")
    if isinstance(sched, dict):
        overhead = sched.get("overhead_s")
        lines += ["", "## Scheduler", ""]
        lines += _table(["measure", "value"], [[k, v] for k, v in sched.items() if k != "overhead_s"])
        if isinstance(overhead, dict) and overhead:
            lines += ["", "## Where the wall time went", ""]
            run_wall = float(sched.get("run_wall_s") or 0.0) or 1.0
            rows = [
                ["agent (turns and model calls)", sched.get("agent_s"), 100 * float(sched.get("agent_s", 0)) / run_wall]
            ]
            rows += [
                [f"overhead: {k}", v, 100 * float(v) / run_wall]
                for k, v in sorted(overhead.items(), key=lambda kv: -kv[1])
            ]
            if sched.get("waiting_s"):
                rows.append(
                    ["waiting (scenario time in real time)", sched["waiting_s"], 100 * sched["waiting_s"] / run_wall]
                )
            lines += _table(["work", "seconds", "% of the run's wall time"], rows)
    calls = results.get("calls")
    if isinstance(calls, list) and calls:
        lines += ["", "## Captured model calls", ""]
        rows = [
            [
                c.get("role"),
                c.get("calls"),
                c.get("prompt_tokens"),
                c.get("completion_tokens"),
                c.get("failed", 0),
                ", ".join(f"{k} {v}" for k, v in (c.get("failed_by_cause") or {}).items()),
            ]
            for c in calls
            if isinstance(c, dict)
        ]
        total = [
            "**all**",
            *(sum(int(r[i] or 0) for r in rows) for i in (1, 2, 3, 4)),
            "",
        ]
        lines += _table(
            ["role", "calls", "prompt tokens", "completion tokens", "failed attempts", "by cause"], [*rows, total]
        )
    components = results.get("components")
    if isinstance(components, list) and any(isinstance(c, dict) and ":" in str(c.get("role")) for c in components):
        share = results.get("memory_token_share")
        lines += ["", "### By component", ""]
        if isinstance(share, int | float):
            lines += [f"The memory role's share of all tokens: {100 * share:.1f}%.", ""]
        lines += _table(
            ["component", "calls", "prompt tokens", "completion tokens", "failed attempts"],
            [
                [c.get("role"), c.get("calls"), c.get("prompt_tokens"), c.get("completion_tokens"), c.get("failed", 0)]
                for c in components
                if isinstance(c, dict)
            ],
        )
    capture = results.get("capture")
    if isinstance(capture, dict) and capture:
        lines += ["", "## Capture health", ""]
        lines += _table(
            ["measure", "value"],
            [
                [k, capture.get(k)]
                for k in ("calls_failed", "calls_unleased", "calls_lost", "calls_recovered_at_close", "drain")
            ],
        )
    judges = results.get("judges")
    if isinstance(judges, list) and judges:
        lines += ["", "## Judges", ""]
        lines += _table(
            ["endpoint", "model", "embedded", "note"],
            [
                [j.get("endpoint"), j.get("model"), j.get("embedded"), j.get("note", "")]
                for j in judges
                if isinstance(j, dict)
            ],
        )
    rounds = results.get("round_scores")
    if isinstance(rounds, list) and rounds:
        lines += ["", "## Rounds", ""]
        lines += _table(
            ["round", "day", "kind", "graded", "score", "reason"],
            [
                [r.get("round_id"), r.get("day"), r.get("kind"), r.get("graded"), r.get("score"), r.get("reason")]
                for r in rounds
                if isinstance(r, dict)
            ],
        )
    lines += ["", "## Timeline", ""]
    if tl.samples or tl.jumps:
        sims = [s for _, s in tl.samples] + [j[1] for j in tl.jumps] + [j[2] for j in tl.jumps]
        lines += _table(
            ["fires", "jumps", "agent turns", "first simulated time", "last simulated time"],
            [
                [
                    len(tl.fires),
                    len(tl.jumps),
                    len(tl.turns),
                    _sim_date(min(sims)) + " UTC",
                    _sim_date(max(sims)) + " UTC",
                ]
            ],
        )
    else:
        lines.append("Nothing was recorded on the timeline.")
    lines += ["", f"![timeline]({paths.plot_path.name})", ""]
    return "\n".join(lines)


# -- plot --------------------------------------------------------------------------

_KIND_COLORS = {
    "deliver_prompt": "#1f77b4",
    "notify": "#17becf",
    "grade": "#2ca02c",
    "agent_control": "#7f7f7f",
    "mutate_world": "#bcbd22",
    "exec_in_sandbox": "#8c564b",
    "wake": "#9467bd",
    "save_snapshot": "#000000",
    "stop_run": "#d62728",
}
_OTHER_COLOR = "#e377c2"


def _ratio_title(run_name: str, results: dict[str, Any]) -> str:
    sched = results.get("scheduler")
    if not isinstance(sched, dict):
        return f"{run_name}: no scheduler measurements"
    ratio = sched.get("compression_ratio")
    limit = sched.get("compression_limit")
    r = f"{ratio:.1f}x" if isinstance(ratio, int | float) else "?"
    if isinstance(limit, int | float) and math.isfinite(limit) and limit > 0:
        pct = f" ({100 * ratio / limit:.0f}% of it)" if isinstance(ratio, int | float) else ""
        lim = f"limit {limit:.1f}x{pct}"
    else:
        lim = "no limit (never busy)"
    agent_limit = sched.get("compression_limit_agent")
    if isinstance(agent_limit, int | float) and agent_limit > 0 and isinstance(ratio, int | float):
        lim += f"; agent's own limit {agent_limit:.1f}x ({100 * ratio / agent_limit:.0f}% of it)"
    return f"{run_name}: compression {r} vs {lim}"


def _date_format(span_days: float) -> str:
    # Whole dates on every tick: an offset label ("2023-Dec") reads wrong
    # when the range straddles a month.
    if span_days > 3:
        return "%Y-%m-%d"
    if span_days > 2 / 24:
        return "%m-%d %H:%M"
    return "%H:%M:%S"


_WORK_COLORS = ["#2ca02c", "#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def _render_work_split(ax: Any, sched: dict[str, Any]) -> None:
    """One horizontal bar: the run's wall time, the agent's own work first, then each overhead."""
    overhead = sched.get("overhead_s") if isinstance(sched.get("overhead_s"), dict) else {}
    assert isinstance(overhead, dict)
    parts = [("agent", float(sched.get("agent_s") or 0.0))]
    parts += sorted(((str(k), float(v)) for k, v in overhead.items()), key=lambda kv: -kv[1])
    if sched.get("waiting_s"):
        parts.append(("waiting", float(sched["waiting_s"])))
    total = sum(v for _, v in parts)
    ax.set_yticks([])
    ax.set_xlabel("share of the run's wall time")
    if total <= 0:
        ax.text(0.5, 0.5, "no wall-time split recorded", transform=ax.transAxes, ha="center", va="center")
        return
    left = 0.0
    for i, (name, value) in enumerate(parts):
        share = value / total
        ax.barh([0], [share], left=[left], color=_WORK_COLORS[i % len(_WORK_COLORS)], label=f"{name} {value:.1f} s")
        left += share
    ax.set_xlim(0, 1)
    frac = sched.get("overhead_fraction")
    if isinstance(frac, int | float):
        ax.set_title(f"overhead {100 * frac:.1f}% of {total:.1f} s", fontsize=9, color="#555555")
    ax.xaxis.set_major_formatter(lambda x, _pos: f"{100 * x:.0f}%")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), ncol=1 + len(parts) // 5, fontsize=7, frameon=False)


def _render_plot(path: Path, run_name: str, results: dict[str, Any], tl: Timeline) -> None:
    # The object API with an explicit Agg canvas: no pyplot global state, no
    # display, safe from the worker thread write_report runs in.
    import matplotlib.dates as mdates
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection, PolyCollection
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig = Figure(figsize=(12, 8.5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    # A lane of its own for the turns: in a busy run they cover most of the
    # wall axis, and shading the whole plot would hide the staircase. Below,
    # where the wall time went (the agent's own work against each overhead).
    halves: Any = fig.subfigures(2, 1, height_ratios=[14, 3])
    top, bottom = halves[0], halves[1]
    ax, lane = top.subplots(2, 1, sharex=True, height_ratios=[14, 1])
    sched = results.get("scheduler") if isinstance(results.get("scheduler"), dict) else {}
    assert isinstance(sched, dict)
    _render_work_split(bottom.subplots(), sched)
    subtitle = (
        f"{len(tl.fires)} fires, {len(tl.jumps)} jumps, {len(tl.turns)} agent turns"
        + (f"; simulated {sched['sim_span_s'] / 86400:.2f} days" if "sim_span_s" in sched else "")
        + (f" in {sched['wall_s']:.1f} s wall" if "wall_s" in sched else "")
    )
    fig.suptitle(_ratio_title(run_name, results), fontsize=13)
    ax.set_title(subtitle, fontsize=9, color="#555555")
    lane.set_xlabel("wall time since start (s)")
    lane.set_yticks([])
    lane.set_ylabel("agent\nturns", rotation=0, ha="right", va="center", fontsize=8)
    ax.set_ylabel("simulated time (UTC)")
    ax.grid(True, color="#e5e5e5", linewidth=0.6)

    origin = tl.origin_wall_ns()
    # matplotlib.dates is unannotated, hence the ignores below.
    epoch = float(mdates.date2num(dt.datetime(1970, 1, 1, tzinfo=dt.UTC)))  # type: ignore[no-untyped-call]

    def x_of(wall_ns: int) -> float:
        return (wall_ns - origin) / 1e9

    def y_of(sim_ns: int) -> float:
        return epoch + sim_ns / _NS_PER_DAY

    if not tl.samples and not tl.jumps:
        ax.text(
            0.5,
            0.5,
            "no timeline recorded",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="#888888",
            fontsize=14,
        )
        lane.set_xlim(0, 1)
        fig.savefig(path, format="png")
        return

    # One monotone path through every known (wall, sim) point: between two
    # points that are not the two ends of a jump the clock was flowing.
    points: list[tuple[int, int, bool]] = [(w, s, False) for w, s in tl.samples]
    for w, a, b in tl.jumps:
        points.append((w, a, False))
        points.append((w, b, True))  # True: reached by a jump
    points.sort(key=lambda p: (p[0], p[1], not p[2]))
    flow: list[list[tuple[float, float]]] = []
    jump: list[list[tuple[float, float]]] = []
    for (w0, s0, _), (w1, s1, jumped) in itertools.pairwise(points):
        seg = [(x_of(w0), y_of(s0)), (x_of(w1), y_of(s1))]
        (jump if jumped and w1 == w0 else flow).append(seg)
    ax.add_collection(LineCollection(flow, colors="#1f4e79", linewidths=1.8, zorder=3))
    ax.add_collection(LineCollection(jump, colors="#ff7f0e", linewidths=1.2, zorder=3))

    if tl.turns:
        spans = [
            [(x_of(a), 0.0), (x_of(max(a, b)), 0.0), (x_of(max(a, b)), 1.0), (x_of(a), 1.0)] for a, b, _, _ in tl.turns
        ]
        # Alternating shades keep back-to-back turns apart.
        shades = ["#2ca02c", "#98df8a"] * (len(spans) // 2 + 1)
        lane.add_collection(PolyCollection(spans, facecolors=shades[: len(spans)], edgecolors="none"))
    lane.set_ylim(0, 1)

    kinds_seen: dict[str, str] = {}
    xs: list[float] = []
    ys: list[float] = []
    colors: list[str] = []
    for w, s, _eid, kinds in tl.fires:
        kind = kinds[0] if kinds else "none"
        color = _KIND_COLORS.get(kind, _OTHER_COLOR)
        kinds_seen.setdefault(kind if kind in _KIND_COLORS else "other", color)
        xs.append(x_of(w))
        ys.append(y_of(s))
        colors.append(color)
    if xs:
        ax.scatter(xs, ys, s=16, c=colors, marker="o", linewidths=0.4, edgecolors="white", zorder=4)

    all_x = [x for seg in flow + jump for x, _ in seg] + xs
    all_x += [x_of(t[1]) for t in tl.turns]
    all_y = [y for seg in flow + jump for _, y in seg] + ys
    lo_x, hi_x = min(all_x), max(all_x)
    lo_y, hi_y = min(all_y), max(all_y)
    pad_x = (hi_x - lo_x) * 0.02 or 0.5
    pad_y = (hi_y - lo_y) * 0.03 or 1 / 24
    ax.set_xlim(lo_x - pad_x, hi_x + pad_x)
    ax.set_ylim(lo_y - pad_y, hi_y + pad_y)
    ax.yaxis_date(tz=dt.UTC)
    span_days = hi_y - lo_y
    if span_days > 3:
        # Evenly spaced whole days; AutoDateLocator restarts at each month
        # and crowds two ticks around the 1st.
        step = max(1, math.ceil(span_days / 12))
        ax.yaxis.set_major_locator(mdates.DayLocator(interval=step, tz=dt.UTC))  # type: ignore[no-untyped-call]
    else:
        ax.yaxis.set_major_locator(mdates.AutoDateLocator(tz=dt.UTC, minticks=4, maxticks=14))  # type: ignore[no-untyped-call]
    ax.yaxis.set_major_formatter(mdates.DateFormatter(_date_format(span_days), tz=dt.UTC))  # type: ignore[no-untyped-call]

    handles: list[Any] = [
        Line2D([], [], color="#1f4e79", linewidth=1.6, label="clock flowing (busy)"),
        Line2D([], [], color="#ff7f0e", linewidth=1.2, label="clock jump (idle skipped)"),
    ]
    if tl.turns:
        handles.append(Patch(facecolor="#2ca02c", alpha=0.3, label="agent turn"))
    for kind, color in kinds_seen.items():
        handles.append(Line2D([], [], color=color, marker="o", linestyle="none", markersize=5, label=f"fire: {kind}"))
    ax.legend(handles=handles, loc="upper left", fontsize=8, framealpha=0.9)
    fig.savefig(path, format="png")
