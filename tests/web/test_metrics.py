"""The daemon's Prometheus metrics, moved by real parts: an in-process daemon's runs and
API calls, a real SQLite store, a real capture sink, a real sandbox session start. Each
test reads the rendered text back with prometheus_client's own parser."""

from __future__ import annotations

import collections
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from adapters.scripted import ScriptedAgent
from sclated.api import LOCAL_TENANT
from sclated.capture import CaptureSink, MemoryRecordStore
from sclated.clock import ClockConfig, ClockMode, LeaseTable, SimClock
from sclated.daemon import Daemon, DaemonConfig
from sclated.errors import FailedPrecondition, SclateError
from sclated.model import EmbeddedModel
from sclated.runs import RunManager, RunWorker
from sclated.runtime import Limits
from sclated.sandbox import SandboxOptions, SandboxServices, SandboxSession, SessionConfig, SessionStart
from sclated.store import EventRow, RunRow, Store, WriteBatch
from sclated.web import MAX_LABEL_VALUES, RUN_STATES, DaemonMetrics
from tests.api.conftest import Api
from tests.api.test_api import expect_error
from tests.runs.capture_records import call
from tests.runs.doubles import NullSink, synthetic_with

Labels = tuple[tuple[str, str], ...]


class Scrape:
    """One rendering of the metrics, parsed: sample values by name and labels."""

    def __init__(self, metrics: DaemonMetrics) -> None:
        self.values: dict[tuple[str, Labels], float] = {}
        for family in text_string_to_metric_families(metrics.render().decode()):
            for s in family.samples:
                self.values[(s.name, tuple(sorted(s.labels.items())))] = s.value

    def has(self, name: str, **labels: str) -> bool:
        return (name, tuple(sorted(labels.items()))) in self.values

    def get(self, name: str, **labels: str) -> float:
        """The sample with exactly these labels; 0 when there is none."""
        return self.values.get((name, tuple(sorted(labels.items()))), 0.0)

    def by(self, name: str, label: str) -> dict[str, float]:
        """The samples of ``name`` by the value of ``label``."""
        return {dict(labels)[label]: v for (n, labels), v in self.values.items() if n == name}

    def total(self, name: str) -> float:
        return sum(v for (n, _), v in self.values.items() if n == name)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    d = Daemon(DaemonConfig(state_dir=tmp_path / "state", listen="127.0.0.1:0"))
    await d.start()
    async with grpc.aio.insecure_channel(d.tcp_address or "") as ch:
        yield Api(d, pb_grpc.SclateStub(ch), ch)
    await d.stop()


# -- the runs room, the scheduler, the clock and the API, through a real run ------------------------


async def test_a_run_moves_the_fires_jumps_deliveries_runs_store_and_api_metrics(api: Api) -> None:
    metrics = api.daemon.metrics
    await expect_error(api.stub.GetRun(pb.GetRunRequest(name="runs/nope")), grpc.StatusCode.NOT_FOUND)
    # Turns of a second: the first prompt's turn is surely in flight when its fire is watched.
    run = await api.create(days=2, events=2, turn_ms=1000)
    events: list[pb.RunEvent] = []
    during: Scrape | None = None
    first_watch = api.stub.WatchRun(pb.WatchRunRequest(name=run.name))
    async for ev in first_watch:
        events.append(ev)
        if ev.WhichOneof("kind") == "fire" and "deliver_prompt" in ev.fire.effects:
            during = Scrape(metrics)
            break
    first_watch.cancel()  # the client goes away mid-stream
    assert during is not None, "no prompt was fired"
    assert during.get("sclate_runs_executing") == 1
    assert during.get("sclate_runs", tenant=LOCAL_TENANT, state="RUNNING") == 1
    assert during.get("sclate_leases_held", kind="turn") >= 1
    assert during.get("sclate_api_streams_open", method="WatchRun") == 1
    events += await api.watch_all(run.name, after=events[-1].seq)
    assert events[-1].state.state == pb.SUCCEEDED

    after = Scrape(metrics)
    fires = [ev.fire for ev in events if ev.WhichOneof("kind") == "fire"]
    jumps = [ev.jump for ev in events if ev.WhichOneof("kind") == "jump"]
    turns = [ev for ev in events if ev.WhichOneof("kind") == "turn"]
    assert fires and jumps and turns
    # One count per fire, under its first effect's kind.
    by_kind = collections.Counter(f.effects[0] if f.effects else "none" for f in fires)
    assert after.by("sclate_scheduler_fires_total", "kind") == {k: float(n) for k, n in by_kind.items()}
    assert after.get("sclate_scheduler_fire_lateness_seconds_count") == len(fires)
    assert after.get("sclate_clock_jumps_total") == len(jumps)
    skipped = sum(j.to_time.ToNanoseconds() - j.from_time.ToNanoseconds() for j in jumps) / 1e9
    assert after.get("sclate_clock_skipped_seconds_total") == pytest.approx(skipped)
    # The scripted agent says when it received each message: every turn is a measured delivery.
    assert after.get("sclate_delivery_delay_seconds_count") == len(turns)
    assert after.get("sclate_delivery_delay_seconds_sum") > 0

    assert after.get("sclate_runs", tenant=LOCAL_TENANT, state="SUCCEEDED") == 1
    for state in set(RUN_STATES) - {"SUCCEEDED"}:
        assert after.has("sclate_runs", tenant=LOCAL_TENANT, state=state)
        assert after.get("sclate_runs", tenant=LOCAL_TENANT, state=state) == 0
    assert after.get("sclate_runs_executing") == 0
    assert after.get("sclate_admission_queue_runs") == 0
    assert after.total("sclate_leases_held") == 0

    # Every event was a row of a committed transaction.
    assert after.get("sclate_store_commit_records_sum") >= len(events)
    assert after.get("sclate_store_commit_seconds_count") == after.get("sclate_store_commit_records_count") > 0
    assert after.get("sclate_store_database_bytes") > 0

    assert after.get("sclate_api_requests_total", method="GetRun", code="NOT_FOUND") == 1
    assert after.get("sclate_api_requests_total", method="CreateRun", code="OK") == 1
    # The watch broken off above ended CANCELLED; the second ran to the run's end.
    assert after.get("sclate_api_requests_total", method="WatchRun", code="OK") == 1
    assert after.get("sclate_api_requests_total", method="WatchRun", code="CANCELLED") == 1
    assert after.get("sclate_api_streams_open", method="WatchRun") == 0
    assert after.get("sclate_api_requests_total", method="GetRun", code="OK") == 0


