"""Resource limits are enforced: a memory hog is OOM-killed and a fork bomb hits the
pids limit, inside the sandbox, while the host keeps working; a disk limit is enforced
or refused, never ignored; what a sandbox wrote can be measured (what the disk watchdog reads)."""

from __future__ import annotations

import asyncio

import pytest

from sclated.errors import FailedPrecondition, InvalidArgument
from sclated.runtime import LABEL_RUN, DockerRuntime, Limits, SandboxSpec

pytestmark = pytest.mark.docker


async def _started(runtime: DockerRuntime, image: str, run: str, limits: Limits) -> str:
    info = await runtime.create(SandboxSpec(image=image, run=run, tenant="acme", limits=limits))
    await runtime.start(info.id)
    return info.id


async def test_memory_hog_is_oom_killed(runtime: DockerRuntime, sandbox_image: str) -> None:
    cid = await _started(runtime, sandbox_image, "hog", Limits(memory_bytes=64 << 20))
    hog = "x = []\nwhile True:\n    x.append(bytearray(8 << 20))\n"
    r = await runtime.exec(cid, ["python3", "-c", hog], timeout_s=60)
    assert not r.timed_out
    assert r.exit_code == 137  # SIGKILL from the cgroup's OOM killer
    # Only the hog died: the sandbox still runs, and the host noticed nothing.
    assert (await runtime.inspect(cid)).state == "running"
    assert (await runtime.exec(cid, ["true"])).ok
    stats = await runtime.stats(cid)
    assert stats.memory_limit_bytes == 64 << 20
    assert stats.memory_bytes < 64 << 20


async def test_fork_bomb_hits_pids_limit(runtime: DockerRuntime, sandbox_image: str) -> None:
    limit = 64
    cid = await _started(runtime, sandbox_image, "bomb", Limits(pids=limit))
    # Forks until the kernel refuses; the children stay, holding the sandbox at its limit.
    bomb = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(10000):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(120); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('blocked', n, e.errno, flush=True)\n"
    )
    r = await runtime.exec(cid, ["python3", "-c", bomb], timeout_s=60)
    out = r.text.split()
    assert out[0] == "blocked", r
    assert int(out[1]) < limit  # the limit stopped it, not the loop bound
    assert int(out[2]) == 11  # EAGAIN
    stats = await runtime.stats(cid)
    assert limit - 8 <= stats.pids <= limit
    # Contained: the host still starts processes while the sandbox is full.
    proc = await asyncio.create_subprocess_exec("true")
    assert await proc.wait() == 0
    # The sandbox is at its limit but still removable (the fixture removes it).


async def test_a_disk_limit_is_enforced_or_refused_clearly(runtime: DockerRuntime, sandbox_image: str) -> None:
    """Never silently ignored: an engine that cannot bound a container's disk (overlay2 on
    anything but xfs with pquota) refuses the sandbox, naming what to do."""
    with pytest.raises(InvalidArgument, match="below 16 MiB"):
        Limits(disk_bytes=1 << 20)
    spec = SandboxSpec(image=sandbox_image, run="disk", tenant="acme", limits=Limits(disk_bytes=64 << 20))
    try:
        info = await runtime.create(spec)
    except FailedPrecondition as exc:
        assert exc.reason == "DISK_LIMIT_UNSUPPORTED"
        assert "pquota" in exc.message and "limits.disk_bytes" in exc.message
        assert await runtime.list_containers({LABEL_RUN: "disk"}) == []
        return
    await runtime.start(info.id)
    fill = "dd if=/dev/zero of=/var/tmp/fill bs=1M count=128 conv=fsync 2>&1; echo exit=$?"
    r = await runtime.exec(info.id, ["sh", "-c", fill], timeout_s=60)
    assert "No space left" in r.text or "quota" in r.text.lower(), r.text
    assert "exit=0" not in r.text


async def test_the_writable_layer_is_measured(runtime: DockerRuntime, sandbox_image: str) -> None:
    """What sclated.sandbox's disk watchdog reads where the engine cannot bound the disk."""
    cid = await _started(runtime, sandbox_image, "layer", Limits())
    before = await runtime.writable_layer_bytes(cid)
    r = await runtime.exec(cid, ["sh", "-c", "dd if=/dev/zero of=/var/tmp/w bs=1M count=8 2>&1"], timeout_s=60)
    assert r.ok, r.text
    after = await runtime.writable_layer_bytes(cid)
    assert after - before >= 8 << 20
    await runtime.exec(cid, ["rm", "/var/tmp/w"], timeout_s=30)
    assert await runtime.writable_layer_bytes(cid) < after  # a measure of now, not a high-water mark
