"""The client is slim: `sclate` speaks gRPC only, and the local tools it used to
carry point to `sclated` (and run it when it is installed alongside)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import sclate
import sclate_api
from sclate.cli import moved_command

CLIENT = Path(sclate.__file__).resolve().parents[1]  # clients/python
SCLATE = Path(sys.executable).with_name("sclate")
# What the client distribution depends on (clients/python/pyproject.toml), and itself.
ALLOWED = {"grpc", "google", "rich", "sclate", "sclate_api"}
DAEMON_SIDE = ("sclated", "adapters", "proxy_addons", "mitmproxy", "aiodocker", "matplotlib", "aiohttp", "uvloop")


def _imports(path: Path) -> set[str]:
    tops: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            tops.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    return tops


def test_the_client_imports_only_grpc_protobuf_rich_and_the_stdlib() -> None:
    assert Path(sclate_api.__file__).resolve().parents[1] == CLIENT
    files = sorted(CLIENT.glob("sclate/**/*.py")) + sorted(CLIENT.glob("sclate_api/**/*.py"))
    assert any(f.name == "cli.py" for f in files) and any(f.name == "sclate_pb2_grpc.py" for f in files)
    foreign = {
        f"{f.relative_to(CLIENT)}: {top}"
        for f in files
        for top in _imports(f)
        if top not in ALLOWED and top not in sys.stdlib_module_names
    }
    assert not foreign


def test_running_the_cli_loads_no_daemon_module() -> None:
    # Parse, build a client, render a run as a table and as JSON: every lazy import on the way.
    code = """
import sys
from sclate import cli
from sclate_api.v1 import sclate_pb2 as pb
cli.build_parser().parse_args(["runs", "list", "-o", "json"])
cli.Client("127.0.0.1:1", "t")
run = pb.Run(name="runs/x", results=pb.RunResults(calls=[pb.RoleUsage(role="agent")]))
cli._show_run(run, "table")
cli._show_run(run, "json")
print(sorted({m.split(".")[0] for m in sys.modules}))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    loaded = set(ast.literal_eval(res.stdout.strip().splitlines()[-1]))
    assert {"grpc", "rich", "sclate_api"} <= loaded
    assert not loaded & set(DAEMON_SIDE)


def test_moved_command_finds_the_command_past_global_options() -> None:
    assert moved_command(["doctor"]) == 0
    assert moved_command(["--endpoint", "h:1", "--token=t", "images", "build"]) == 3
    assert moved_command(["--tls-ca", "ca.pem", "bench", "scheduler", "--json"]) == 2
    assert moved_command(["runs", "list"]) is None
    assert moved_command(["--endpoint", "doctor", "runs", "list"]) is None  # an option's value, not a command
    assert moved_command(["-h", "doctor"]) is None
    assert moved_command([]) is None


def _sclate_in(tmp_path: Path) -> Path:
    """The venv's `sclate` as if installed in ``tmp_path`` (it looks for `sclated` next to itself)."""
    link = tmp_path / "sclate"
    link.symlink_to(SCLATE)
    return link


def test_a_moved_command_says_where_it_went_and_runs_sclated_next_to_it(tmp_path: Path) -> None:
    fake = tmp_path / "sclated"
    fake.write_text('#!/bin/sh\necho "sclated got: $*"\nexit 3\n')
    fake.chmod(0o755)
    res = subprocess.run(
        [str(_sclate_in(tmp_path)), "--endpoint", "h:1", "images", "build", "--only", "sandbox"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tmp_path / "nowhere")},
        timeout=60,
    )
    assert res.returncode == 3  # sclated's own exit code: it replaced the process
    assert res.stdout == "sclated got: images build --only sandbox\n"
    assert res.stderr == (
        f"sclate: `sclate images build` moved: run `sclated images build` (running {fake} images build)\n"
    )


def test_a_moved_command_without_sclated_is_one_line_and_exit_2(tmp_path: Path) -> None:
    res = subprocess.run(
        [str(_sclate_in(tmp_path)), "doctor", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tmp_path / "nowhere")},
        timeout=60,
    )
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr == (
        "sclate: `sclate doctor` moved: run `sclated doctor` "
        "(sclated is not installed here: it comes with the daemon)\n"
    )
