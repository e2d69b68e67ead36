"""Simulated time inside sandboxes, through libfaketime's timestamp file.

The file holds ``+<seconds>`` (or ``-<seconds>``): an offset from the host's real
clock, so simulated time flows at wall rate inside without any rewriting, and a
jump is one atomic rename. With ``FAKETIME_NO_CACHE=1`` every time() call inside
re-reads the file, so a rename is visible at the next call (measured: tens of
milliseconds end to end, see ``_bench.py``). Monotonic clocks stay real
(``DONT_FAKE_MONOTONIC=1``): Python, Node and the JVM time their sleeps and
timeouts with them and break if they jump.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import tempfile
import time
from pathlib import Path

from sclated.errors import InvalidArgument

__all__ = [
    "FAKETIME_ENV",
    "FAKETIME_LIB",
    "SANDBOX_DIR",
    "TIME_FILE",
    "format_frozen",
    "format_offset",
    "freeze_time",
    "publish_time",
    "publish_time_sync",
]

SANDBOX_DIR = "/run/sclate"
FAKETIME_LIB = "/usr/local/lib/faketime/libfaketime.so.1"
TIME_FILE = f"{SANDBOX_DIR}/time/faketime.rc"
FAKETIME_ENV: dict[str, str] = {
    "LD_PRELOAD": FAKETIME_LIB,
    "FAKETIME_TIMESTAMP_FILE": TIME_FILE,
    "FAKETIME_NO_CACHE": "1",
    "DONT_FAKE_MONOTONIC": "1",
}

_NS = 1_000_000_000


def format_offset(offset_ns: int) -> str:
    """``+S.fffffffff`` as libfaketime reads it (a signed, fractional number of seconds)."""
    sign = "-" if offset_ns < 0 else "+"
    whole, frac = divmod(abs(offset_ns), _NS)
    return f"{sign}{whole}.{frac:09d}"


def format_frozen(sim_ns: int) -> str:
    """``YYYY-MM-DD hh:mm:ss.fffffffff``: an absolute time without ``@``, which libfaketime
    holds still (a DISCRETE run's clock stands between jumps). Read in the process's time
    zone; sandboxes run with TZ=UTC."""
    whole, frac = divmod(sim_ns, _NS)
    stamp = dt.datetime.fromtimestamp(whole, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{stamp}.{frac:09d}"


def _write_atomic(time_file: Path, text: str) -> None:
    # Same directory so os.replace is a rename on one filesystem: readers see the
    # old file or the new one, never a partial write.
    fd, tmp = tempfile.mkstemp(prefix=".faketime-", dir=time_file.parent)
    try:
        os.write(fd, text.encode())
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, time_file)
    except BaseException:
        os.unlink(tmp)
        raise


async def freeze_time(time_file: Path, sim_ns: int) -> None:
    """Make ``sim_ns`` the sandbox's time, standing still until the next publication."""
    if sim_ns < 0:
        raise InvalidArgument(f"simulated time {sim_ns} is before 1970", field="sim_ns")
    await asyncio.to_thread(_write_atomic, time_file, format_frozen(sim_ns) + "\n")


def publish_time_sync(
    time_file: Path, sim_ns: int, *, now_ns: int | None = None, taken_mono_ns: int | None = None
) -> int:
    """Write the offset for ``sim_ns`` atomically; returns the offset in ns.

    ``taken_mono_ns``: the monotonic time at which ``sim_ns`` was read from a
    flowing clock. The time spent since (a thread hop, a busy loop) is added,
    so the sandbox's clock does not lag the run's clock by the publication's
    own latency; a message delivered right after a jump would otherwise be
    seen inside before its scheduled time.
    """
    if sim_ns < 0:
        raise InvalidArgument(f"simulated time {sim_ns} is before 1970", field="sim_ns")
    if taken_mono_ns is not None:
        sim_ns += max(0, time.monotonic_ns() - taken_mono_ns)
    real = time.time_ns() if now_ns is None else now_ns
    offset = sim_ns - real
    _write_atomic(time_file, format_offset(offset) + "\n")
    return offset


async def publish_time(time_file: Path, sim_ns: int, *, flowing: bool = True) -> int:
    """Make ``sim_ns`` (the run's time now) the current simulated time for every process
    reading ``time_file``. ``flowing``: the run's clock moves on at wall rate while this
    is written, so the offset accounts for the time the write takes to happen."""
    taken = time.monotonic_ns() if flowing else None
    return await asyncio.to_thread(publish_time_sync, time_file, sim_ns, taken_mono_ns=taken)
