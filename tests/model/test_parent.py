"""The embedded model server dies with the daemon that started it, even a daemon killed
outright (found by `sclated bench faults`: every SIGKILL of the daemon left its model
server running, and the restarted daemon started another beside it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# The "daemon": starts the "model server" (a process that arms die_with_parent, then
# sleeps), prints its pid and waits to be killed.
_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
print(child.pid, flush=True)
time.sleep(600)
"""
_SERVER = """
import os, time
from sclated.model._parent import die_with_parent
die_with_parent(os.getppid())
open({ready!r}, "w").close()
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_server_dies_when_its_parent_is_killed(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, _SERVER.format(ready=str(ready))], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        server = int(parent.stdout.readline())
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline, "the server never armed its parent-death signal"
            time.sleep(0.05)
        assert _alive(server)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(server):
            assert time.monotonic() < deadline, f"the server (pid {server}) outlived its parent"
            time.sleep(0.05)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_server_whose_parent_is_already_gone_exits_at_once() -> None:
    # Asked to die with a process that is not its parent (the daemon died before the
    # server armed the signal, and it was reparented): it exits instead of serving.
    code = "from sclated.model._parent import die_with_parent; die_with_parent(1); import time; time.sleep(30)"
    done = subprocess.run([sys.executable, "-c", code], timeout=20)
    assert done.returncode == 0
