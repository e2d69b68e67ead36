"""The `retention` key and flag, and the daemon's own periodic sweep."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.daemon import Daemon, DaemonConfig, build_parser, load_config
from sclated.errors import ConfigError
from tests.api.conftest import synthetic_request


def _load(*argv: str) -> DaemonConfig:
    return load_config(build_parser().parse_args(list(argv)))


def test_the_key_and_the_flag(tmp_path: Path) -> None:
    config = tmp_path / "sclated.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\nretention = "7d"\n')
    assert _load("--config", str(config)).retention_s == 7 * 86400
    assert _load("--config", str(config), "--retention", "12h").retention_s == 12 * 3600  # flags win
    assert _load("--config", str(config), "--retention", "off").retention_s == 0
    assert _load("--state-dir", str(tmp_path)).retention_s == 0  # the default: kept forever


def test_a_bad_duration_names_the_key_and_line(tmp_path: Path) -> None:
    config = tmp_path / "sclated.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n\nretention = "a week"\n')
    with pytest.raises(ConfigError) as info:
        _load("--config", str(config))
    assert info.value.field == "retention" and "line 3" in str(info.value) and "'a week'" in str(info.value)
    config.write_text(f'state_dir = "{tmp_path / "state"}"\nretention = 7\n')
    with pytest.raises(ConfigError) as info:
        _load("--config", str(config))
    assert info.value.field == "retention" and "must be a string" in str(info.value)
    with pytest.raises(ConfigError) as info:
        _load("--state-dir", str(tmp_path), "--retention", "7 days")
    assert info.value.field == "retention"


async def test_the_daemon_sweeps_on_its_own_and_stops_sweeping_when_it_stops(tmp_path: Path) -> None:
    d = Daemon(DaemonConfig(state_dir=tmp_path / "state", listen="127.0.0.1:0", retention="1s"))
    await d.start()
    try:
        assert d.manager.history_expiry.running
        async with grpc.aio.insecure_channel(d.tcp_address or "") as ch:
            stub = pb_grpc.SclateStub(ch)
            run = await stub.CreateRun(synthetic_request())
            events = [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=run.name))]
            assert events[-1].state.state == pb.SUCCEEDED
            # Ended, then one second of retention, then at most one sweep interval (1 s).
            async with asyncio.timeout(10):
                while not (got := await stub.GetRun(pb.GetRunRequest(name=run.name))).history_expired:
                    await asyncio.sleep(0.2)
            assert got.history_expire_time.ToNanoseconds() - got.end_time.ToNanoseconds() >= 1_000_000_000
            assert await d.store.events_after(f"local/{run.name[5:]}", 0) == []
            assert d.manager.history_expiry.last is not None
    finally:
        await d.stop()
    assert not d.manager.history_expiry.running
