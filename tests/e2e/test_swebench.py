"""SWE-bench for real: the project's own instances in their own locally built images
on the Docker engine, graded by swebench 5.0.2; then a run of one repository's arc
with the reference harness in its sandbox against the embedded model."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiodocker
import pytest
import pytest_asyncio
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from adapters import JudgeReply, ScenarioConfig
from adapters.swebench import SWEBenchmark, SWEScenario, register_images
from sclated.bench import start_daemon_process
from sclated.runs._task_containers import EngineTaskContainers
from sclated.runtime import DockerRuntime, Runtime
from sclated.scheduler import Grade

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

FAST = {"max_tokens": 24, "max_steps": 2}


class HostWorkspaceContext:
    """A test double of the run's GradeContext: the agent's workspace is a host folder
    (the repository as the agent left it); everything after (the instance's image,
    the patch commands, the tests, swebench's report) is the real grading path."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo

    async def exec_in_workspace(self, command: str, *, timeout_s: float = 120.0) -> tuple[int, str]:
        raise AssertionError("SWE grading reads the repository, it runs nothing in the workspace")

    async def export_from_workspace(self, src: str, dest: Path) -> None:
        await asyncio.to_thread(shutil.copytree, self.repo, dest, symlinks=True)

    def reply_for(self, round_id: str) -> str | None:
        return None

    async def judge(self, prompt: str) -> JudgeReply:
        raise AssertionError("no judge in SWE grading")


@pytest_asyncio.fixture
async def runtime() -> AsyncIterator[Runtime]:
    rt = await DockerRuntime.connect("test-swebench")
    try:
        yield rt
    finally:
        for c in await rt.list_containers({"sclate.daemon": "test-swebench"}):
            await rt.remove(c.id)
        await rt.close()


def _worktree(checkout: Path, dest: Path, patch: str | None) -> Path:
    shutil.copytree(checkout, dest, symlinks=True)
    if patch:
        subprocess.run(
            ["git", "-c", "safe.directory=*", "-C", str(dest), "apply", "-"], input=patch.encode(), check=True
        )
    return dest


async def test_gold_patches_resolve_every_own_instance_and_the_empty_patch_none(
    tmp_path: Path, runtime: Runtime
) -> None:
    register_images()
    bench = SWEBenchmark("swebench")
    instances = bench.instances(ScenarioConfig(scenario="own"))
    assert len(instances) >= 5
    containers = EngineTaskContainers(lambda: asyncio.sleep(0, runtime), "t", "swe-gold")
    results: dict[str, tuple[float | None, float | None]] = {}
    for repo in sorted({i.repo for i in instances}):
        scenario = bench.load(ScenarioConfig(scenario="own", options={"repo": repo}))
        assert isinstance(scenario, SWEScenario)
        await scenario.environment.open(tmp_path / repo.replace("/", "_"), containers)
        try:
            for inst in scenario.instances:
                checkout = scenario.environment.prepared[inst.instance_id].checkout
                gold = _worktree(checkout, tmp_path / f"{inst.instance_id}-gold", inst.patch)
                empty = _worktree(checkout, tmp_path / f"{inst.instance_id}-empty", None)
                won = await scenario.grade(Grade(inst.instance_id), HostWorkspaceContext(gold))
                lost = await scenario.grade(Grade(inst.instance_id), HostWorkspaceContext(empty))
                results[inst.instance_id] = (won.score, lost.score)
                assert won.score == 1.0 and won.details["resolved"], (inst.instance_id, won.reason)
                status = won.details["tests_status"]
                assert sorted(status["FAIL_TO_PASS"]["success"]) == sorted(inst.fail_to_pass)
                assert sorted(status["PASS_TO_PASS"]["success"]) == sorted(inst.pass_to_pass)
                assert lost.score == 0.0 and lost.reason == "not resolved: the agent changed nothing"
                status = lost.details["tests_status"]
                # The data's own check: without the fix every FAIL_TO_PASS test fails
                # and every PASS_TO_PASS test passes.
                assert sorted(status["FAIL_TO_PASS"]["failure"]) == sorted(inst.fail_to_pass), inst.instance_id
                assert sorted(status["PASS_TO_PASS"]["success"]) == sorted(inst.pass_to_pass), inst.instance_id
        finally:
            await scenario.environment.close()
    print("gold/empty scores:", json.dumps(results))
    # SWE-Gym's layout (no eval script, log parser or image in the rows): the eval
    # script is made here, as swebench 4.x made them, and grades the same way.
    gym = SWEBenchmark("swegym").load(ScenarioConfig(scenario="own", options={"repo": "sclate/tinyini"}))
    assert isinstance(gym, SWEScenario) and all("eval_script" not in i.raw for i in gym.instances)
    await gym.environment.open(tmp_path / "gym", containers)
    try:
        for inst in gym.instances:
            checkout = gym.environment.prepared[inst.instance_id].checkout
            gold = _worktree(checkout, tmp_path / f"gym-{inst.instance_id}-gold", inst.patch)
            empty = _worktree(checkout, tmp_path / f"gym-{inst.instance_id}-empty", None)
            won = await gym.grade(Grade(inst.instance_id), HostWorkspaceContext(gold))
            lost = await gym.grade(Grade(inst.instance_id), HostWorkspaceContext(empty))
            assert (won.score, lost.score) == (1.0, 0.0), (inst.instance_id, won.reason, lost.reason)
            assert sorted(lost.details["tests_status"]["FAIL_TO_PASS"]["failure"]) == sorted(inst.fail_to_pass)
    finally:
        await gym.environment.close()
    # A change that fixes nothing applies, runs the tests and stays unresolved.
    inst = instances[0]
    scenario = bench.load(ScenarioConfig(scenario="own", subset=(inst.instance_id,)))
    assert isinstance(scenario, SWEScenario)
    await scenario.environment.open(tmp_path / "wrong", containers)
    wrong = _worktree(scenario.environment.prepared[inst.instance_id].checkout, tmp_path / "wrong-tree", None)
    target = sorted(p for p in wrong.rglob("*.py") if ".git" not in p.parts and "tests" not in p.parts)[0]
    target.write_text(target.read_text() + "\n# the agent was here\n")
    verdict = await scenario.grade(Grade(inst.instance_id), HostWorkspaceContext(wrong))
    assert verdict.score == 0.0 and verdict.details["patch_applied"] is True, verdict.reason
    assert verdict.reason.startswith("not resolved: FAIL_TO_PASS failing"), verdict.reason
    assert verdict.details["files_changed"] == [str(target.relative_to(wrong))]
    # An upstream instance (not one the project can build) takes the image the run's map names.
    row = {**inst.raw, "instance_id": "acme__ledger-1", "repo": "acme/ledger", "image": "acme/none:1"}
    (tmp_path / "upstream").mkdir()
    (tmp_path / "upstream" / "rows.jsonl").write_text(json.dumps(row) + "\n")
    async with aiodocker.Docker() as docker:
        await docker.images.tag(
            scenario.environment.prepared[inst.instance_id].image, "sclate-test/mapped-env", tag="1"
        )
    try:
        (tmp_path / "images.json").write_text(json.dumps({"acme__ledger-1": "sclate-test/mapped-env:1"}))
        mapped = SWEBenchmark("swebench").load(
            ScenarioConfig(data_dir=tmp_path / "upstream", options={"images": str(tmp_path / "images.json")})
        )
        assert isinstance(mapped, SWEScenario)
        await mapped.environment.open(tmp_path / "mapped", containers)
        prepared = mapped.environment.prepared["acme__ledger-1"]
        assert prepared.image == "sclate-test/mapped-env:1" and (prepared.checkout / ".git").is_dir()
    finally:
        async with aiodocker.Docker() as docker:
            await docker.images.delete("sclate-test/mapped-env:1")
    async with aiodocker.Docker() as docker:
        left = await docker.containers.list(all=True, filters=json.dumps({"label": ["sclate.run=swe-gold"]}))
    assert not left, "grading left containers behind"


@pytest.mark.model
async def test_one_repositorys_arc_with_the_reference_harness(tmp_path: Path) -> None:
    register_images()
    bench = SWEBenchmark("swebench")
    instances = bench.instances(ScenarioConfig(scenario="own"))
    repo = max({i.repo for i in instances}, key=lambda r: sum(i.repo == r for i in instances))
    arc = sorted((i for i in instances if i.repo == repo), key=lambda i: i.created_at)[:2]
    proc, ready = await start_daemon_process(tmp_path / "state")
    try:
        import grpc

        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(name="swebench", scenario="own", subset=[i.instance_id for i in arc]),
                agent=pb.AgentSpec(harness="reference"),
            )
            run.agent.options.update(FAST)
            created = await stub.CreateRun(pb.CreateRunRequest(run=run))
            events = [ev async for ev in stub.WatchRun(pb.WatchRunRequest(name=created.name))]
            final = await stub.GetRun(pb.GetRunRequest(name=created.name))
            assert final.state == pb.SUCCEEDED, final.state_reason
            assert final.results.rounds_graded == final.results.rounds == len(arc)
            verdicts = [e.verdict for e in events if e.WhichOneof("kind") == "verdict"]
            assert [v.round_id for v in verdicts] == [i.instance_id for i in arc]
            assert all(v.graded and v.reason.startswith(("resolved", "not resolved")) for v in verdicts)
            # Each instance's session started on its own working-day slot, in order.
            starts = [e for e in events if e.WhichOneof("kind") == "fire" and e.fire.event_id.endswith(":start")]
            assert [e.fire.event_id for e in starts] == [f"swe:{i.instance_id}:start" for i in arc]
            assert starts[0].sim_time.ToNanoseconds() < starts[1].sim_time.ToNanoseconds()
            sched = final.results.scheduler
            assert sched.jumps > 0 and sched.in_order and sched.out_of_order == 0 and sched.early_deliveries == 0
            print(
                "swebench own arc:",
                json.dumps(
                    {
                        "rounds": final.results.rounds,
                        "rounds_graded": final.results.rounds_graded,
                        "score": final.results.score,
                        "events_fired": sched.events_fired,
                        "in_order": sched.in_order,
                        "delivery_delay_ms_p50": sched.delivery_delay_ms_p50,
                        "delivery_delay_ms_max": sched.delivery_delay_ms_max,
                        "compression_ratio": sched.compression_ratio,
                        "compression_limit": sched.compression_limit,
                        "reasons": [v.reason for v in verdicts],
                    }
                ),
            )
            # The grading kept its evidence: the agent's diff and the test log, per instance.
            (run_dir,) = (tmp_path / "state" / "runs").glob(f"*/{created.name.rsplit('/', 1)[-1]}")
            for inst in arc:
                assert (run_dir / "swebench" / inst.instance_id / "test_output.txt").is_file()
                assert (run_dir / "swebench" / inst.instance_id / "patch.diff").is_file()
            # Upstream data whose environment image is not on the engine: the run fails
            # before its first event, naming the instance and how to provide the image.
            row = {**arc[0].raw, "instance_id": "acme__ledger-1", "repo": "acme/ledger", "image": "acme/none:1"}
            data = tmp_path / "state" / "data" / "upstream"  # in the daemon's default data root
            data.mkdir(parents=True, exist_ok=True)
            (data / "rows.jsonl").write_text(json.dumps(row) + "\n")
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(name="swebench", data_dir=str(data)),
                agent=pb.AgentSpec(harness="reference"),
            )
            created = await stub.CreateRun(pb.CreateRunRequest(run=run))
            async for _ in stub.WatchRun(pb.WatchRunRequest(name=created.name)):
                pass
            failed = await stub.GetRun(pb.GetRunRequest(name=created.name))
            assert failed.state == pb.FAILED
            assert "instance acme__ledger-1 has no environment image" in failed.state_reason
            assert "images=FILE" in failed.state_reason
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
