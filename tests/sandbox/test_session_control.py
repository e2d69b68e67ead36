"""A sandbox session's control socket on its own (no container): what the ``wait``
request accepts, and that records land in the run's store."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sclated.clock import MAX_SIM_NS, ClockConfig, ClockMode, SimClock
from sclated.errors import FailedPrecondition
from sclated.model import EmbeddedModel
from sclated.runtime import Limits
from sclated.sandbox import SandboxOptions, SandboxServices, SandboxSession, SessionConfig
from sclated.store import Store

NS = 1_000_000_000
START = 1_924_992_000 * NS


class Session:
    def __init__(self, session: SandboxSession, path: Path, waits: list[int]) -> None:
        self.session = session
        self.path = path
        self.waits = waits

    async def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        reader, writer = await asyncio.open_unix_connection(str(self.path))
        try:
            writer.write((json.dumps(request) + "\n").encode())
            async with asyncio.timeout(5):
                reply: dict[str, Any] = json.loads(await reader.readline())
            return reply
        finally:
            writer.close()


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[Session]:
    store = Store(tmp_path / "db.sqlite")
    await store.open()
    services = SandboxServices(
        state_dir=tmp_path,
        daemon_id="sclated-test",
        store=store,
        model=EmbeddedModel(log_path=tmp_path / "model.log"),
        sockets_dir=Path(tempfile.mkdtemp(prefix="sc-")),
    )
    clock = SimClock(ClockConfig(ClockMode.HYBRID, start_ns=START))
    waits: list[int] = []

    async def on_wait(until_ns: int) -> int:
        waits.append(until_ns)
        return until_ns

    config = SessionConfig(
        run_key="t/r1",
        tenant="t",
        run_id="r1",
        image="sclate-sandbox",
        model_base_url="",
        model_name="",
        limits=Limits(),
        options=SandboxOptions(probe=False),
    )
    s = SandboxSession(services, config, clock=clock, leases=clock.leases, on_wait=on_wait, fail_run=lambda _: None)
    path = tmp_path / "sclate.sock"
    await s.start_control(path)
    try:
        yield Session(s, path, waits)
    finally:
        await s.close()
        await services.close()
        await store.close()
    assert not path.exists()


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"until_ns": MAX_SIM_NS + 1}, "until_ns"),
        ({"until_ns": 2**70}, "until_ns"),
        ({"for_ns": MAX_SIM_NS}, "for_ns"),
        ({"until_ns": True}, "until_ns"),  # a boolean is not a time
        ({"for_ns": 1.5}, "until_ns"),
        ({"for_ns": -1}, "until_ns"),
    ],
)
async def test_a_wait_for_a_time_no_run_can_hold_is_refused_and_never_waited_on(
    session: Session, request_: dict[str, Any], field: str
) -> None:
    # Before: 2**70 was registered as a wake-up (and journaled), then held the
    # request forever; a time past 64 bits cannot be stored in the run's rows.
    reply = await session.ask({"id": 1, "type": "wait", **request_})
    assert reply["ok"] is False and reply["reason"] == "INVALID_ARGUMENT"
    assert session.waits == []
    assert field in reply["error"] or "until_ns or a non-negative for_ns" in reply["error"]


async def test_a_wait_hands_its_time_to_the_run(session: Session) -> None:
    reply = await session.ask({"id": 1, "type": "wait", "until_ns": START + 5 * NS})
    assert reply == {"id": 1, "ok": True, "woke_ns": START + 5 * NS}
    reply = await session.ask({"id": 2, "type": "wait", "for_ns": 0})
    assert reply["ok"] and START <= session.waits[-1] <= session.session._clock.now()


async def test_start_control_twice_is_refused(session: Session) -> None:
    with pytest.raises(FailedPrecondition):
        await session.session.start_control(session.path)
