"""A snapshot's freeze and commands in the sandbox never overlap (FreezeGate, in memory)."""

from __future__ import annotations

import asyncio

from sclated.sandbox._session import FreezeGate


async def test_a_freeze_waits_for_running_commands_and_holds_new_ones() -> None:
    gate = FreezeGate()
    log: list[str] = []
    job_may_end = asyncio.Event()

    async def job(name: str, until: asyncio.Event | None = None) -> None:
        async with gate.running():
            log.append(f"{name} start")
            if until is not None:
                await until.wait()
            log.append(f"{name} end")

    async def snapshot() -> None:
        async with gate.frozen():
            log.append("frozen")
            await asyncio.sleep(0.01)
            log.append("thawed")

    long_job = asyncio.create_task(job("tick", job_may_end))
    await asyncio.sleep(0)
    snap = asyncio.create_task(snapshot())
    await asyncio.sleep(0.01)
    late = asyncio.create_task(job("consolidate"))
    await asyncio.sleep(0.01)
    # The freeze waits for the running job; the job that came later waits for the freeze.
    assert log == ["tick start"]
    job_may_end.set()
    await asyncio.gather(long_job, snap, late)
    assert log == ["tick start", "tick end", "frozen", "thawed", "consolidate start", "consolidate end"]


async def test_a_cancelled_freeze_lets_commands_go_on() -> None:
    gate = FreezeGate()
    hold = asyncio.Event()

    async def job() -> None:
        async with gate.running():
            await hold.wait()

    running = asyncio.create_task(job())
    await asyncio.sleep(0)
    freeze = asyncio.create_task(gate.frozen().__aenter__())
    await asyncio.sleep(0.01)
    freeze.cancel()
    await asyncio.sleep(0)
    # A new command is not kept waiting by a freeze that gave up.
    async with asyncio.timeout(1):
        async with gate.running():
            pass
    hold.set()
    await running
