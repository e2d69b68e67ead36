"""systemd's notify protocol in a few lines: READY, STOPPING, WATCHDOG, STATUS."""

from __future__ import annotations

import asyncio
import os
import socket

__all__ = ["notify", "watchdog_interval_s", "watchdog_loop"]


def notify(message: str) -> bool:
    """Send one datagram to $NOTIFY_SOCKET; False when not under systemd."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    if path.startswith("@"):
        path = "\0" + path[1:]  # abstract namespace
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        # Never blocks: called from the event loop, and a receiver that does
        # not read (a full queue) must cost a lost datagram, not a stalled loop.
        sock.setblocking(False)
        try:
            sock.connect(path)
            sock.sendall(message.encode())
        except OSError:  # BlockingIOError included
            return False
    return True


def watchdog_interval_s() -> float | None:
    """Half of WatchdogSec, when systemd asked this process for pings."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2e6
    except ValueError:
        return None


async def watchdog_loop(interval_s: float) -> None:
    # Pinged from the event loop itself: a blocked loop stops the pings and
    # systemd restarts the daemon, which is the point.
    while True:
        notify("WATCHDOG=1")
        await asyncio.sleep(interval_s)
