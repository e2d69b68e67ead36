"""sclated.bench._procs: a process's children and live descendants, read from /proc."""

from __future__ import annotations

import os
import subprocess
import sys

from sclated.bench._procs import children, descendants


def test_a_child_and_its_own_child_are_seen_and_gone_once_ended() -> None:
    # A child that starts a grandchild, both sleeping until killed.
    script = "import subprocess,time; subprocess.Popen(['sleep','60']); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        for _ in range(200):
            if descendants(os.getpid()) >= 2:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert child.pid in children(os.getpid())
        assert descendants(child.pid) == 1  # the grandchild
        assert descendants(os.getpid()) >= 2
    finally:
        os.killpg(child.pid, 9)
        child.wait()
    assert child.pid not in children(os.getpid())
    assert descendants(child.pid) == 0