async def test_runs_by_state_follow_creates_cancels_and_deletes_and_agree_with_the_store(api: Api) -> None:
    metrics, manager = api.daemon.metrics, api.daemon.manager
    done = await api.create(days=1, events=1)
    await api.watch_all(done.name)
    slow = await api.create(days=3, events=2, turn_ms=60_000)
    await api.stub.CancelRun(pb.CancelRunRequest(name=slow.name))
    await api.watch_all(slow.name)
    scrape = Scrape(metrics)
    assert scrape.get("sclate_runs", tenant=LOCAL_TENANT, state="SUCCEEDED") == 1
    assert scrape.get("sclate_runs", tenant=LOCAL_TENANT, state="CANCELLED") == 1
    assert manager.state_counts() == await api.daemon.store.state_counts()

    await api.stub.DeleteRun(pb.DeleteRunRequest(name=done.name))
    scrape = Scrape(metrics)
    assert scrape.get("sclate_runs", tenant=LOCAL_TENANT, state="SUCCEEDED") == 0
    assert scrape.get("sclate_runs", tenant=LOCAL_TENANT, state="CANCELLED") == 1
    assert manager.state_counts() == await api.daemon.store.state_counts() == {(LOCAL_TENANT, "CANCELLED"): 1}


async def test_a_restarted_daemon_shows_the_runs_its_store_holds(tmp_path: Path) -> None:
    config = DaemonConfig(state_dir=tmp_path / "state", listen="127.0.0.1:0")
    first = Daemon(config)
    await first.start()
    try:
        async with grpc.aio.insecure_channel(first.tcp_address or "") as ch:
            api = Api(first, pb_grpc.SclateStub(ch), ch)
            await api.watch_all((await api.create(days=1, events=1)).name)
    finally:
        await first.stop()
    second = Daemon(config)
    await second.start()
    try:
        scrape = Scrape(second.metrics)
        assert scrape.get("sclate_runs", tenant=LOCAL_TENANT, state="SUCCEEDED") == 1
        assert scrape.get("sclate_api_requests_total", method="CreateRun", code="OK") == 0  # a new process counts anew
    finally:
        await second.stop()


