"""`sclated bench fuzz`: its request generator, its classification (each figure can come out
bad, against test-double servicers that misbehave one way each), the aggregate over its
parts, and one small campaign against a real daemon."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.api import SclateInterceptor, TokenTable, current_tenant
from sclated.bench import _fuzz
from sclated.bench._fuzz import FuzzPart, aggregate, bench_fuzz
from sclated.bench._fuzz_api import (
    Answer,
    CampaignResult,
    DaemonTarget,
    RunState,
    StoreState,
    classify,
    run_campaign,
    state_changes,
)
from sclated.bench._fuzz_requests import METHODS, MUTATING, SERVICE, STRATEGIES, RequestGenerator, TenantPools
from sclated.errors import InvalidArgument, NotFound
from sclated.store import RunRow, Store

from .leftovers import run_bench

ALICE = TenantPools(
    tenant="tenant-alicenon",
    token="tok-alice-0123456789abcdef",
    nonce="alicenon",
    runs=("runs/alicenon-done-0", "runs/alicenon-paused"),
    live_runs=("runs/alicenon-live",),
    snapshots=("runs/alicenon-done-0/snapshots/alicenon-snap-0",),
    groups=("alicenon-grp",),
    label_values=("alicenon-team",),
    run_dirs=("/state/runs/tenant-alicenon",),
)
BOB = TenantPools(
    tenant="tenant-bobnonce",
    token="tok-bob-0123456789abcdefgh",
    nonce="bobnonce",
    runs=("runs/bobnonce-done-0",),
    live_runs=("runs/bobnonce-live",),
    snapshots=("runs/bobnonce-done-0/snapshots/bobnonce-snap-0",),
    groups=("bobnonce-grp",),
    label_values=("bobnonce-team",),
)
TENANTS = (ALICE, BOB)


# -- the generator --------------------------------------------------------------------------


def test_the_generator_covers_every_method_of_the_schema_and_every_strategy() -> None:
    gen = RequestGenerator(11, TENANTS)
    cases = [gen.case(i) for i in range(len(METHODS) * 40)]
    assert {c.method.name for c in cases} == {m.name for m in SERVICE.methods}
    assert {m.name for m in METHODS} == {m.name for m in SERVICE.methods}
    assert {c.strategy for c in cases} == {s for s, _ in STRATEGIES}
    for method in METHODS:
        by_strategy = {c.strategy for c in cases if c.method.name == method.name}
        assert {"valid", "mutate", "random", "cross"} <= by_strategy, method.name
    # Every request goes out as bytes; a message's are its serialization.
    for c in cases:
        assert isinstance(c.request_bytes(), bytes)
        if c.raw is None:
            assert c.request is not None and c.request.DESCRIPTOR is c.method.input_type
    assert any(c.check_state for c in cases) and all(c.mutating for c in cases if c.check_state)
    assert any(c.copies > 1 for c in cases)


def test_a_case_is_made_from_the_seed_and_its_index_alone() -> None:
    a, b = RequestGenerator(5, TENANTS), RequestGenerator(5, TENANTS)
    for i in (0, 17, 400, 401):
        x, y = a.case(i), b.case(i)
        assert (x.method, x.strategy, x.tenant, x.request_bytes(), x.metadata) == (
            y.method,
            y.strategy,
            y.tenant,
            y.request_bytes(),
            y.metadata,
        )
    other = RequestGenerator(6, TENANTS)
    assert [a.case(i).request_bytes() for i in range(50)] != [other.case(i).request_bytes() for i in range(50)]


def test_a_tenant_names_the_others_resources_only_in_reference_fields() -> None:
    gen = RequestGenerator(3, TENANTS)
    crossing = 0
    for i in range(2000):
        c = gen.case(i)
        if c.strategy in ("wire", "auth") or c.request is None:
            continue  # no request, or no tenant
        other = BOB if c.tenant == ALICE.tenant else ALICE
        data = c.request_bytes()
        carried = [s for s in other.secrets if s.encode() in data]
        if carried:
            crossing += 1
            assert c.strategy == "cross", c.describe()
            # Never in an id or label of something the request creates.
            for fname in ("run_id", "new_run_id", "group_id", "snapshot_id", "request_id"):
                assert not any(s in str(getattr(c.request, fname, "")) for s in carried), c.describe()
            assert not any(s in str(dict(getattr(c.request, "labels", {}))) for s in carried)
    assert crossing > 100


# -- classification -------------------------------------------------------------------------


def _case(method: str, strategy: str = "valid", tenant: str = ALICE.tenant, **fields: Any) -> Any:
    gen = RequestGenerator(1, TENANTS)
    c = gen.case(next(i for i in range(64) if METHODS[i % len(METHODS)].name == method))
    c.strategy, c.tenant, c.raw, c.copies = strategy, tenant, None, 1
    c.request = type(c.request)(**fields) if c.request is not None else None
    return c


def test_internal_and_unknown_are_internal_errors() -> None:
    c = _case("GetRun", name="runs/x")
    for code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        assert classify(c, Answer(code, "boom"), TENANTS).internal
    ok = classify(c, Answer(grpc.StatusCode.NOT_FOUND, "run not found", {"sclate-reason": "NOT_FOUND"}), TENANTS)
    assert ok.problems() == []


def test_an_error_that_names_nothing_is_unnamed() -> None:
    c = _case("GetRun", name="runs/x")
    assert classify(c, Answer(grpc.StatusCode.INVALID_ARGUMENT, ""), TENANTS).unnamed
    lost = Answer(grpc.StatusCode.RESOURCE_EXHAUSTED, "Stream removed (received metadata size exceeds hard limit)")
    assert classify(c, lost, TENANTS).unnamed
    too_big = Answer(grpc.StatusCode.RESOURCE_EXHAUSTED, "Received message larger than max (5 vs. 4)")
    assert not classify(c, too_big, TENANTS).unnamed


def test_a_string_of_the_other_tenant_in_an_answer_is_a_leak_unless_the_request_carried_it() -> None:
    c = _case("GetRun", name="runs/alicenon-done-0")
    leaked = pb.Run(name="runs/alicenon-done-0", labels={"team": "bobnonce-team"}).SerializeToString()
    v = classify(c, Answer(grpc.StatusCode.OK, payload=leaked), TENANTS)
    assert v.leaks and "bobnonce-team" in v.leaks[0]
    # Bob asking for Alice's run is told it is not found, quoting his own request: no leak.
    probe = _case("GetRun", "cross", BOB.tenant, name="runs/alicenon-done-0")
    echo = Answer(grpc.StatusCode.NOT_FOUND, "run 'runs/alicenon-done-0' not found", {"sclate-reason": "NOT_FOUND"})
    assert classify(probe, echo, TENANTS).leaks == []
    # An OK to it is one, even with nothing of Alice's in the answer (a DeleteRun's Empty).
    assert classify(probe, Answer(grpc.StatusCode.OK, payload=b""), TENANTS).leaks
    listing = _case("ListRuns", "cross", BOB.tenant, filter="labels.team=alicenon-team")
    assert classify(listing, Answer(grpc.StatusCode.OK, payload=b""), TENANTS).leaks == []
    # The tenant's name is one of its strings too.
    named = Answer(grpc.StatusCode.PERMISSION_DENIED, "tenant-bobnonce may not", {"sclate-reason": "X"})
    assert classify(_case("GetRun", name="runs/x"), named, TENANTS).leaks


def test_anything_but_unauthenticated_without_a_valid_token_is_an_auth_bypass() -> None:
    c = _case("ListAgents", "auth", "")
    assert classify(c, Answer(grpc.StatusCode.OK), TENANTS).auth_bypass
    assert classify(c, Answer(grpc.StatusCode.NOT_FOUND, "x", {"sclate-reason": "N"}), TENANTS).auth_bypass
    fine = Answer(grpc.StatusCode.UNAUTHENTICATED, "unknown bearer token", {"sclate-reason": "UNAUTHENTICATED"})
    assert classify(c, fine, TENANTS).problems() == []
    # A stream with no answer in time let nothing in; one that sent messages did.
    watch = _case("WatchRun", "auth", "", name="runs/x")
    assert not classify(watch, Answer(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"), TENANTS).auth_bypass
    streamed = Answer(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", payload=b"\x08\x01", messages=1)
    assert classify(watch, streamed, TENANTS).auth_bypass


def test_a_unary_call_past_its_deadline_is_a_timeout_a_stream_is_not() -> None:
    late = Answer(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
    assert classify(_case("GetRun", name="runs/x"), late, TENANTS).timeout
    assert not classify(_case("WatchRun", name="runs/x"), late, TENANTS).timeout
    waits = _case("SaveSnapshot", run="runs/x", at_turn_boundary=True)
    assert not classify(waits, late, TENANTS).timeout
    assert classify(_case("GetRun"), Answer(grpc.StatusCode.UNIMPLEMENTED, "x"), TENANTS).unexpected


def test_state_changes_ignore_what_runs_do_by_themselves() -> None:
    spec = '{"a": 1}'
    before = StoreState(
        {
            "t/a": RunState(spec, "", "PENDING"),
            "t/b": RunState(spec, "", "SUCCEEDED"),
            "t/c": RunState(spec, "", "RUNNING"),
        },
        frozenset({"t/b/snapshots/s"}),
        frozenset({"t/a"}),
    )
    alone = StoreState(
        {
            "t/a": RunState(spec, "", "RUNNING"),
            "t/b": RunState(spec, "", "SUCCEEDED"),
            "t/c": RunState(spec, "", "FAILED"),
        },
        frozenset({"t/b/snapshots/s"}),
        frozenset(),
    )
    assert state_changes(before, alone) == []
    changed = StoreState(
        {
            "t/a": RunState(spec, "", "CANCELLED"),
            "t/b": RunState(spec, "", "PENDING"),
            "t/d": RunState(spec, "runs/b", "PENDING"),
        },
        frozenset(),
        frozenset({"t/a", "t/d"}),
    )
    got = state_changes(before, changed)
    assert "run t/c removed" in got and "run t/d added" in got
    assert "run t/a: cancelled" in got and "run t/b: SUCCEEDED -> PENDING" in got
    assert "snapshot t/b/snapshots/s removed" in got and "restore marker for t/d added" in got
    relabelled = StoreState({**before.runs, "t/b": RunState('{"a": 2}', "", "SUCCEEDED")}, before.snapshots)
    assert "run t/b: spec changed" in state_changes(before, relabelled)


async def test_the_daemons_store_is_read_as_it_changes(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    store = Store(state_dir / "sclated.db")
    await store.open()
    try:
        target = DaemonTarget(state_dir, {ALICE.tenant: ALICE.token})
        spec = {"benchmark": {"name": "synthetic"}, "agent": {"harness": "scripted"}}
        await store.insert_run(RunRow(name="a/r1", tenant="a", spec=spec, state="SUCCEEDED", create_ns=1, seq=1))
        before = await target.state()
        assert set(before.runs) == {"a/r1"} and before.runs["a/r1"].state == "SUCCEEDED"
        await store.insert_run(RunRow(name="a/r2", tenant="a", spec=spec, state="PENDING", create_ns=2, seq=2))
        await store.update_run("a/r1", state="PENDING")
        await store.insert_snapshot("a/r1/snapshots/s", "a/r1", "a", 1, 1, 0, {})
        got = state_changes(before, await target.state())
        assert got == ["run a/r2 added", "run a/r1: SUCCEEDED -> PENDING", "snapshot a/r1/snapshots/s added"]
        await store.update_run("a/r2", state="FAILED", reason="internal error: KeyError: 'x'")
        assert await target.runs_failed_internally() == ["a/r2: internal error: KeyError: 'x'"]
    finally:
        await store.close()


# -- campaigns against test doubles ------------------------------------------------------------

Behaviour = Callable[[Any, grpc.aio.ServicerContext, "DoubleTarget"], Awaitable[Any]]


async def _not_found(request: Any, context: grpc.aio.ServicerContext, target: DoubleTarget) -> Any:
    raise NotFound("nothing here (a test double)", field="name")


def _double_servicer(target: DoubleTarget, behaviours: dict[str, Behaviour]) -> pb_grpc.SclateServicer:
    """A servicer that refuses everything cleanly, except the methods given a behaviour."""

    class Double(pb_grpc.SclateServicer):  # type: ignore[misc]  # the stubs carry no types
        pass

    for method in METHODS:
        act = behaviours.get(method.name, _not_found)
        if method.server_streaming:

            async def stream(self: Any, request: Any, context: Any, act: Behaviour = act) -> AsyncIterator[Any]:
                reply = await act(request, context, target)
                for item in reply or ():
                    yield item

            setattr(Double, method.name, stream)
        else:

            async def unary(self: Any, request: Any, context: Any, act: Behaviour = act) -> Any:
                return await act(request, context, target)

            setattr(Double, method.name, unary)
    return Double()


@dataclass
class DoubleTarget:
    """A FuzzTarget around an in-process server whose servicer is a test double."""

    address: str = ""
    runs: dict[str, RunState] = field(default_factory=dict)
    problems_to_report: list[str] = field(default_factory=list)
    restarts: int = 0

    async def alive(self, channel: grpc.aio.Channel) -> str:
        return self.problems_to_report.pop(0) if self.problems_to_report else ""

    async def state(self) -> StoreState:
        return StoreState(dict(self.runs))

    async def restart(self) -> None:
        self.restarts += 1

    async def runs_failed_internally(self) -> list[str]:
        return []

    def log_tracebacks(self) -> int:
        return 0


async def campaign(
    tmp_path: Path, behaviours: dict[str, Behaviour], *, auth: bool = True, requests: int = 320, **target: Any
) -> tuple[CampaignResult, DoubleTarget]:
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{t.token} {t.tenant}\n" for t in TENANTS))
    double = DoubleTarget(runs={"x/keep": RunState("{}", "", "SUCCEEDED")}, **target)
    interceptors = [SclateInterceptor(TokenTable(tokens))] if auth else []
    server = grpc.aio.server(interceptors=interceptors)
    pb_grpc.add_SclateServicer_to_server(_double_servicer(double, behaviours), server)
    double.address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    try:
        result = await run_campaign(double, TENANTS, seed=4, requests=requests, concurrency=8)
    finally:
        await server.stop(None)
    return result, double


async def test_a_clean_double_has_no_findings(tmp_path: Path) -> None:
    result, double = await campaign(tmp_path, {})
    fig = result.figures()
    assert fig["cases"] >= 320 and fig["findings"] == []
    for key in ("crashes", "internal_errors", "state_changed_on_error", "cross_tenant_leaks", "auth_bypasses"):
        assert fig[key] == 0, key
    assert fig["unnamed_errors"] == fig["timeouts"] == fig["unexpected_status"] == fig["client_errors"] == 0
    assert fig["state_checked"] > 0 and set(fig["by_method"]) == {m.name for m in METHODS}
    assert double.restarts == 0


async def test_a_double_that_fails_internally_is_counted(tmp_path: Path) -> None:
    async def broken(request: Any, context: Any, target: DoubleTarget) -> Any:
        raise RuntimeError("a bug")

    result, _ = await campaign(tmp_path, {"GetRun": broken})
    assert result.internal_errors > 0
    assert any("internal_error" in f and "GetRun" in f for f in result.figures()["findings"])


async def test_a_double_that_leaks_the_other_tenants_run_is_counted(tmp_path: Path) -> None:
    async def leaky(request: Any, context: Any, target: DoubleTarget) -> Any:
        other = BOB if current_tenant.get() == ALICE.tenant else ALICE
        return pb.ListRunsResponse(runs=[pb.Run(name=other.runs[0], labels={"team": other.label_values[0]})])

    result, _ = await campaign(tmp_path, {"ListRuns": leaky})
    assert result.cross_tenant_leaks > 0
    assert any("cross_tenant_leak" in f and "ListRuns" in f for f in result.figures()["findings"])


async def test_a_double_that_obeys_a_request_naming_the_other_tenants_run_is_counted(tmp_path: Path) -> None:
    async def obliging(request: Any, context: Any, target: DoubleTarget) -> Any:
        return empty_pb2.Empty()  # deleted, whoever's it was

    result, _ = await campaign(tmp_path, {"DeleteRun": obliging})
    assert result.cross_tenant_leaks > 0


async def test_a_double_that_changes_state_on_error_is_counted(tmp_path: Path) -> None:
    async def half_done(request: Any, context: Any, target: DoubleTarget) -> Any:
        target.runs.pop("x/keep", None)
        target.runs[f"x/{len(target.runs)}"] = RunState("{}", "", "PENDING")
        raise InvalidArgument("refused (after changing things)", field="run")

    result, _ = await campaign(tmp_path, {"CreateRun": half_done})
    assert result.state_changed_on_error > 0
    assert any("state_changed_on_error" in f and "CreateRun" in f for f in result.figures()["findings"])


async def test_a_double_without_auth_is_counted(tmp_path: Path) -> None:
    async def answers(request: Any, context: Any, target: DoubleTarget) -> Any:
        return pb.ListAgentsResponse()

    result, _ = await campaign(tmp_path, {"ListAgents": answers}, auth=False)
    assert result.auth_bypasses > 0


async def test_a_double_whose_errors_name_nothing_is_counted(tmp_path: Path) -> None:
    async def mute(request: Any, context: grpc.aio.ServicerContext, target: DoubleTarget) -> Any:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "")

    result, _ = await campaign(tmp_path, {"ListSnapshots": mute})
    assert result.unnamed_errors > 0


async def test_a_daemon_that_stops_serving_is_a_crash_and_is_started_again(tmp_path: Path) -> None:
    result, double = await campaign(tmp_path, {}, problems_to_report=["the daemon exited (-9)"], requests=800)
    assert result.crashes == 1 and double.restarts == 1
    assert any("crash" in f and "exited" in f for f in result.figures()["findings"])


def test_only_mutating_methods_are_checked_for_state() -> None:
    assert {
        "CreateRun",
        "DeleteRun",
        "CancelRun",
        "ResumeRun",
        "SaveSnapshot",
        "RestoreSnapshot",
        "BranchRun",
    } == MUTATING
    assert {m.name for m in METHODS} > MUTATING


# -- the aggregate ------------------------------------------------------------------------------


def _part(name: str, key: str, **counts: Any) -> FuzzPart:
    async def run(args: argparse.Namespace, seed: int) -> dict[str, Any]:
        return {"cases": 10, "crashes": 0, "internal_errors": 0, "state_changed_on_error": 0,
                "cross_tenant_leaks": 0, "findings": [f"{name} saw seed {seed}"], **counts}  # fmt: skip

    return FuzzPart(name, key, run)


async def test_the_aggregate_sums_the_parts_and_keys_each_parts_cases() -> None:
    parts = (
        _part("api", "requests", internal_errors=2, unnamed_errors=1),
        _part("control_socket", "control_socket_cases", crashes=1, cases=7),
    )
    out = await bench_fuzz(argparse.Namespace(seed=42), parts)
    assert out["seed"] == 42 and out["requests"] == 10 and out["control_socket_cases"] == 7
    assert "proxy_cases" not in out  # only the parts that ran
    assert out["crashes"] == 1 and out["internal_errors"] == 2 and out["unnamed_errors"] == 1
    assert out["cross_tenant_leaks"] == 0 and "auth_bypasses" not in out
    assert out["meets_targets"] is False and set(out["missed_targets"]) == {
        "crashes",
        "internal_errors",
        "unnamed_errors",
    }
    assert out["findings"] == ["api: api saw seed 42", "control_socket: control_socket saw seed 42"]
    assert out["targets"]["crashes"] == 0 and out["wall_s"] >= 0 and set(out["parts"]) == {"api", "control_socket"}


async def test_a_part_that_fails_to_run_misses_the_targets() -> None:
    async def broken(args: argparse.Namespace, seed: int) -> dict[str, Any]:
        raise OSError("no such socket")

    out = await bench_fuzz(
        argparse.Namespace(seed=None), (_part("api", "requests"), FuzzPart("proxy", "proxy_cases", broken))
    )
    assert isinstance(out["seed"], int)
    assert out["part_errors"] == {"proxy": "OSError: no such socket"}
    assert out["meets_targets"] is False and out["missed_targets"] == ["part:proxy"]
    assert "proxy_cases" not in out and out["requests"] == 10


def test_a_clean_aggregate_meets_the_targets() -> None:
    res = {"cases": 3, **dict.fromkeys(_fuzz.TARGETS, 0), "findings": []}
    out = aggregate(1, {"api": res}, {}, 1.0)
    assert out["meets_targets"] is True and out["missed_targets"] == [] and out["requests"] == 3


def test_the_parts_are_declared_each_with_its_own_cases_key() -> None:
    assert [(p.name, p.cases_key) for p in _fuzz.PARTS] == [
        ("api", "requests"),
        ("control_socket", "control_socket_cases"),
        ("proxy", "proxy_cases"),
        ("adapters", "adapters_cases"),
    ]


async def test_part_selects_the_parts_to_run() -> None:
    parts = (_part("api", "requests"), _part("proxy", "proxy_cases", cases=4))
    out = await bench_fuzz(argparse.Namespace(seed=1, part=["proxy"]), parts)
    assert set(out["parts"]) == {"proxy"} and out["proxy_cases"] == 4 and "requests" not in out
    with pytest.raises(ValueError, match="no fuzz part named nope"):
        await bench_fuzz(argparse.Namespace(seed=1, part=["nope"]), parts)


def test_the_command_line_names_every_part_and_refuses_others(capsys: pytest.CaptureFixture[str]) -> None:
    from sclated.bench._cli import FUZZ_PARTS, run_bench_cli
    from sclated.bench._fuzz import PARTS

    assert tuple(p.name for p in PARTS) == FUZZ_PARTS
    with pytest.raises(SystemExit) as exit_:
        run_bench_cli("fuzz", ["--part", "nope"])
    assert exit_.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err


# -- a real daemon ------------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_small_campaign_against_a_real_daemon_meets_the_targets_and_cleans_up(bench_tmp: Path) -> None:
    run = run_bench("fuzz", "--part", "api", "--requests", "400", "--seed", "7", tmpdir=bench_tmp, timeout_s=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.json()
    assert out["seed"] == 7 and isinstance(out["requests"], int) and out["requests"] >= 400
    api = out["parts"]["api"]  # type: ignore[index]
    assert api["state_checked"] > 0 and len(api["by_method"]) == len(METHODS)
    assert out["meets_targets"] is True, out["findings"]
