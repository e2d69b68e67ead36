"""Host paths in a run are confined to the daemon's data roots (a real daemon on port 0)."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from adapters import BenchmarkInfo, ScenarioConfig
from adapters.synthetic import SyntheticBenchmark, SyntheticScenario
from sclated.daemon import Daemon, DaemonConfig
from sclated.runs import Registry, default_registry
from tests.api.conftest import TOKENS, synthetic_request
from tests.api.test_api import expect_error

OPTIONS = sorted(
    (name, key)
    for name, bench in default_registry().benchmarks.items()
    for key in bench.info.path_options | bench.info.data_file_options
)


class _SyntheticFromData:
    """Test double: the synthetic benchmark, taking a data_dir (the path checks are the daemon's)."""

    @property
    def info(self) -> BenchmarkInfo:
        return dataclasses.replace(SyntheticBenchmark().info, name="synthetic-data")

    def load(self, config: ScenarioConfig) -> SyntheticScenario:
        return SyntheticBenchmark().load(dataclasses.replace(config, data_dir=None))


def _registry() -> Registry:
    registry = default_registry()
    registry.add_benchmark(_SyntheticFromData())
    return registry


@dataclass
class Site:
    base: Path
    shared: Path
    """The daemon's data root."""
    alice: Path
    """Alice's own root (inside the shared one)."""
    old: Path
    """A root only the first daemon has."""
    secret: Path

    @property
    def state(self) -> Path:
        return self.base / "state"

    def config(self, *, narrowed: bool = False, **kw: Any) -> DaemonConfig:
        tokens = self.base / "tokens"
        tokens.write_text("".join(f"{t} {tenant}\n" for tenant, t in TOKENS.items()))
        return DaemonConfig(
            state_dir=self.state,
            listen="127.0.0.1:0",
            tokens_file=tokens,
            data_roots=(self.shared,) if narrowed else (self.shared, self.old),
            tenant_data_roots={"alice": (self.alice,)},
            **kw,
        )


@pytest.fixture
def site(tmp_path: Path) -> Site:
    s = Site(tmp_path, tmp_path / "shared", tmp_path / "shared" / "alice", tmp_path / "old", tmp_path / "secret")
    for p in (s.shared / "bench", s.alice / "mine", s.old, s.secret):
        p.mkdir(parents=True)
    (s.secret / "key").write_text("hunter2")
    (s.shared / "escape").symlink_to(s.secret)
    return s


@dataclass
class Client:
    daemon: Daemon
    stub: pb_grpc.SclateStub

    def md(self, who: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {TOKENS[who]}"),)

    async def create(self, who: str, data_dir: str = "", benchmark: str = "synthetic-data", **options: Any) -> pb.Run:
        req = synthetic_request()
        req.run.benchmark.name = benchmark
        req.run.benchmark.data_dir = data_dir
        if benchmark != "synthetic-data":
            req.run.benchmark.ClearField("options")
        req.run.benchmark.options.update(options)
        run: pb.Run = await self.stub.CreateRun(req, metadata=self.md(who))
        return run

    async def names(self, who: str) -> list[str]:
        listed = await self.stub.ListRuns(pb.ListRunsRequest(), metadata=self.md(who))
        return [r.name for r in listed.runs]


async def _serving(config: DaemonConfig) -> AsyncIterator[Client]:
    d = Daemon(config, registry=_registry())
    await d.start()
    try:
        async with grpc.aio.insecure_channel(d.tcp_address or "") as ch:
            yield Client(d, pb_grpc.SclateStub(ch))
    finally:
        await d.stop()


@pytest.fixture
async def client(site: Site) -> AsyncIterator[Client]:
    async for c in _serving(site.config()):
        yield c


def _outside(site: Site) -> list[str]:
    """Paths bob may not name: outside, through '..' and symlinks, the state directory, alice's."""
    (site.state / "runs" / "alice").mkdir(parents=True, exist_ok=True)
    return [
        "/etc",
        "/nonexistent-xyz",
        str(site.secret / "key"),
        f"{site.shared}/bench/../../secret",
        str(site.shared / "escape"),
        str(site.shared / "escape" / "key"),
        str(site.state),
        str(site.state / "runs" / "alice"),
        str(site.alice / "mine"),
    ]


async def test_a_path_outside_the_roots_is_denied_alike_and_nothing_is_stored(client: Client, site: Site) -> None:
    details = set()
    for path in _outside(site):
        err = await expect_error(client.create("bob", path), grpc.StatusCode.PERMISSION_DENIED)
        assert err["sclate-field"] == "run.benchmark.data_dir", (path, err)
        assert err["sclate-reason"] == "PERMISSION_DENIED"
        assert path not in err["details"] and "hunter2" not in err["details"]
        details.add(err["details"])
    # /etc and /nonexistent-xyz (and every other one) get the same answer.
    assert len(details) == 1, details
    assert "outside the data roots" in details.pop()
    assert await client.names("bob") == [] and await client.names("alice") == []


async def test_a_path_inside_the_roots_makes_a_run(client: Client, site: Site) -> None:
    run = await client.create("bob", str(site.shared / "bench"))
    assert run.benchmark.data_dir == str(site.shared / "bench")
    assert await client.names("bob") == [run.name]
    # <state_dir>/data is not a root once data_roots are set.
    (site.state / "data").mkdir(exist_ok=True)
    await expect_error(client.create("bob", str(site.state / "data")), grpc.StatusCode.PERMISSION_DENIED)


async def test_a_tenant_with_its_own_roots(client: Client, site: Site) -> None:
    mine = await client.create("alice", str(site.alice / "mine"))
    assert await client.names("alice") == [mine.name]
    # Alice's roots replace the shared ones for her.
    err = await expect_error(client.create("alice", str(site.shared / "bench")), grpc.StatusCode.PERMISSION_DENIED)
    assert err["sclate-field"] == "run.benchmark.data_dir" and "'alice'" in err["details"]
    # Bob cannot reach inside hers, although the shared root holds it.
    await expect_error(client.create("bob", str(site.alice / "mine")), grpc.StatusCode.PERMISSION_DENIED)
    assert await client.names("bob") == []


async def test_a_relative_path_is_invalid(client: Client) -> None:
    err = await expect_error(client.create("bob", "bench"), grpc.StatusCode.INVALID_ARGUMENT)
    assert err["sclate-field"] == "run.benchmark.data_dir" and "absolute" in err["details"]


@pytest.mark.parametrize(("benchmark", "option"), OPTIONS)
async def test_every_declared_path_option_is_confined(client: Client, site: Site, benchmark: str, option: str) -> None:
    details = set()
    for path in ("/etc", "/nonexistent-xyz", str(site.state / "sclated.db")):
        err = await expect_error(
            client.create("bob", str(site.shared / "bench"), benchmark, **{option: path}),
            grpc.StatusCode.PERMISSION_DENIED,
        )
        assert err["sclate-field"] == f"run.benchmark.options.{option}", err
        details.add(err["details"])
    assert len(details) == 1, details
    assert await client.names("bob") == []


async def test_the_default_roots_are_the_state_data_dir_and_builtin_data(tmp_path: Path) -> None:
    async for c in _serving(DaemonConfig(state_dir=tmp_path / "state", listen="127.0.0.1:0")):
        data = tmp_path / "state" / "data"
        assert data.is_dir()  # made at start-up, for the operator to fill
        (data / "bench").mkdir()
        req = synthetic_request()
        req.run.benchmark.name = "synthetic-data"
        req.run.benchmark.data_dir = str(data / "bench")
        await c.stub.CreateRun(req)
        builtin = c.daemon.data_roots.builtin
        assert builtin and all(p.is_dir() for p in builtin)
        req.run.benchmark.data_dir = str(builtin[0])
        await c.stub.CreateRun(req)
        for path in ("/work", str(tmp_path), str(tmp_path / "state" / "runs")):
            req.run.benchmark.data_dir = path
            await expect_error(c.stub.CreateRun(req), grpc.StatusCode.PERMISSION_DENIED)
        assert len((await c.stub.ListRuns(pb.ListRunsRequest())).runs) == 2


async def test_narrowed_roots_refuse_a_resume_and_fail_a_restarted_run(site: Site) -> None:
    async for c in _serving(site.config(drain_grace_s=0)):
        req = synthetic_request(days=20, events=5, turn_ms=500)
        req.run.benchmark.name = "synthetic-data"
        req.run.benchmark.data_dir = str(site.old)
        run = await c.stub.CreateRun(req, metadata=c.md("bob"))
        async for ev in c.stub.WatchRun(pb.WatchRunRequest(name=run.name), metadata=c.md("bob")):
            if ev.WhichOneof("kind") == "state" and ev.state.state == pb.RUNNING:
                break
    # The daemon stopped with the run running: INTERRUPTED. Its root is gone now.
    async for c in _serving(site.config(narrowed=True)):
        got = await c.stub.GetRun(pb.GetRunRequest(name=run.name), metadata=c.md("bob"))
        assert got.state == pb.INTERRUPTED
        err = await expect_error(
            c.stub.ResumeRun(pb.ResumeRunRequest(name=run.name), metadata=c.md("bob")),
            grpc.StatusCode.PERMISSION_DENIED,
        )
        assert err["sclate-field"] == "run.benchmark.data_dir"
        got = await c.stub.GetRun(pb.GetRunRequest(name=run.name), metadata=c.md("bob"))
        assert got.state == pb.INTERRUPTED
    # As if the daemon had died while it ran: a restarted daemon resumes it, and fails it.
    with sqlite3.connect(site.state / "sclated.db") as db:
        db.execute("UPDATE runs SET state = 'RUNNING'")
    async for c in _serving(site.config(narrowed=True)):
        events = [ev async for ev in c.stub.WatchRun(pb.WatchRunRequest(name=run.name), metadata=c.md("bob"))]
        assert events[-1].state.state == pb.FAILED
        assert events[-1].state.reason.startswith("run.benchmark.data_dir is outside the data roots")
        assert str(site.old) not in events[-1].state.reason


async def test_narrowed_roots_refuse_a_branch_and_a_restore(site: Site) -> None:
    async for c in _serving(site.config()):
        req = synthetic_request(run_id="source", days=3, events=2, turn_ms=250)
        req.run.benchmark.name = "synthetic-data"
        req.run.benchmark.data_dir = str(site.old)
        run = await c.stub.CreateRun(req, metadata=c.md("bob"))
        snapshot = ""
        async for ev in c.stub.WatchRun(pb.WatchRunRequest(name=run.name), metadata=c.md("bob")):
            if ev.WhichOneof("kind") == "verdict" and not snapshot:
                saved = await c.stub.SaveSnapshot(
                    pb.SaveSnapshotRequest(run=run.name, snapshot_id="mid"), metadata=c.md("bob")
                )
                snapshot = saved.name
        assert snapshot
    async for c in _serving(site.config(narrowed=True)):
        for call in (
            c.stub.BranchRun(pb.BranchRunRequest(snapshot=snapshot, count=2, group_id="g1"), metadata=c.md("bob")),
            c.stub.RestoreSnapshot(
                pb.RestoreSnapshotRequest(snapshot=snapshot, new_run_id="copy"), metadata=c.md("bob")
            ),
            c.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snapshot), metadata=c.md("bob")),
        ):
            err = await expect_error(call, grpc.StatusCode.PERMISSION_DENIED)
            assert err["sclate-field"] == "run.benchmark.data_dir"
        assert await c.names("bob") == [run.name]
        got = await c.stub.GetRun(pb.GetRunRequest(name=run.name), metadata=c.md("bob"))
        assert got.state == pb.SUCCEEDED
