"""The embedded model server lives no longer than the daemon that started it.

A daemon killed outright (SIGKILL, the OOM killer) runs no cleanup, so its model
server would go on holding its memory and port, and the next daemon would start
another beside it. The daemon passes its pid (``--parent-pid``); the server asks the
kernel for SIGKILL when its parent dies (Linux's parent-death signal), or, elsewhere,
watches its parent id from a thread.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, *, poll_s: float = 1.0) -> None:
    """End this process when ``parent_pid``, its parent, dies; at once if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    else:

        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(poll_s)
            os._exit(0)

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    # Armed after the parent may already have gone (we were reparented): then it never fires.
    if os.getppid() != parent_pid:
        os._exit(0)
