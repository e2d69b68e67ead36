"""An in-process daemon on port 0 and an aio client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.daemon import Daemon, DaemonConfig

TOKENS = {"alice": "tok-alice-0123456789abcdef", "bob": "tok-bob-0123456789abcdefgh"}


@dataclass
class Api:
    daemon: Daemon
    stub: pb_grpc.SclateStub
    channel: grpc.aio.Channel
    token: str | None = None

    def md(self, token: str | None = None) -> tuple[tuple[str, str], ...]:
        tok = token if token is not None else self.token
        return (("authorization", f"Bearer {tok}"),) if tok else ()

    async def create(self, **kw: Any) -> pb.Run:
        run: pb.Run = await self.stub.CreateRun(synthetic_request(**kw), metadata=self.md())
        return run

    async def watch_all(
        self, name: str, after: int = 0, token: str | None = None
    ) -> list[pb.RunEvent]:
        return [
            ev
            async for ev in self.stub.WatchRun(
                pb.WatchRunRequest(name=name, after_seq=after), metadata=self.md(token)
            )
        ]


def synthetic_request(
    days: int = 1,
    events: int = 2,
    turn_ms: int = 1,
    request_id: str = "",
    run_id: str = "",
    **agent: Any,
) -> pb.CreateRunRequest:
    run = pb.Run(
        benchmark=pb.BenchmarkSpec(name="synthetic"), agent=pb.AgentSpec(harness="scripted")
    )
    run.benchmark.options.update({"days": days, "events_per_day": events})
    run.agent.options.update({"turn_ms": turn_ms, **agent})
    return pb.CreateRunRequest(run=run, request_id=request_id, run_id=run_id)


async def _start(tmp_path: Path, tokens: bool) -> Daemon:
    tokens_file = None
    if tokens:
        tokens_file = tmp_path / "tokens"
        tokens_file.write_text(
            "".join(f"{t} {tenant}\n" for tenant, t in TOKENS.items()) + "# comment\n"
        )
    d = Daemon(
        DaemonConfig(state_dir=tmp_path / "state", listen="127.0.0.1:0", tokens_file=tokens_file)
    )
    await d.start()
    return d


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    d = await _start(tmp_path, tokens=False)
    async with grpc.aio.insecure_channel(d.tcp_address or "") as ch:
        yield Api(d, pb_grpc.SclateStub(ch), ch)
    await d.stop()


@pytest.fixture
async def tenant_api(tmp_path: Path) -> AsyncIterator[Callable[[str | None], Api]]:
    d = await _start(tmp_path, tokens=True)
    async with grpc.aio.insecure_channel(d.tcp_address or "") as ch:
        stub = pb_grpc.SclateStub(ch)
        yield lambda who: Api(d, stub, ch, TOKENS[who] if who else None)
    await d.stop()
