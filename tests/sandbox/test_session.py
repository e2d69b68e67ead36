"""SandboxSession in a real container: the clock modes inside, the model endpoint's health,
nothing left behind. No harness: the session is harness-agnostic."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import socket
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import aiodocker
import pytest

from sclated.clock import ClockConfig, ClockMode, SimClock
from sclated.errors import InvalidArgument
from sclated.model import EmbeddedModel
from sclated.runtime import Limits, build_all
from sclated.sandbox import SandboxOptions, SandboxServices, SandboxSession, SessionConfig, SessionStart
from sclated.store import Store

pytestmark = pytest.mark.docker

NS = 1_000_000_000
START = 1_924_992_000 * NS  # 2031-01-01T00:00:00Z


@pytest.fixture(scope="module")
def sandbox_image() -> None:
    asyncio.run(build_all(lambda _: None, names=["sclate-sandbox"]))


@pytest.fixture
async def services(tmp_path: Path, sandbox_image: None) -> AsyncIterator[SandboxServices]:
    store = Store(tmp_path / "db.sqlite")
    await store.open()
    svc = SandboxServices(
        state_dir=tmp_path,
        daemon_id=f"sclated-sessiontest-{tmp_path.name[-6:]}",
        store=store,
        model=EmbeddedModel(log_path=tmp_path / "model.log"),
        sockets_dir=Path(tempfile.mkdtemp(prefix="sc-")),
    )
    try:
        yield svc
    finally:
        await svc.close()
        await store.close()


def _dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def _session(
    services: SandboxServices,
    clock: SimClock,
    failures: list[str],
    *,
    run_id: str,
    grace_s: float = 120.0,
    model_url: str = "",
    options: SandboxOptions | None = None,
) -> SandboxSession:
    async def wait(until_ns: int) -> int:
        return until_ns

    config = SessionConfig(
        run_key=f"t/{run_id}",
        tenant="t",
        run_id=run_id,
        image="sclate-sandbox",
        model_base_url=model_url or _dead_url(),
        model_name="",
        limits=Limits(memory_bytes=512 * 1024**2, nano_cpus=1_000_000_000, pids=256),
        options=options or SandboxOptions(probe=False, model_grace_s=grace_s),
    )
    return SandboxSession(services, config, clock=clock, leases=clock.leases, on_wait=wait, fail_run=failures.append)


async def _containers(run_id: str) -> list[str]:
    async with aiodocker.Docker() as docker:
        found = await docker.containers.list(all=True, filters=json.dumps({"label": [f"sclate.run={run_id}"]}))
        return [c.id for c in found]


async def _date(session: SandboxSession) -> float:
    out = await session.exec(["date", "-u", "+%s.%N"], timeout_s=30)
    assert out.exit_code == 0, out.output
    return float(out.output.strip())


async def test_a_discrete_clock_freezes_the_sandbox_between_jumps(services: SandboxServices) -> None:
    clock = SimClock(ClockConfig(ClockMode.DISCRETE, start_ns=START))
    failures: list[str] = []
    session = _session(services, clock, failures, run_id="discrete")
    await session.open(SessionStart.FRESH, env=lambda endpoints: {})
    try:
        first = await _date(session)
        await asyncio.sleep(1.2)
        assert await _date(session) == first == START / NS  # it stood still for a real second
        clock.jump_to(START + 3 * 86400 * NS)
        await clock.publish()
        assert await _date(session) == (START + 3 * 86400 * NS) / NS
    finally:
        await session.close()
    assert await _containers("discrete") == [] and failures == []


async def test_a_hybrid_clock_flows_inside_from_the_run_s_time(services: SandboxServices) -> None:
    clock = SimClock(ClockConfig(ClockMode.HYBRID, start_ns=START))
    failures: list[str] = []
    session = _session(services, clock, failures, run_id="hybrid")
    await session.open(SessionStart.FRESH, env=lambda endpoints: {})
    # Where the engine cannot bound the writable layer (overlay2 on ext4), the watchdog does.
    watch = session.disk_watch
    assert (watch is None) == (services.disk_by_engine is True)
    try:
        inside = await _date(session)
        assert START / NS <= inside <= clock.now() / NS  # never ahead of the run, never behind its start
        await asyncio.sleep(1.0)
        assert await _date(session) > inside + 0.9
        assert watch is None or (watch.task is not None and not watch.task.done())
    finally:
        await session.close()
    if watch is not None:  # closing the session cancelled it: nothing runs on
        assert watch.task is None and watch.verdict is None and failures == []
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("disk-watch:")]


async def test_a_sandbox_that_writes_past_its_disk_limit_is_stopped_and_the_run_fails_naming_it(
    services: SandboxServices,
) -> None:
    clock = SimClock(ClockConfig(ClockMode.HYBRID, start_ns=START))
    failures: list[str] = []
    options = SandboxOptions(probe=False, disk_limit_gb=32 / 1024, disk_check_interval_s=0.5)
    session = _session(services, clock, failures, run_id="diskfill", options=options)
    await session.open(SessionStart.FRESH, env=lambda endpoints: {})
    fill = "dd if=/dev/zero of=/workspace/fill bs=1M count=64 conv=fsync 2>&1; echo dd-exit=$?; sleep 60"
    try:
        out = await session.exec(["sh", "-c", fill], timeout_s=90)
        if services.disk_by_engine:  # an engine that bounds the layer itself: the writer meets ENOSPC
            assert session.disk_watch is None and "No space left" in out.output, out.output
            return
        # The exec ended long before its sleep: the container was killed under it.
        (reason,) = failures
        match = re.fullmatch(
            r"the sandbox wrote (\d+) MiB \(writable layer (\d+) MiB, volumes 0 B\), over its disk limit of "
            r"32 MiB \(disk_limit_gb\); the disk watchdog stopped it",
            reason,
        )
        assert match is not None, reason
        assert 32 < int(match[1]) <= 64 and match[1] == match[2]
        assert await session.explain() == reason  # what a harness failing now is told first
        watch = session.disk_watch
        assert watch is not None and watch.task is not None
        await asyncio.wait([watch.task], timeout=30)  # the run failed first, then the kill ended
        sandbox = session._require()
        assert (await sandbox.runtime.inspect(sandbox.id)).state == "exited"
    finally:
        await session.close()
    assert await _containers("diskfill") == []


async def test_a_sped_up_realtime_clock_is_refused_before_anything_starts(services: SandboxServices) -> None:
    clock = SimClock(ClockConfig(ClockMode.REALTIME, start_ns=START, rate=2.0))
    session = _session(services, clock, [], run_id="rate2")
    with pytest.raises(InvalidArgument, match="libfaketime"):
        await session.open(SessionStart.FRESH, env=lambda endpoints: {})
    assert await _containers("rate2") == []


async def test_a_model_endpoint_unreachable_past_the_grace_fails_the_run(services: SandboxServices) -> None:
    clock = SimClock(ClockConfig(ClockMode.HYBRID, start_ns=START))
    failures: list[str] = []
    session = _session(services, clock, failures, run_id="deadmodel", grace_s=1.0)
    await session.open(SessionStart.FRESH, env=lambda endpoints: {})
    try:
        # A call from inside through the model path (the forwarder to the model socket).
        call = (
            "import urllib.request as u\n"
            "try: u.urlopen('http://127.0.0.1:18080/v1/models', timeout=10)\n"
            "except Exception as e: print(e)"
        )
        out = await session.exec(["python3", "-c", call], timeout_s=30)
        assert "502" in out.output, out.output
        for _ in range(100):
            if failures:
                break
            await asyncio.sleep(0.1)
        (reason,) = failures
        assert "stayed unreachable for more than 1 s" in reason and "see the daemon's log" in reason
    finally:
        await session.close()
    assert await _containers("deadmodel") == []


_SLOW_CLIENT = """
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1], data=json.dumps({"model": "m", "messages": []}).encode(),
                             headers={"Content-Type": "application/json", "Authorization": "Bearer " + sys.argv[2]})
