"""Simulated time inside sandboxes: the time file, the start-up probe, jumps."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import pytest

from sclated.bench import measure_publish_latency
from sclated.errors import InvalidArgument
from sclated.runtime import SandboxManager, format_offset
from sclated.runtime._simtime import publish_time_sync

from .conftest import SIM_START_NS

_NS = 1_000_000_000
_DAY = 86400 * _NS


def test_format_offset() -> None:
    assert format_offset(0) == "+0.000000000"
    assert format_offset(3 * _DAY + 250_000_000) == "+259200.250000000"
    assert format_offset(-1_500_000_000) == "-1.500000000"


def test_publish_is_an_atomic_rename(short_dir: Path) -> None:
    f = short_dir / "faketime.rc"
    offset = publish_time_sync(f, 2_000_000_000 * _NS, now_ns=1_000_000_000 * _NS)
    assert offset == 1_000_000_000 * _NS
    first = os.stat(f).st_ino
    assert f.read_text() == "+1000000000.000000000\n"
    publish_time_sync(f, 10 * _NS, now_ns=12 * _NS)
    assert f.read_text() == "-2.000000000\n"
    # A new inode each time: readers holding the old file see the old time whole,
    # and why the directory (not the file) is what gets mounted.
    assert os.stat(f).st_ino != first
    assert sorted(p.name for p in short_dir.iterdir()) == ["faketime.rc"]
    with pytest.raises(InvalidArgument):
        publish_time_sync(f, -1)


@pytest.mark.docker
async def test_probe_date_and_jumps(
    manager: SandboxManager, sandbox_image: str, short_dir: Path
) -> None:
    spec = manager.spec_for(image=sandbox_image, run="clock", tenant="acme", run_dir=short_dir)
    sb = await manager.create(spec, short_dir, sim_ns=SIM_START_NS)  # probes by default
    probe = await sb.probe_time()
    assert abs(probe.date_s - SIM_START_NS / _NS) < 60
    assert abs(probe.jump_date_s - probe.date_s - 3 * 86400) <= 2
    assert 0.009 <= probe.sleep_s < 1

    out = (await sb.sh("date -u +%Y-%m-%dT%H")).text.strip()
    assert out == "2031-01-01T00"
    await sb.publish_time(SIM_START_NS + 3 * _DAY + 5 * 3600 * _NS)
    out = (await sb.sh("date -u +%Y-%m-%dT%H:%M")).text.strip()
    assert out == "2031-01-04T05:00"
    py = "import time; t = time.time(); time.sleep(0.05); print(time.time() - t, t)"
    slept, now = (await sb.exec(["python3", "-c", py])).text.split()
    assert 0.04 < float(slept) < 1
    assert abs(float(now) - (SIM_START_NS + 3 * _DAY + 5 * 3600 * _NS) / _NS) < 5
    # The run's clock itself was never moved backwards by the probe.
    assert await sb.sim_now_ns() >= SIM_START_NS + 3 * _DAY


@pytest.mark.docker
async def test_running_process_sees_jumps_quickly(
    manager: SandboxManager, sandbox_image: str, short_dir: Path
) -> None:
    spec = manager.spec_for(image=sandbox_image, run="watch", tenant="acme", run_dir=short_dir)
    sb = await manager.create(spec, short_dir, sim_ns=SIM_START_NS, probe=False)
    latencies = await measure_publish_latency(sb, jumps=10)
    assert len(latencies) == 10
    # Brief target: p50 <= 50 ms. Measured here ~1 ms; the bound leaves room for a busy CI.
    assert statistics.median(latencies) <= 50, latencies
    assert max(latencies) < 1000, latencies


# Eight threads reading the clock at once. PyPI's plain libfaketime.so.1 (3.0.1)
# re-reads the timestamp file into static buffers shared by every thread, with no
# lock: a thread that catches another's half-written buffer either gets the real,
# unfaked time or kills the whole process ("failed to parse FAKETIME timestamp").
# The image ships libfaketime's MT build, which holds a mutex around the clock.
_THREADS_SCRIPT = """
import sys, threading, time
# Hand the GIL over every 10 us: threads waiting for it read the clock inside
# libfaketime too, so the old library's race shows in 16 of 16 tries (5 of 8 without).
sys.setswitchinterval(1e-5)
N = 12_500
seen = []
def work():
    low, high = float("inf"), 0.0
    for _ in range(N):
        t = time.time()
        low, high = min(low, t), max(high, t)
    seen.append((low, high))
threads = [threading.Thread(target=work) for _ in range(8)]
for th in threads:
    th.start()
for th in threads:
    th.join()
t = time.monotonic()
time.sleep(0.05)
print(len(seen), min(lo for lo, _ in seen), max(hi for _, hi in seen), time.monotonic() - t)
"""


@pytest.mark.docker
async def test_threads_reading_the_clock_all_see_simulated_time(
    manager: SandboxManager, sandbox_image: str, short_dir: Path
) -> None:
    spec = manager.spec_for(image=sandbox_image, run="threads", tenant="acme", run_dir=short_dir)
    offset_s = 10 * 86400
    sb = await manager.create(spec, short_dir, sim_ns=time.time_ns() + offset_s * _NS, probe=False)
    before = time.time()
    out = await sb.exec(["python3", "-c", _THREADS_SCRIPT], timeout_s=120)
    after = time.time()
    text = out.text + out.stderr.decode(errors="replace")
    assert "failed to parse FAKETIME" not in text, text[-500:]
    assert out.exit_code == 0, text[-500:]
    threads, low, high, slept = out.text.split()
    assert int(threads) == 8
    # Every call of every thread saw the simulated clock, ten days ahead of the host's.
    assert before + offset_s - 2 < float(low) <= float(high) < after + offset_s + 2, (low, high, before, after)
    assert 0.04 < float(slept) < 1
