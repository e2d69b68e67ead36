"""The run report: three files written together, readable, and never half-written."""

from __future__ import annotations

import gc
import json
import os
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sclated.report import ReportPaths, Timeline, _report, write_report

DAY = 86_400 * 10**9
T0 = 1_700_000_000 * 10**9


def _results(compression_limit: float = 12.0) -> dict[str, Any]:
    return {
        "score": 0.75,
        "rounds": 2,
        "rounds_graded": 2,
        "round_scores": [
            {"round_id": "r1", "day": 0, "kind": "task", "graded": True, "score": 1.0, "reason": "exact | match"},
            {"round_id": "r2", "day": 1, "kind": "task", "graded": True, "score": 0.5, "reason": "partial"},
        ],
        "scheduler": {
            "events_scheduled": 6,
            "events_fired": 6,
            "in_order": True,
            "delivery_delay_ms_p50": 0.9,
            "delivery_delay_ms_max": 2.0,
            "sim_span_s": 2 * 86_400.0,
            "wall_s": 20.0,
            "compression_ratio": 8640.0,
            "compression_limit": compression_limit,
            "jumps": 3,
            "unfired": [],
            "end_reason": "stopped",
            "clock_mode": "hybrid",
        },
        "calls": [
            {"role": "agent", "calls": 3, "prompt_tokens": 300, "completion_tokens": 30},
            {"role": "memory", "calls": 1, "prompt_tokens": 50, "completion_tokens": 5},
        ],
    }