async def test_snapshots_saved_and_restored_are_counted(api: Api) -> None:
    metrics = api.daemon.metrics
    run = await api.create(run_id="source", days=3, events=2, turn_ms=250)
    snap: pb.Snapshot | None = None
    async for ev in api.stub.WatchRun(pb.WatchRunRequest(name=run.name)):
        if ev.WhichOneof("kind") == "verdict":
            snap = await api.stub.SaveSnapshot(pb.SaveSnapshotRequest(run=run.name, snapshot_id="s1"))
            break
    assert snap is not None
    branch = await api.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snap.name, new_run_id="branch"))
    scrape = Scrape(metrics)
    assert scrape.by("sclate_snapshots_total", "outcome") == {"saved": 1.0, "restored": 1.0, "failed": 0.0}
    # A snapshot of a run that is not running is refused before anything is taken: nothing counted.
    await api.stub.CancelRun(pb.CancelRunRequest(name=run.name))
    await api.watch_all(run.name)
    await expect_error(
        api.stub.SaveSnapshot(pb.SaveSnapshotRequest(run=run.name, snapshot_id="s2")),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    await api.stub.CancelRun(pb.CancelRunRequest(name=branch.name))
    assert Scrape(metrics).by("sclate_snapshots_total", "outcome") == {"saved": 1.0, "restored": 1.0, "failed": 0.0}
    # Restored into its own run, the ended source is PENDING again: counted, and moved from CANCELLED.
    await api.stub.RestoreSnapshot(pb.RestoreSnapshotRequest(snapshot=snap.name))
    scrape = Scrape(metrics)
    assert scrape.get("sclate_snapshots_total", outcome="restored") == 2
    assert scrape.get("sclate_runs", tenant=LOCAL_TENANT, state="CANCELLED") == 1  # the branch
    await api.stub.CancelRun(pb.CancelRunRequest(name=run.name))
    manager = api.daemon.manager
    assert manager.state_counts() == await api.daemon.store.state_counts() == {(LOCAL_TENANT, "CANCELLED"): 2}


async def test_a_snapshot_that_cannot_be_taken_is_counted_as_failed(tmp_path: Path) -> None:
    metrics = DaemonMetrics(process=False)
    registry, spec = synthetic_with("scripted", ScriptedAgent, days=1, events_per_day=1)
    store = Store(tmp_path / "state.db")
    await store.open()
    try:
        manager = RunManager(store, registry, runs_dir=tmp_path / "runs", observer=metrics)
        # A real worker that was never started: it has no agent ready to save.
        worker = RunWorker("t/r1", spec, registry, NullSink())
        with pytest.raises(FailedPrecondition, match="starting or stopping"):
            await manager.snapshots.save("t/r1", "t", worker, "s1")
    finally:
        await store.close()
    assert Scrape(metrics).by("sclate_snapshots_total", "outcome") == {"saved": 0.0, "restored": 0.0, "failed": 1.0}
    assert not (tmp_path / "runs" / "t" / "r1" / "snapshots" / "s1").exists()


# -- the store --------------------------------------------------------------------------------------


async def test_a_store_commit_is_timed_and_sized_in_records(tmp_path: Path) -> None:
    metrics = DaemonMetrics(process=False)
    store = Store(tmp_path / "state.db", observer=metrics)
    await store.open()
    try:
        assert Scrape(metrics).get("sclate_store_database_bytes") > 0  # measured at open
        batch = WriteBatch()
        batch.inserts.append(RunRow(name="t/r1", tenant="t", spec={}, state="PENDING", create_ns=1, seq=1))
        batch.events += [EventRow("t/r1", i, "state", 0, 0, {}) for i in range(1, 4)]
        batch.update_run("t/r1", last_event_seq=3)
        await store.write(batch)
        scrape = Scrape(metrics)
        assert scrape.get("sclate_store_commit_records_count") == 1
        assert scrape.get("sclate_store_commit_records_sum") == 5  # 1 insert, 3 events, 1 run update
        assert scrape.get("sclate_store_commit_records_bucket", le="5.0") == 1
        assert scrape.get("sclate_store_commit_records_bucket", le="2.0") == 0
        assert scrape.get("sclate_store_commit_seconds_count") == 1
        assert scrape.get("sclate_store_commit_seconds_sum") > 0
        # A call record is a commit of one row.
        await store.put_call("t/r1", "c1", "agent", {"call_id": "c1"})
        assert Scrape(metrics).get("sclate_store_commit_records_sum") == 6
    finally:
        await store.close()


# -- captured model calls ---------------------------------------------------------------------------


async def test_a_captured_call_is_counted_once_with_its_tokens_and_latency_even_if_redelivered() -> None:
    metrics = DaemonMetrics(process=False)
    sink = CaptureSink(MemoryRecordStore(), LeaseTable(), observer=metrics)
    ok = call("t/r1", "c1", t=0, prompt=[1, 2, 3, 4], completion=[5, 6], role="memory")
    assert await sink.on_record("t/r1", {"record": ok}) == {"stored": True}
    assert await sink.on_record("t/r1", {"record": ok}) == {"stored": False}  # the proxy sent it again
    failed = call("t/r1", "c2", t=1, prompt=[1], completion=None, error="connection refused")
    await sink.on_record("t/r1", {"record": failed})
    scrape = Scrape(metrics)
    assert scrape.get("sclate_model_calls_total", role="memory", outcome="ok") == 1
    assert scrape.get("sclate_model_prompt_tokens_total", role="memory", outcome="ok") == 4
    assert scrape.get("sclate_model_completion_tokens_total", role="memory", outcome="ok") == 2
    assert scrape.get("sclate_model_call_seconds_count", role="memory") == 1
    assert scrape.get("sclate_model_call_seconds_sum", role="memory") == pytest.approx(0.005)
    # A failed call counts under its cause, with no tokens.
    assert scrape.get("sclate_model_calls_total", role="agent", outcome="unreachable") == 1
    assert not scrape.has("sclate_model_prompt_tokens_total", role="agent", outcome="unreachable")


async def test_roles_from_a_sandbox_cannot_grow_the_metrics_without_bound() -> None:
    metrics = DaemonMetrics(process=False)
    sink = CaptureSink(MemoryRecordStore(), LeaseTable(), observer=metrics)
    extra = 10
    for i in range(MAX_LABEL_VALUES + extra):
        rec = call("t/r1", f"c{i}", t=i, prompt=[1], completion=[2], role=f"role-{i}")
        await sink.on_record("t/r1", {"record": rec})
    roles = Scrape(metrics).by("sclate_model_calls_total", "role")
    assert len(roles) == MAX_LABEL_VALUES + 1
    assert roles["other"] == extra
    assert roles["role-0"] == 1


# -- sandbox starts ---------------------------------------------------------------------------------


async def test_a_sandbox_start_that_fails_is_counted_as_failed(tmp_path: Path) -> None:
    metrics = DaemonMetrics(process=False)
    store = Store(tmp_path / "db.sqlite")
    await store.open()
    services = SandboxServices(
        state_dir=tmp_path,
        daemon_id=f"sclated-metricstest-{tmp_path.name[-6:]}",
        store=store,
        model=EmbeddedModel(log_path=tmp_path / "model.log"),
        sockets_dir=Path(tempfile.mkdtemp(prefix="sm-")),
        observer=metrics,
    )
    clock = SimClock(ClockConfig(ClockMode.DISCRETE, start_ns=1_924_992_000 * 10**9))

    async def wait(until_ns: int) -> int:
        return until_ns

    session = SandboxSession(
        services,
        SessionConfig(
            run_key="t/nosuch",
            tenant="t",
            run_id="nosuch",
            # No image has this name: the start fails after the engine, bridge and socket are up.
            image="sclate-no-such-image",
            model_base_url="http://127.0.0.1:9",
            model_name="",
            limits=Limits(memory_bytes=256 * 1024**2, nano_cpus=1_000_000_000, pids=64),
            options=SandboxOptions(probe=False),
        ),
        clock=clock,
        leases=clock.leases,
        on_wait=wait,
        fail_run=lambda reason: None,
    )
    try:
        with pytest.raises(SclateError):
            await session.open(SessionStart.FRESH, env=lambda endpoints: {})
    finally:
        await services.close()
        await store.close()
    scrape = Scrape(metrics)
    assert scrape.get("sclate_sandbox_starts_total", mode="fresh", outcome="failed") == 1
    assert scrape.get("sclate_sandbox_starts_total", mode="fresh", outcome="started") == 0
    assert scrape.get("sclate_sandbox_start_seconds_count", mode="fresh") == 0


# -- the metrics themselves ---------------------------------------------------------------------------


def test_each_daemon_has_its_own_registry_and_serves_the_text_format() -> None:
    one, two = DaemonMetrics(process=False), DaemonMetrics()
    one.on_jump(86_400.0)
    assert Scrape(one).get("sclate_clock_jumps_total") == 1
    assert Scrape(two).get("sclate_clock_jumps_total") == 0
    assert two.content_type == CONTENT_TYPE_LATEST and two.content_type.startswith("text/plain")
    assert Scrape(two).get("sclate_process_resident_memory_bytes") > 0
    with pytest.raises(RuntimeError, match="already"):
        store_counts = _NoRuns()
        one.watch_runs(store_counts)
        one.watch_runs(store_counts)


class _NoRuns:
    """Test double for the run manager as the metrics read it: no runs at all."""

    def counts(self) -> dict[str, int]:
        return {"running": 0, "pending": 0, "live": 0}

    def state_counts(self) -> dict[tuple[str, str], int]:
        return {}

    def leases_held(self) -> dict[str, int]:
        return {}
