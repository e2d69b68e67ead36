"""`sclated` runs the daemon from flags, and a local tool when its first argument
names one (doctor, images build, model serve, bench NAME, demo)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sclated import bench
from sclated._tools import BENCHES, TOOLS, build_parser


def _sclated(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sclated", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["doctor", "--help"], "--skip-runtime"),
        (["doctor", "--help"], "--skip-isolation"),
        (["images", "build", "--help"], "--only"),
        (["model", "serve", "--help"], "--gguf"),
        (["bench", "scheduler", "--help"], "--quick"),
        (["bench", "memory", "--help"], "--pair"),
        (["bench", "fuzz", "--help"], "--requests"),
        (["demo", "--help"], "--model-url"),
        (["demo", "--scheduler-only", "--help"], "--events-per-day"),
    ],
)
def test_each_tool_answers_with_its_own_options(argv: list[str], option: str) -> None:
    res = _sclated(*argv)
    assert res.returncode == 0, res.stderr
    assert option in res.stdout


def test_the_tools_are_subcommands_and_the_daemon_help_lists_them() -> None:
    usage = build_parser().format_usage()
    assert all(tool in usage for tool in TOOLS)
    res = _sclated("--help")
    assert res.returncode == 0 and "--state-dir" in res.stdout
    assert "sclated doctor | images build | model serve | bench NAME | demo" in " ".join(res.stdout.split())


def test_an_unknown_bench_or_a_bare_tool_is_a_usage_error() -> None:
    res = _sclated("bench", "nope")
    assert res.returncode == 2 and "invalid choice: 'nope'" in res.stderr
    res = _sclated("images")
    assert res.returncode == 2 and res.stderr.startswith("usage: sclated images")


def test_daemon_flags_are_still_the_daemons() -> None:
    res = _sclated("--no-such-flag")
    assert res.returncode == 2 and "unrecognized arguments: --no-such-flag" in res.stderr


def test_every_benchmark_is_reachable() -> None:
    assert tuple(bench.BENCHES) == BENCHES