def _timeline() -> Timeline:
    tl = Timeline(start_wall_ns=1_000)
    wall = 1_000
    sim = T0
    for day in range(2):
        target = T0 + day * DAY + 9 * 3600 * 10**9
        tl.note_jump(wall, sim, target)
        sim = target
        tl.note_fire(wall, sim, f"prompt-{day}", ["deliver_prompt"])
        tl.note_turn(wall, wall + 5 * 10**9, sim, f"r{day + 1}")
        wall += 5 * 10**9
        sim += 5 * 10**9
        tl.note_fire(wall, sim, f"grade-{day}", ("grade",))
        tl.note_fire(wall, sim, f"odd-{day}", ("some_new_effect", "grade"))
        wall += 10**6
    tl.note_jump(wall, sim, sim + DAY // 2)
    return tl


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert data.rstrip(b"\x00")[-12:-4] == b"\x00\x00\x00\x00IEND", "PNG is truncated"
    return int(width), int(height)


def test_timeline_notes_are_plain_tuples() -> None:
    tl = Timeline()
    tl.note_jump(5, 10, 20)
    tl.note_fire(7, 20, "e1", ["grade"])
    tl.note_turn(3, 9, 20, "r1")
    assert tl.jumps == [(5, 10, 20)]
    assert tl.fires == [(7, 20, "e1", ("grade",))]
    assert tl.turns == [(3, 9, 20, "r1")]
    assert tl.samples == [(7, 20), (3, 20)]
    assert tl.origin_wall_ns() == 3  # earliest wall time noted, the turn's start
    assert Timeline(start_wall_ns=1).origin_wall_ns() == 1
    copy = tl.copy()
    tl.note_fire(8, 21, "e2", [])
    assert len(copy.fires) == 1


def test_writes_all_three_files(tmp_path: Path) -> None:
    out = tmp_path / "reports" / "run-1"  # created on demand
    results = _results()
    paths = write_report(out, run_name="run-1", results=results, timeline=_timeline())
    assert paths == ReportPaths(out / "report.json", out / "report.md", out / "timeline.png")
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md", "timeline.png"]

    doc = json.loads(paths.json_path.read_text())
    assert doc["run"] == "run-1"
    assert doc["results"] == results  # round-trips exactly, keys as given
    assert doc["paths"] == {
        "json": str(paths.json_path),
        "markdown": str(paths.markdown_path),
        "plot": str(paths.plot_path),
    }
    assert doc["timeline"] == {"fires": 6, "jumps": 3, "turns": 2}

    md = paths.markdown_path.read_text()
    assert md.startswith("# Run report: run-1")
    assert "| compression_ratio | 8640.0 |" in md
    assert "| agent | 3 | 300 | 30 |" in md
    assert "| **all** | 4 | 350 | 35 |" in md
    assert "exact \\| match" in md  # a pipe in a cell does not break the table
    assert "![timeline](timeline.png)" in md

    width, height = _png_size(paths.plot_path)
    assert 800 <= width <= 3000 and 400 <= height <= 2000
    assert paths.plot_path.stat().st_size > 10_000  # drawn, not a blank canvas


def test_non_finite_floats_become_null(tmp_path: Path) -> None:
    paths = write_report(tmp_path, run_name="r", results=_results(float("inf")), timeline=_timeline())
    text = paths.json_path.read_text()
    assert "Infinity" not in text
    assert json.loads(text)["results"]["scheduler"]["compression_limit"] is None


def test_empty_timeline_and_results(tmp_path: Path) -> None:
    paths = write_report(tmp_path, run_name="empty", results={}, timeline=Timeline())
    doc = json.loads(paths.json_path.read_text())
    assert doc["results"] == {} and doc["timeline"] == {"fires": 0, "jumps": 0, "turns": 0}
    assert "Nothing was recorded on the timeline." in paths.markdown_path.read_text()
    width, height = _png_size(paths.plot_path)
    assert width > 100 and height > 100


def test_failing_plot_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A previous report in the same directory must survive intact.
    write_report(tmp_path, run_name="old", results={"score": 1.0}, timeline=Timeline())
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def broken(path: Path, *_: Any) -> None:
        path.write_bytes(b"\x89PNG half")  # dies after starting the file
        raise RuntimeError("renderer crashed")

    monkeypatch.setattr(_report, "_render_plot", broken)
    with pytest.raises(RuntimeError, match="renderer crashed"):
        write_report(tmp_path, run_name="new", results=_results(), timeline=_timeline())
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert after == before  # no temp files, no new JSON naming a missing plot


def test_unwritable_directory_raises_and_writes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(OSError):
        write_report(blocker / "out", run_name="r", results=_results(), timeline=_timeline())
    assert [p.name for p in tmp_path.iterdir()] == ["not-a-dir"]


def test_read_only_directory_raises_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "ro"
    out.mkdir()
    # Root ignores permission bits (CI runs as root), but not the immutable attribute.
    as_root = os.geteuid() == 0
    if as_root:
        subprocess.run(["chattr", "+i", str(out)], check=True)
    else:
        out.chmod(0o555)
    try:
        with pytest.raises(PermissionError):
            write_report(out, run_name="r", results=_results(), timeline=_timeline())
        assert list(out.iterdir()) == []
    finally:
        if as_root:
            subprocess.run(["chattr", "-i", str(out)], check=True)
        else:
            out.chmod(0o755)


def test_renders_a_long_busy_run_quickly(tmp_path: Path) -> None:
    """40 simulated days, a few hundred fires: the plot stays cheap to draw."""
    import time

    tl = Timeline(start_wall_ns=0)
    wall, sim = 0, T0
    for day in range(40):
        for k in range(8):
            target = T0 + day * DAY + (9 + k) * 3600 * 10**9
            tl.note_jump(wall, sim, target)
            sim = target
            tl.note_fire(wall, sim, f"e{day}-{k}", ("deliver_prompt",))
            tl.note_turn(wall, wall + 30 * 10**9, sim, f"r{day}-{k}")
            wall += 30 * 10**9
            sim += 30 * 10**9
    started = time.monotonic()
    paths = write_report(tmp_path, run_name="long", results=_results(), timeline=tl)
    assert time.monotonic() - started < 30
    assert json.loads(paths.json_path.read_text())["timeline"]["fires"] == 320
    _png_size(paths.plot_path)


def test_memory_components_and_share_are_reported(tmp_path: Path) -> None:
    results = _results()
    results["components"] = [
        {"role": "agent", "calls": 3, "prompt_tokens": 300, "completion_tokens": 30, "failed": 0},
        {"role": "memory:mem0", "calls": 2, "prompt_tokens": 40, "completion_tokens": 8, "failed": 0},
        {"role": "memory:embeddings", "calls": 5, "prompt_tokens": 25, "completion_tokens": 0, "failed": 1},
    ]
    results["memory_token_share"] = 73 / 403
    md = write_report(tmp_path, run_name="r", results=results, timeline=_timeline()).markdown_path.read_text()
    assert "| memory:embeddings | 5 | 25 | 0 | 1 |" in md
    assert "The memory role's share of all tokens: 18.1%." in md
    # Only roles, nothing finer: no component table.
    del results["components"][1:]
    md = write_report(tmp_path / "b", run_name="r", results=results, timeline=_timeline()).markdown_path.read_text()
    assert "By component" not in md


def test_a_written_reports_figure_does_not_outlive_it_under_the_daemons_gc(tmp_path: Path) -> None:
    """The daemon collects young objects rarely (run_daemon sets these thresholds); a
    figure is all reference cycles, so each report's stayed in memory (~2 MB with its
    Agg canvas) until a full collection. Found by `sclated bench soak`: +134 MB in 70 runs."""
    from matplotlib.figure import Figure

    def figures() -> int:
        return sum(1 for o in gc.get_objects() if isinstance(o, Figure))

    old = gc.get_threshold()
    gc.collect()
    before = figures()
    gc.set_threshold(100_000, 50, 1000)
    try:
        for i in range(5):
            write_report(tmp_path / str(i), run_name=f"r{i}", results=_results(), timeline=_timeline())
        assert figures() == before
    finally:
        gc.set_threshold(*old)
