"""sclate.v1 against an in-process daemon on port 0."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from sclate_api.v1 import sclate_pb2 as pb

from tests.api.conftest import Api, synthetic_request


def trailers(err: grpc.aio.AioRpcError) -> dict[str, str]:
    return {str(k): str(v) for k, v in (err.trailing_metadata() or ())}


async def expect_error(coro: object, code: grpc.StatusCode) -> dict[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await coro  # type: ignore[misc]
    assert info.value.code() == code, info.value.details()
    return {"details": info.value.details() or "", **trailers(info.value)}


async def test_create_watch_get_succeeds(api: Api) -> None:
    run = await api.create(days=2, events=3)
    assert run.name.startswith("runs/") and run.state == pb.PENDING
    events = await api.watch_all(run.name)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    kinds = {e.WhichOneof("kind") for e in events}
    assert {"fire", "jump", "lease", "turn", "verdict", "state"} <= kinds
    assert events[-1].state.state == pb.SUCCEEDED
    got = await api.stub.GetRun(pb.GetRunRequest(name=run.name))
    assert got.state == pb.SUCCEEDED and got.last_event_seq == events[-1].seq
    s = got.results.scheduler
    assert s.events_fired == s.events_scheduled > 0 and s.in_order
    assert got.results.rounds == 2 and got.results.rounds_graded == 2 and got.results.score == 1.0
    assert s.compression_ratio > 1000  # two simulated days in well under a minute of wall time


async def test_request_id_is_idempotent(api: Api) -> None:
    a = await api.stub.CreateRun(synthetic_request(request_id="req-1"))
    b = await api.stub.CreateRun(synthetic_request(request_id="req-1"))
    assert a.name == b.name
    err = await expect_error(
        api.stub.CreateRun(synthetic_request(days=3, request_id="req-1")),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert err["sclate-reason"] == "REQUEST_ID_REUSED" and err["sclate-field"] == "request_id"
    listed = await api.stub.ListRuns(pb.ListRunsRequest())
    assert [r.name for r in listed.runs] == [a.name]


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: setattr(r.run.benchmark, "name", "nope"), "run.benchmark.name"),
        (lambda r: setattr(r.run.agent, "harness", "nope"), "run.agent.harness"),
        (lambda r: setattr(r, "run_id", "Bad_ID"), "run_id"),
        (lambda r: r.run.labels.update({"Bad Key": "x"}), "run.labels.Bad Key"),
        (lambda r: r.run.labels.update({"k": "v" * 300}), "run.labels.k"),
        (lambda r: r.run.benchmark.options.update({"days": -1}), "run.benchmark.options.days"),
        (lambda r: r.run.agent.options.update({"turn_ms": "slow"}), "run.agent.options.turn_ms"),
        (lambda r: setattr(r.run.agent.model, "api", "grpc"), "run.agent.model.api"),
        (lambda r: setattr(r.run.agent.model, "base_url", "ftp://x"), "run.agent.model.base_url"),
        # The key's variable NAME, not the key; and only with an endpoint of one's own.
        (
            lambda r: r.run.agent.model.MergeFrom(pb.ModelEndpoint(base_url="http://m", api_key_env="sk-123")),
            "run.agent.model.api_key_env",
        ),
        (lambda r: setattr(r.run.agent.model, "api_key_env", "VENDOR_KEY"), "run.agent.model.api_key_env"),
        (
            # A host path must be absolute (and inside the data roots: see test_data_roots.py).
            lambda r: setattr(r.run.benchmark, "data_dir", "does/not/exist"),
            "run.benchmark.data_dir",
        ),
        (lambda r: setattr(r.run.clock, "rate", 2.0), "run.clock.rate"),
        (lambda r: setattr(r.run, "name", "runs/x"), "run.name"),
    ],
)
async def test_bad_input_names_the_field_and_stores_nothing(
    api: Api, mutate: Callable[[pb.CreateRunRequest], None], field: str
) -> None:
    req = synthetic_request()
    mutate(req)
    err = await expect_error(api.stub.CreateRun(req), grpc.StatusCode.INVALID_ARGUMENT)
    assert err["sclate-field"] == field, err
    assert (await api.stub.ListRuns(pb.ListRunsRequest())).runs == []


async def test_oversized_request_is_refused(api: Api) -> None:
    req = synthetic_request()
    req.run.agent.options.update({"blob": "x" * (70 * 1024)})
    err = await expect_error(api.stub.CreateRun(req), grpc.StatusCode.INVALID_ARGUMENT)
    assert err["sclate-field"] == "run.agent.options"
    huge = synthetic_request()
    huge.run.agent.options.update({"blob": "x" * (5 * 1024 * 1024)})
    await expect_error(api.stub.CreateRun(huge), grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert (await api.stub.ListRuns(pb.ListRunsRequest())).runs == []


async def test_not_found_and_malformed_names(api: Api) -> None:
    err = await expect_error(api.stub.GetRun(pb.GetRunRequest(name="runs/missing")), grpc.StatusCode.NOT_FOUND)
    assert err["sclate-field"] == "name"
    err = await expect_error(api.stub.GetRun(pb.GetRunRequest(name="missing")), grpc.StatusCode.INVALID_ARGUMENT)
    assert err["sclate-field"] == "name"
    await expect_error(api.stub.CancelRun(pb.CancelRunRequest(name="runs/missing")), grpc.StatusCode.NOT_FOUND)
    await expect_error(api.stub.DeleteRun(pb.DeleteRunRequest(name="runs/missing")), grpc.StatusCode.NOT_FOUND)


async def test_pagination_visits_every_run_once(api: Api) -> None:
    names = {(await api.create(run_id=f"r{i}")).name for i in range(7)}
    seen: list[str] = []
    token = ""
    while True:
        page = await api.stub.ListRuns(pb.ListRunsRequest(page_size=3, page_token=token))
        seen += [r.name for r in page.runs]
        token = page.next_page_token
        if not token:
            break
    assert sorted(seen) == sorted(names) and len(seen) == len(set(seen))
    err = await expect_error(
        api.stub.ListRuns(pb.ListRunsRequest(page_token="nonsense")),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert err["sclate-field"] == "page_token"
    first = await api.stub.ListRuns(pb.ListRunsRequest(page_size=3))
    err = await expect_error(
        api.stub.ListRuns(pb.ListRunsRequest(page_size=3, page_token=first.next_page_token, filter="benchmark=x")),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert err["sclate-field"] == "page_token"
    await expect_error(api.stub.ListRuns(pb.ListRunsRequest(page_size=-1)), grpc.StatusCode.INVALID_ARGUMENT)


async def test_filters(api: Api) -> None:
    req = synthetic_request(run_id="labelled")
    req.run.labels["team"] = "a"
    await api.stub.CreateRun(req)
    await api.create(run_id="plain")
    for name in ("runs/labelled", "runs/plain"):
        await api.watch_all(name)
    got = await api.stub.ListRuns(pb.ListRunsRequest(filter="labels.team=a AND state=SUCCEEDED"))
    assert [r.name for r in got.runs] == ["runs/labelled"]
    got = await api.stub.ListRuns(pb.ListRunsRequest(filter="harness=scripted"))
    assert len(got.runs) == 2
    err = await expect_error(
        api.stub.ListRuns(pb.ListRunsRequest(filter="colour=red")), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert err["sclate-field"] == "filter"


async def test_watch_resumes_without_gaps_or_duplicates(api: Api) -> None:
    run = await api.create(days=2, events=3)
    full = await api.watch_all(run.name)
    cut = len(full) // 3
    first: list[pb.RunEvent] = []
    async for ev in api.stub.WatchRun(pb.WatchRunRequest(name=run.name)):
        first.append(ev)
        if len(first) == cut:
            break
    rest = await api.watch_all(run.name, after=first[-1].seq)
    assert [e.seq for e in first + rest] == [e.seq for e in full]
    assert [e.SerializeToString() for e in first + rest] == [e.SerializeToString() for e in full]
    assert await api.watch_all(run.name, after=full[-1].seq) == []


async def test_live_watch_from_the_middle(api: Api) -> None:
    run = await api.create(days=2, events=3, turn_ms=30)
    seen: list[int] = []
    async for ev in api.stub.WatchRun(pb.WatchRunRequest(name=run.name, after_seq=2)):
        seen.append(ev.seq)
    assert seen == list(range(3, seen[-1] + 1))


async def test_cancel_delete_and_states(api: Api) -> None:
    run = await api.create(days=3, events=3, turn_ms=200)
    async for ev in api.stub.WatchRun(pb.WatchRunRequest(name=run.name)):
        if ev.WhichOneof("kind") == "state" and ev.state.state == pb.RUNNING:
            break
    await expect_error(api.stub.DeleteRun(pb.DeleteRunRequest(name=run.name)), grpc.StatusCode.FAILED_PRECONDITION)
    cancelled = await api.stub.CancelRun(pb.CancelRunRequest(name=run.name))
    assert cancelled.state == pb.CANCELLED
    events = await api.watch_all(run.name)
    assert events[-1].state.state == pb.CANCELLED
    assert (await api.stub.CancelRun(pb.CancelRunRequest(name=run.name))).state == pb.CANCELLED
    err = await expect_error(
        api.stub.ResumeRun(pb.ResumeRunRequest(name=run.name)), grpc.StatusCode.FAILED_PRECONDITION
    )
    assert err["sclate-reason"] == "NOT_INTERRUPTED"
    await api.stub.DeleteRun(pb.DeleteRunRequest(name=run.name))
    await expect_error(api.stub.GetRun(pb.GetRunRequest(name=run.name)), grpc.StatusCode.NOT_FOUND)


async def test_a_failing_agent_fails_the_run_with_its_reason(api: Api) -> None:
    run = await api.create(fail_on_round="d0.task1")
    events = await api.watch_all(run.name)
    assert events[-1].state.state == pb.FAILED
    assert "d0.task1" in events[-1].state.reason


async def test_admission_keeps_extra_runs_pending_in_order(tmp_path: object) -> None:
    from pathlib import Path

    from sclated.daemon import Daemon, DaemonConfig

    d = Daemon(DaemonConfig(state_dir=Path(str(tmp_path)) / "s", listen="127.0.0.1:0", max_running=2))
    await d.start()
    try:
        async with grpc.aio.insecure_channel(d.tcp_address or "") as ch:
            from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

            stub = pb_grpc.SclateStub(ch)
            runs = [await stub.CreateRun(synthetic_request(turn_ms=100, run_id=f"a{i}")) for i in range(5)]
            states = [(await stub.GetRun(pb.GetRunRequest(name=r.name))).state for r in runs]
            assert states.count(pb.RUNNING) <= 2
            assert pb.PENDING in states
            starts = []
            for r in runs:
                events = [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=r.name))]
                assert events[-1].state.state == pb.SUCCEEDED
                starts.append(
                    next(
                        e.wall_time.ToNanoseconds()
                        for e in events
                        if e.WhichOneof("kind") == "state" and e.state.state == pb.RUNNING
                    )
                )
            assert starts == sorted(starts)  # admitted in creation order
    finally:
        await d.stop()


async def test_health_and_reflection(api: Api) -> None:
    health = health_pb2_grpc.HealthStub(api.channel)
    resp = await health.Check(health_pb2.HealthCheckRequest(service="sclate.v1.Sclate"))
    assert resp.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(api.channel)
    call = refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = [s.name async for r in call for s in r.list_services_response.service]
    assert "sclate.v1.Sclate" in names and "grpc.health.v1.Health" in names


async def test_benchmarks_and_agents(api: Api) -> None:
    b = await api.stub.ListBenchmarks(pb.ListBenchmarksRequest())
    assert "synthetic" in [x.name for x in b.benchmarks]
    a = await api.stub.ListAgents(pb.ListAgentsRequest())
    scripted = next(x for x in a.agents if x.name == "scripted")
    assert not scripted.sandboxed and not scripted.image and list(scripted.capabilities) == ["session_state"]
    reference = next(x for x in a.agents if x.name == "reference")
    assert reference.sandboxed and reference.image == "sclate-reference-agent"
    assert reference.version and list(reference.wire_apis) == ["openai_chat"]
    # Its own (consolidate, session state, wait) and what every sandbox gives.
    assert set(reference.capabilities) == {
        "consolidate",
        "file_snapshots",
        "jobs",
        "session_state",
        "wait",
        "workspace",
    }
    hermes = next(x for x in a.agents if x.name == "hermes")
    assert hermes.sandboxed and hermes.image == "sclate-hermes" and hermes.version == "0.19.0"
    # No in-process state (everything is in HERMES_HOME) and no sclate-wait.
    assert set(hermes.capabilities) == {"consolidate", "file_snapshots", "jobs", "workspace"}


async def test_tenants_are_isolated_on_every_method(
    tenant_api: Callable[[str | None], Api],
) -> None:
    alice, bob, nobody = tenant_api("alice"), tenant_api("bob"), tenant_api(None)
    run = await alice.create(run_id="shared-name")
    await alice.watch_all(run.name)
    md = bob.md()
    for call in (
        bob.stub.GetRun(pb.GetRunRequest(name=run.name), metadata=md),
        bob.stub.CancelRun(pb.CancelRunRequest(name=run.name), metadata=md),
        bob.stub.DeleteRun(pb.DeleteRunRequest(name=run.name), metadata=md),
        bob.stub.ResumeRun(pb.ResumeRunRequest(name=run.name), metadata=md),
    ):
        await expect_error(call, grpc.StatusCode.NOT_FOUND)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await bob.watch_all(run.name)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert (await bob.stub.ListRuns(pb.ListRunsRequest(), metadata=md)).runs == []
    # The same run id is free for another tenant.
    theirs = await bob.create(run_id="shared-name")
    assert theirs.name == run.name
    for call in (
        nobody.stub.ListRuns(pb.ListRunsRequest()),
        nobody.stub.GetRun(pb.GetRunRequest(name=run.name)),
        alice.stub.ListRuns(pb.ListRunsRequest(), metadata=alice.md("not-a-real-token-at-all")),
        alice.stub.ListRuns(pb.ListRunsRequest(), metadata=(("authorization", "Basic abc"),)),
    ):
        err = await expect_error(call, grpc.StatusCode.UNAUTHENTICATED)
        assert err["sclate-reason"] == "UNAUTHENTICATED"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await nobody.watch_all(run.name)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # Health stays open without a token.
    health = health_pb2_grpc.HealthStub(nobody.channel)
    assert (await health.Check(health_pb2.HealthCheckRequest())).status == health_pb2.HealthCheckResponse.SERVING


async def test_tokens_reload(tenant_api: Callable[[str | None], Api]) -> None:
    alice = tenant_api("alice")
    tokens = alice.daemon.tokens
    assert tokens.path is not None
    tokens.path.write_text("tok-carol-0123456789abcdef carol\n")
    assert tokens.reload()
    await expect_error(
        alice.stub.ListRuns(pb.ListRunsRequest(), metadata=alice.md()),
        grpc.StatusCode.UNAUTHENTICATED,
    )
    carol = alice.md("tok-carol-0123456789abcdef")
    assert (await alice.stub.ListRuns(pb.ListRunsRequest(), metadata=carol)).runs == []
    tokens.path.write_text("short carol\n")
    assert not tokens.reload()  # a broken file keeps the previous table
    assert (await alice.stub.ListRuns(pb.ListRunsRequest(), metadata=carol)).runs == []


async def test_finished_run_has_a_report_and_delete_removes_it(api: Api) -> None:
    run = await api.create(days=2, events=2, run_id="reported")
    await api.watch_all(run.name)
    got = await api.stub.GetRun(pb.GetRunRequest(name=run.name))
    from pathlib import Path

    report, plot = Path(got.results.report_path), Path(got.results.plot_path)
    assert report.is_file() and plot.read_bytes()[:4] == b"\x89PNG"
    assert report.parent.parent == api.daemon.config.state_dir / "runs" / "local" / "reported"
    await api.stub.DeleteRun(pb.DeleteRunRequest(name=run.name))
    assert not report.parent.parent.exists()


async def test_a_harness_without_a_capability_the_scenario_needs_is_refused(api: Api) -> None:
    """MetaClaw puts files in the workspace; the in-daemon scripted agent has none."""
    req = pb.CreateRunRequest(
        run=pb.Run(benchmark=pb.BenchmarkSpec(name="metaclaw", scenario="tiny"), agent=pb.AgentSpec(harness="scripted"))
    )
    err = await expect_error(api.stub.CreateRun(req), grpc.StatusCode.INVALID_ARGUMENT)
    assert err["sclate-field"] == "run.agent.harness" and err["sclate-reason"] == "MISSING_CAPABILITY", err
    assert (await api.stub.ListRuns(pb.ListRunsRequest())).runs == []


async def test_a_sped_up_realtime_clock_is_refused_for_a_sandboxed_harness(api: Api) -> None:
    req = pb.CreateRunRequest(
        run=pb.Run(
            benchmark=pb.BenchmarkSpec(name="synthetic"),
            agent=pb.AgentSpec(harness="reference"),
            clock=pb.ClockSpec(mode=pb.REALTIME, rate=2.0),
        )
    )
    err = await expect_error(api.stub.CreateRun(req), grpc.StatusCode.INVALID_ARGUMENT)
    assert err["sclate-field"] == "run.clock.rate", err