try:
    urllib.request.urlopen(req, timeout=120)
except Exception as exc:
    print(exc)
"""
_KILL_PROXY = """
import os, signal
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    except OSError:
        continue
    if any(a.endswith(b"/mitmdump") for a in argv[:2]):
        os.kill(int(pid), signal.SIGKILL)
        print(pid)
"""


async def test_a_capture_proxy_that_dies_mid_call_is_started_again_and_its_call_s_lease_goes(
    services: SandboxServices,
) -> None:
    """Found by `sclated bench faults`: mitmdump killed mid-call left the call's clock lease
    held for its 15-minute TTL (the run stalled) and every later call failed."""
    from aiohttp import web

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(60)  # the call stays in flight
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    clock = SimClock(ClockConfig(ClockMode.HYBRID, start_ns=START))
    failures: list[str] = []
    session = _session(services, clock, failures, run_id="proxydies", model_url=f"http://127.0.0.1:{port}")
    await session.open(SessionStart.FRESH, env=lambda endpoints: {})
    try:
        url = session.endpoints.agent + session.endpoints.openai_prefix + "/chat/completions"
        client = f"python3 -c {shlex.quote(_SLOW_CLIENT)} {url} {session.endpoints.api_key} >/tmp/client.log 2>&1 &"
        await session.exec(["sh", "-c", client], timeout_s=30)

        def calls_held() -> list[str]:
            return [n for n in clock.leases.counts() if n.startswith("model-call:")]

        async with asyncio.timeout(30):
            while not calls_held():
                await asyncio.sleep(0.05)
        killed = await session.exec(["python3", "-c", _KILL_PROXY], timeout_s=30)
        assert killed.output.strip(), killed.output
        async with asyncio.timeout(60):
            while calls_held() or session.proxy_restarts < 1:
                await asyncio.sleep(0.1)
        assert not clock.leases.held and failures == []
        listening = await session.exec(
            ["python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 4001), 2).close()"], timeout_s=30
        )
        assert listening.exit_code == 0, listening.output  # the proxy is back
    finally:
        await session.close()
        await runner.cleanup()
    assert session.capture_report.get("proxy_restarts") == 1
    assert await _containers("proxydies") == []
