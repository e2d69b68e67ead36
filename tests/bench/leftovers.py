"""Run `sclated bench NAME` as a user does and find what it left behind.

The benchmark runs as a subprocess with ``TMPDIR`` pointing at a directory of
the test's own, so every temporary directory it makes is in there. While it
runs, /proc is polled for every process descended from it (children start in
sessions of their own, so process groups would not find them; the parent
chain does). Afterwards nothing of that must be alive, no process may name
the temporary directory, the directory must be empty, and no container or
snapshot image labelled with the benchmark's pid may remain.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SCLATED = Path(sys.executable).with_name("sclated")
ROOT = Path(__file__).resolve().parents[2]

Proc = tuple[int, int]  # (pid, start time in clock ticks): a pid may be reused


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, start time) of a live process, None if it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[19])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(root: int) -> dict[Proc, str]:
    """Every live process below ``root`` (by parent chain), with its command line."""
    parents: dict[int, tuple[int, int]] = {}
    for pid in _all_pids():
        st = _stat(pid)
        if st is not None:
            parents[pid] = st
    found: dict[Proc, str] = {}
    frontier = {root}
    while frontier:
        nxt = {pid for pid, (ppid, _) in parents.items() if ppid in frontier and (pid, parents[pid][1]) not in found}
        for pid in nxt:
            found[(pid, parents[pid][1])] = _cmdline(pid)
        frontier = nxt
    return found


def alive(proc: Proc) -> bool:
    st = _stat(proc[0])
    return st is not None and st[1] == proc[1]


def _docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True, timeout=60).stdout


def containers_of(pid: int) -> list[str]:
    """Containers (any state) labelled by a benchmark running as ``pid``."""
    out = _docker("ps", "-a", "--filter", "label=sclate.daemon", "--format", '{{.ID}} {{.Label "sclate.daemon"}}')
    return [line for line in out.splitlines() if line.split(" ", 1)[-1].startswith(f"bench-{pid}-")]


def snapshot_images_of(pid: int) -> list[str]:
    out = _docker("images", "--format", "{{.Repository}}:{{.Tag}}", "sclate-snap")
    return [ref for ref in out.splitlines() if ref.startswith(f"sclate-snap:snap-bench-{pid}-")]


@dataclass
class BenchRun:
    returncode: int
    stdout: str
    stderr: str
    seen: dict[Proc, str] = field(default_factory=dict)
    containers_seen: int = 0
    signalled: bool = False

    def json(self) -> dict[str, object]:
        out: dict[str, object] = json.loads(self.stdout.strip().splitlines()[-1])
        return out


def run_bench(
    name: str,
    *args: str,
    tmpdir: Path,
    interrupt: int | None = None,
    when: Callable[[dict[Proc, str], int], bool] | None = None,
    after_s: float = 0.0,
    timeout_s: float = 600.0,
) -> BenchRun:
    """Run ``sclated bench NAME --json ARGS``; with ``interrupt``, send that signal
    once ``when(descendants, pid)`` holds (then ``after_s`` later)."""
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [str(SCLATED), "bench", name, "--json", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: dict[Proc, str] = {}
    containers_seen = 0
    signalled = False
    deadline = time.monotonic() + timeout_s
    fired_at: float | None = None
    # Pipes are read at the end: the outputs are small (one JSON line, a few
    # lines of stderr) and fit the pipe buffers.
    while proc.poll() is None:
        now = descendants(proc.pid)
        # The latest command line: a child is first seen between fork and exec.
        seen.update({p: cmd for p, cmd in now.items() if cmd})
        if interrupt is not None and not signalled:
            if fired_at is None and (when is None or when(now, proc.pid)):
                fired_at = time.monotonic() + after_s
            if fired_at is not None and time.monotonic() >= fired_at:
                containers_seen = len(containers_of(proc.pid))
                proc.send_signal(interrupt)
                signalled = True
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"sclated bench {name} did not finish in {timeout_s} s")
        time.sleep(0.05)
    stdout, stderr = proc.communicate()
    run = BenchRun(proc.returncode, stdout, stderr, seen, containers_seen, signalled)
    assert_nothing_left(run, proc.pid, tmpdir)
    return run


def assert_nothing_left(run: BenchRun, pid: int, tmpdir: Path) -> None:
    # Killed children may take a moment to be reaped by init.
    deadline = time.monotonic() + 5
    while True:
        left = {p: cmd for p, cmd in run.seen.items() if alive(p)}
        named = {q: _cmdline(q) for q in _all_pids() if str(tmpdir) in _cmdline(q)}
        if (not left and not named) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"processes the benchmark started are still running: {left}\n{run.stderr[-2000:]}"
    assert not named, f"processes naming the benchmark's temporary directory: {named}"
    assert list(tmpdir.iterdir()) == [], f"left in TMPDIR: {sorted(p.name for p in tmpdir.iterdir())}"
    assert containers_of(pid) == [], f"containers left: {containers_of(pid)}"
    assert snapshot_images_of(pid) == [], f"snapshot images left: {snapshot_images_of(pid)}"


def interrupted_ok(run: BenchRun, sig: int) -> None:
    """The benchmark was interrupted mid-way and said so, instead of finishing."""
    assert run.signalled
    assert run.returncode == 128 + sig, (run.returncode, run.stderr[-3000:])
    assert f"{signal.Signals(sig).name}, cleaning up" in run.stderr
    assert run.stdout.strip() == ""


def running(marker: str) -> Callable[[dict[Proc, str], int], bool]:
    """A ``when`` for run_bench: a descendant's command line contains ``marker``."""

    def check(procs: dict[Proc, str], pid: int) -> bool:
        return any(marker in cmd for cmd in procs.values())

    return check


def has_container(procs: dict[Proc, str], pid: int) -> bool:
    return bool(containers_of(pid))
