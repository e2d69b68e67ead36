"""Our exports checked by the trainers' own code: tests/trainers/validate_exports.py
runs in the trainers' environment (.venv-trainers: SkyRL and verl, built by
`make venv`) on files this test writes with sclate's exporters, and must accept
them, and refuse broken ones."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

from sclated.capture import Verdict, export_group, export_samples, group_rows
from tests.capture.test_rewards_groups import BRANCH, member, member_samples, rewarded

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-trainers" / "bin" / "python"
SCRIPT = ROOT / "tests" / "trainers" / "validate_exports.py"


def validate(fmt: str, *paths: Path) -> tuple[int, dict[str, dict[str, Any]], str]:
    """The script's exit status, its verdict per file name, and its stderr."""
    assert PYTHON.exists(), f"{PYTHON} is missing: `make venv` builds the trainers' environment"
    res = subprocess.run(
        [str(PYTHON), str(SCRIPT), fmt, *map(str, paths)], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == len(paths), res.stderr[-3000:]
    return res.returncode, {Path(v["file"]).name: v for v in lines}, res.stderr


def rewrite(src: Path, dst: Path, change: Any) -> Path:
    rows = [json.loads(line) for line in src.read_text().splitlines()]
    change(rows)
    dst.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


def group_file(tmp_path: Path, fmt: str) -> Path:
    members = [
        ("runs/g1-0", member_samples(member("b1", [13, 14]), {"d1.q2": 1.0, "d2.q1": 0.0})),
        ("runs/g1-1", member_samples(member("b2", [16]), {"d1.q2": 0.0, "d2.q1": 1.0})),
        ("runs/g1-2", member_samples(member("b3", [17, 18, 19]), {"d1.q2": 0.5, "d2.q1": 0.5})),
    ]
    out = tmp_path / "group.jsonl"
    assert export_group(group_rows("g1", members, BRANCH), fmt, out).rows == 6
    return out


def test_skyrl_accepts_run_and_group_exports_and_refuses_broken_ones(tmp_path: Path) -> None:
    # A run's export: a multi-round sample (per-token rewards at two round ends).
    run = tmp_path / "run.jsonl"
    samples = rewarded([Verdict("r1", "d1.q1", 1.0), Verdict("r1", "d1.q2", 0.25)])
    assert export_samples(samples, "skyrl", run).rows == 1

    def short_mask(rows: list[dict[str, Any]]) -> None:
        rows[0]["loss_masks"] = rows[0]["loss_masks"][:-1]

    def short_rewards(rows: list[dict[str, Any]]) -> None:
        rows[0]["token_rewards"] = rows[0]["token_rewards"][:-1]

    status, by_file, _ = validate(
        "skyrl",
        run,
        group_file(tmp_path, "skyrl"),
        rewrite(run, tmp_path / "short-mask.jsonl", short_mask),
        rewrite(run, tmp_path / "short-rewards.jsonl", short_rewards),
    )
    assert status == 1
    single, group = by_file["run.jsonl"], by_file["group.jsonl"]
    assert single["ok"] and (single["rows"], single["groups"], single["largest_group"]) == (1, 1, 1)
    # A group of one: SkyRL's GRPO leaves its score as it is, the sum of the per-token
    # rewards (1.0 + 0.25; the scalar reward is their mean).
    assert abs(single["advantage_abs_max"] - 1.25) < 1e-4
    # A group's export: two GRPO groups of three, advantages from SkyRL's GRPO.
    assert group["ok"] and (group["rows"], group["groups"], group["largest_group"]) == (6, 2, 3)
    assert group["advantage_abs_max"] > 0
    # A loss mask one entry short: SkyRL's own validation refuses it.
    bad = by_file["short-mask.jsonl"]
    assert not bad["ok"] and "validate_generator_output" in bad["error"]
    assert "Response ids and loss masks must have the same length" in bad["error"]
    # Per-token rewards one short: refused too (the per-token form is checked as well).
    bad = by_file["short-rewards.jsonl"]
    assert not bad["ok"] and "per_token rewards" in bad["error"]


def test_verl_accepts_run_and_group_exports_and_refuses_broken_ones(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    samples = rewarded([Verdict("r1", "d1.q1", 1.0)], mode="run")
    assert export_samples([replace(s, sample_id=f"s{i}") for i, s in enumerate(samples)], "verl", run).rows == 2

    def bad_reward(rows: list[dict[str, Any]]) -> None:
        rows[0]["reward"] = "high"

    def short_mask(rows: list[dict[str, Any]]) -> None:
        rows[1]["response_mask"] = rows[1]["response_mask"][:-1]

    status, by_file, _ = validate(
        "verl",
        run,
        group_file(tmp_path, "verl"),
        rewrite(run, tmp_path / "bad-reward.jsonl", bad_reward),
        rewrite(run, tmp_path / "short-mask.jsonl", short_mask),
    )
    assert status == 1
    assert by_file["run.jsonl"]["ok"] and by_file["run.jsonl"]["rows"] == 2
    group = by_file["group.jsonl"]
    assert group["ok"] and (group["rows"], group["groups"], group["largest_group"]) == (6, 2, 3)
    assert group["advantage_abs_max"] > 0
    # A reward that is not a number: verl's AgentLoopOutput refuses it.
    bad = by_file["bad-reward.jsonl"]
    assert not bad["ok"] and "AgentLoopOutput" in bad["error"]
    # A mask one entry short: refused (the script's own check of verl's invariant).
    bad = by_file["short-mask.jsonl"]
    assert not bad["ok"] and "not aligned" in bad["error"]
