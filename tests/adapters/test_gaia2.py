"""Gaia2 on sclate's scheduler: ARE's scenarios, its world process, parity with ARE's
own oracle runner, and bad scenario files.

The world runs in ARE's own environment (.venv-are, built by `make venv`), a real
process: nothing of ARE is doubled here."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from adapters import AgentEnvironment, InProcessAgent, JudgeReply, ScenarioConfig, TurnResult
from adapters.gaia2 import ARE_PYTHON_ENV, ARE_SCENARIOS, Gaia2Benchmark, Gaia2World, WorldProcess, event_specs
from adapters.gaia2._parity import after_conditions, compare_orders
from sclated.errors import FailedPrecondition, InvalidArgument, NotFound
from sclated.runs import AgentEntry, Registry, RunWorker
from sclated.runs._registry import default_registry
from sclated.runs._spec import RunSpec
from sclated.scheduler import After, At, DeliverPrompt, When, WorldEvent
from tests.runs.doubles import NullSink


def _spec(**benchmark: Any) -> RunSpec:
    return RunSpec.from_dict(
        {
            "benchmark": {"name": "gaia2", "options": {"oracle": True}, **benchmark},
            "agent": {"harness": "scripted"},
            "clock": {"mode": "discrete"},
        }
    )


async def _oracle_run(**benchmark: Any) -> tuple[RunWorker, Any]:
    worker = RunWorker("local/gaia2", _spec(**benchmark), default_registry(), NullSink())
    outcome = await worker.run()
    return worker, outcome


async def _are_oracle(source: dict[str, Any]) -> dict[str, Any]:
    process = WorldProcess()
    await process.start()
    try:
        return await process.request("are_oracle", source=source)
    finally:
        await process.close()


OWN_SCENARIOS = ("sclate_email_followup", "sclate_calendar_chain", "sclate_two_turns")


def test_the_projects_own_scenarios_are_built_in() -> None:
    assert set(OWN_SCENARIOS) <= set(Gaia2Benchmark().info.builtin_scenarios)


@pytest.mark.parametrize("name", (*ARE_SCENARIOS, *OWN_SCENARIOS))
async def test_oracle_run_matches_ares_own_runner(name: str) -> None:
    worker, outcome = await _oracle_run(scenario=name)
    assert outcome.state == "SUCCEEDED", outcome.reason
    verdict = worker.verdicts["gaia2"]
    world = worker.scenario.world
    assert isinstance(world, Gaia2World)
    description = world.description
    assert description is not None
    are = await _are_oracle(world.source)
    assert verdict.details["success"] is are["success"] is True
    assert verdict.score == 1.0
    parity = compare_orders(
        verdict.details["executed"],
        are["order"],
        tick_s=description["tick_s"],
        after_condition=after_conditions(description),
    )
    assert parity.equal, parity.problems
    assert parity.events == len([e for e in are["order"] if e["event_type"] != "CONDITION"]) > 0


async def test_a_condition_fires_at_the_change_that_makes_it_true() -> None:
    """ARE polls the condition once per tick and, at t=5, before the email that makes it
    true: its successor runs at 7 there. sclate checks at the change: 5 + 1 s = 6."""
    worker, outcome = await _oracle_run(scenario="scenario_events_tutorial")
    assert outcome.state == "SUCCEEDED", outcome.reason
    executed = worker.verdicts["gaia2"].details["executed"]
    times = [e["time"] for e in executed if e["tool"] == "EmailClientApp__add_email"]
    assert times == [2.0, 5.0, 6.0, 15.0]
    are = await _are_oracle({"registry": "scenario_events_tutorial"})
    are_times = [e["time"] for e in are["order"] if e["tool"] == "EmailClientApp__add_email"]
    assert are_times == [2, 5, 7, 15]


def test_parity_reports_a_different_order_and_a_late_event() -> None:
    ours = [
        {"event_id": "a", "event_type": "ENV", "time": 1.0, "tool": "X__f", "failed": False},
        {"event_id": "b", "event_type": "ENV", "time": 2.0, "tool": "X__g", "failed": False},
    ]
    swapped = [ours[1], ours[0]]
    assert not compare_orders(ours, swapped, tick_s=1).equal
    late = [ours[0], {**ours[1], "time": 3.0}]
    report = compare_orders(ours, late, tick_s=1)
    assert not report.equal and "b: at 2.0 on sclate, 3.0 on ARE" in report.problems[0]
    # ...unless b follows a condition: then one tick of ARE's polling is the known skew.
    assert compare_orders(ours, late, tick_s=1, after_condition=frozenset({"b"})).equal
    failed = [ours[0], {**ours[1], "failed": True}]
    assert not compare_orders(ours, failed, tick_s=1).equal


def test_events_map_onto_at_after_and_when() -> None:
    description: dict[str, Any] = {
        "start_time": 100.0,
        "duration": 50,
        "events": [
            {"event_id": "root", "class_name": "Event", "event_type": "ENV", "event_time": None,
             "relative": 2, "deps": [], "app": "A", "function": "f"},
            {"event_id": "fixed", "class_name": "Event", "event_type": "ENV", "event_time": 130,
             "relative": None, "deps": [], "app": "A", "function": "f"},
            {"event_id": "cond", "class_name": "ConditionCheckEvent", "event_type": "CONDITION",
             "event_time": None, "relative": None, "deps": ["root"], "app": "", "function": "c"},
            {"event_id": "next", "class_name": "Event", "event_type": "ENV", "event_time": None,
             "relative": 1.5, "deps": ["cond"], "app": "A", "function": "f"},
        ],
    }  # fmt: skip
    description["events"].append(
        {"event_id": "late", "class_name": "Event", "event_type": "ENV", "event_time": 140,
         "relative": None, "deps": ["root"], "app": "A", "function": "f"}
    )  # fmt: skip
    specs = {s.id: s for s in event_specs(description)}
    assert specs["late"].trigger == After(("root", "late#at"), 0)
    assert specs["late#at"].trigger == At(140 * 10**9) and specs["late#at"].effects == ()
    assert specs["root"].trigger == At(102 * 10**9)
    assert specs["root"].effects == (WorldEvent("root"),)
    assert specs["fixed"].trigger == At(130 * 10**9)
    assert specs["cond#arm"].trigger == After(("root",), 0)
    assert isinstance(specs["cond"].trigger, When) and specs["cond"].effects == ()
    assert specs["next"].trigger == After(("cond",), 1_500_000_000)
    assert specs["gaia2.deadline"].trigger == At(150 * 10**9)
    assert isinstance(specs["gaia2.end"].trigger, When)


# -- scenario files ---------------------------------------------------------------------


def _good_file() -> dict[str, Any]:
    return {
        "version": "are_simulation_v1",
        "metadata": {"definition": {"scenario_id": "tiny", "start_time": 1_700_000_000}},
        "apps": [{"name": "AgentUserInterface", "class_name": "AgentUserInterface", "app_state": {"messages": []}}],
        "events": [
            {
                "class_name": "Event",
                "event_type": "USER",
                "event_id": "task",
                "event_time": None,
                "event_relative_time": 1,
                "dependencies": [],
                "action": {
                    "action_id": "a1",
                    "app": "AgentUserInterface",
                    "function": "send_message_to_agent",
                    "operation_type": "write",
                    "args": [{"name": "content", "value": "hello", "value_type": "str"}],
                },
            }
        ],
    }


def _load(tmp_path: Path, doc: Any, *, raw: str | None = None) -> Any:
    path = tmp_path / "tiny.json"
    path.write_text(raw if raw is not None else json.dumps(doc))
    return Gaia2Benchmark().load(ScenarioConfig(data_dir=tmp_path, scenario="tiny"))


def _broken(change: Any) -> dict[str, Any]:
    doc = _good_file()
    change(doc)
    return doc


@pytest.mark.parametrize(
    ("doc", "raw", "named"),
    [
        (None, "{not json", "line 1 column 2"),
        (_broken(lambda d: d.update(version="v0")), None, "version"),
        (_broken(lambda d: d["metadata"]["definition"].pop("scenario_id")), None, "metadata.definition.scenario_id"),
        (_broken(lambda d: d["events"][0].update(dependencies=["ghost"])), None, "events[0].dependencies"),
        (_broken(lambda d: d["events"][0]["action"].update(app="Mail")), None, "events[0].action.app"),
        (_broken(lambda d: d["events"][0].update(event_type="LATER")), None, "events[0].event_type"),
        (_broken(lambda d: d["events"][0].update(event_relative_time=-1)), None, "events[0].event_relative_time"),
        (_broken(lambda d: d.update(apps=[])), None, "apps"),
    ],
)
def test_a_bad_scenario_file_is_refused_naming_file_and_field(
    tmp_path: Path, doc: Any, raw: str | None, named: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        _load(tmp_path, doc, raw=raw)
    assert str(tmp_path / "tiny.json") in err.value.message
    assert named in err.value.message


def test_a_good_scenario_file_loads(tmp_path: Path) -> None:
    scenario = _load(tmp_path, _good_file())
    assert scenario.name == "tiny"


async def test_a_file_only_are_can_reject_fails_the_run_naming_the_file(tmp_path: Path) -> None:
    doc = _good_file()
    doc["apps"][0]["class_name"] = "NoSuchApp"
    (tmp_path / "tiny.json").write_text(json.dumps(doc))
    with pytest.raises(InvalidArgument) as err:
        await _oracle_run(data_dir=str(tmp_path), scenario="tiny")
    assert "tiny.json" in err.value.message and "ARE rejected" in err.value.message


async def test_a_json_scenario_runs_and_matches_are(tmp_path: Path) -> None:
    (tmp_path / "tiny.json").write_text(json.dumps(_good_file()))
    worker, outcome = await _oracle_run(data_dir=str(tmp_path), scenario="tiny")
    assert outcome.state == "SUCCEEDED", outcome.reason
    executed = worker.verdicts["gaia2"].details["executed"]
    assert [(e["event_id"], e["time"]) for e in executed] == [("task", 1_700_000_001.0)]
    are = await _are_oracle({"file": str(tmp_path / "tiny.json")})
    assert compare_orders(executed, are["order"], tick_s=1).equal


def test_unknown_scenario_and_options_are_refused() -> None:
    bench = Gaia2Benchmark()
    with pytest.raises(InvalidArgument, match="unknown gaia2 scenario 'nope'"):
        bench.load(ScenarioConfig(scenario="nope"))
    with pytest.raises(InvalidArgument, match="unknown gaia2 option"):
        bench.load(ScenarioConfig(scenario="scenario_tutorial", options={"speed": 2}))


async def test_without_ares_environment_the_run_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ARE_PYTHON_ENV, "/nonexistent/python")
    with pytest.raises(FailedPrecondition, match="make venv"):
        await _oracle_run(scenario="scenario_tutorial")


# -- with an agent -------------------------------------------------------------------------


class ToolUsingAgent(InProcessAgent):
    """Test double: answers each user message by calling the world's tools as a harness
    does through the sandbox's ``are`` command (AgentEnvironment.world), then replies."""

    def __init__(self, calls: list[dict[str, Any]], later: list[dict[str, Any]] | None = None) -> None:
        self._calls = calls
        self._later = later or []
        self._world: Any = None
        self.replies: list[dict[str, Any]] = []
        self.prompts: list[str] = []

    @property
    def name(self) -> str:
        return "tool-user"

    async def prepare(self, env: AgentEnvironment) -> None:
        self._world = env.world

    async def start_session(self, session: str) -> None:
        pass

    async def stop_session(self) -> None:
        pass

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        received = time.monotonic_ns()
        self.prompts.append(prompt.text)
        reply = "I asked Bob."
        if "dinner on Friday" in prompt.text:
            for call in self._calls:
                self.replies.append(await self._world({"op": "call", **call}))
        elif "Email carol" in prompt.text:
            for call in self._later:
                self.replies.append(await self._world({"op": "call", **call}))
            reply = "Bob will be there at 8, and Carol knows."
        return TurnResult(reply=reply, started_ns=0, ended_ns=0, received_wall_ns=received)


class JudgeDouble:
    """Test double for the run's judge: answers each of ARE's judge prompts in the format
    it asks for, approving or rejecting; keeps the prompts."""

    def __init__(self, approve: bool) -> None:
        self.approve = approve
        self.prompts: list[str] = []

    async def __call__(self, prompt: str, *, max_tokens: int | None = None) -> JudgeReply:
        self.prompts.append(prompt)
        if "<subtask>" in prompt:
            text = "<subtask>Ask Bob about dinner and report.</subtask>"
        elif "[[Success]]" in prompt or "[[Failure]]" in prompt:
            text = "- Reasoning: compared.\n- Evaluation: " + ("[[Success]]" if self.approve else "[[Failure]]")
        else:
            text = "Reasoning: compared.\nEvaluation: " + ("[[True]]" if self.approve else "[[False]]")
        return JudgeReply(text=text, endpoint="judge-double", model="double", embedded=False)


def _with_agent(agent: ToolUsingAgent) -> tuple[Registry, RunSpec]:
    registry = default_registry()
    registry.add_agent(AgentEntry(agent.name, "test double", sandboxed=False, factory=lambda o, m: agent))
    spec = RunSpec.from_dict(
        {"benchmark": {"name": "gaia2", "scenario": "sclate_two_turns"}, "agent": {"harness": agent.name}}
    )
    return registry, spec


async def test_an_agents_tool_calls_reach_the_apps_and_bad_ones_come_back_as_tool_errors() -> None:
    agent = ToolUsingAgent(
        [
            {"app": "MessagingAppV2", "function": "send_message", "args": {"user_id": "bob", "content": "Dinner?"}},
            {"app": "MessagingAppV2", "function": "send_mesage", "args": {}},
            {"app": "MessagingAppV2", "function": "send_message", "args": {"user": "bob"}},
            {"app": "Nowhere", "function": "x", "args": {}},
        ]
    )
    registry, spec = _with_agent(agent)
    worker = RunWorker("local/gaia2-agent", spec, registry, NullSink())
    outcome = await worker.run()
    assert outcome.state == "SUCCEEDED", outcome.reason
    ok, typo, bad_args, no_app = agent.replies
    assert ok["error"] is None and ok["result"] == "conv-bob"
    assert "has no tool 'send_mesage'" in typo["error"] and "send_message" in typo["error"]
    assert "unknown argument(s) user" in bad_args["error"] and "missing argument(s) user_id" in bad_args["error"]
    assert "no app 'Nowhere'" in no_app["error"]
    # The user's two tasks and Bob's message in between reached the agent, in order;
    # the first carries the `are` instructions.
    assert "`are` command" in agent.prompts[0] and "dinner on Friday" in agent.prompts[0]
    assert "New message received" in agent.prompts[1]
    assert "Email carol@example.com" in agent.prompts[2]
    executed = worker.verdicts["gaia2"].details["executed"]
    tools = [(e["event_type"], e["tool"], e["failed"]) for e in executed]
    assert tools[:3] == [
        ("USER", "AgentUserInterface__send_message_to_agent", False),
        ("AGENT", "MessagingAppV2__send_message", False),
        ("AGENT", "AgentUserInterface__send_message_to_user", False),  # its reply, as ARE's answer
    ]
    # The second turn's events waited for that answer (ARE's turn condition), then ran
    # 600 s and 660 s after it, as the scenario says.
    answer_t = executed[2]["time"]
    bob = next(e for e in executed if e["event_id"] == "bob_answers")
    task2 = next(e for e in executed if e["event_id"] == "task2")
    assert bob["time"] == pytest.approx(answer_t + 600, abs=0.5)
    assert task2["time"] == pytest.approx(answer_t + 660, abs=0.5)
    # Every call is journaled, in the world's order.
    assert worker.loop is not None
    assert [a.data["function"] for a in worker.loop.scheduler.snapshot().actions if a.kind == "world_call"] == [
        "send_message",
        "send_mesage",
        "send_message",
        "x",
    ]


ORACLE_LIKE = (
    [{"app": "MessagingAppV2", "function": "send_message", "args": {"user_id": "bob", "content": "Dinner on Friday?"}}],
    [
        {
            "app": "EmailClientV2",
            "function": "send_email",
            "args": {"recipients": ["carol@example.com"], "subject": "Friday dinner", "content": "Bob comes at 8."},
        }
    ],
)


@pytest.mark.parametrize("approve", [True, False])
async def test_ares_judge_grades_the_agent_with_the_runs_judge(approve: bool) -> None:
    """ARE's own GraphPerEventJudge: exact arguments are checked by its code, the rest
    (paraphrased messages) by the run's judge, whose verdict decides."""
    agent = ToolUsingAgent(*ORACLE_LIKE)
    registry, spec = _with_agent(agent)
    judge = JudgeDouble(approve)
    worker = RunWorker("local/gaia2-judged", spec, registry, NullSink(), judge=judge)
    outcome = await worker.run()
    assert outcome.state == "SUCCEEDED", outcome.reason
    verdict = worker.verdicts["gaia2"]
    assert verdict.graded
    assert verdict.details["validator"] == "ARE GraphPerEventJudge"
    assert verdict.details["judges"] == [
        {"judge_endpoint": "judge-double", "judge_model": "double", "judge_embedded": False}
    ]
    assert verdict.details["judge_calls"] == len(judge.prompts) > 0
    assert any("Dinner on Friday?" in p for p in judge.prompts)  # the paraphrase went to the judge
    assert verdict.score == (1.0 if approve else 0.0), verdict.details["rationale"]


class JournalSink(NullSink):
    """Test double for the run manager's sink: keeps the durable journal."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def journal(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)


async def test_a_resumed_run_rebuilds_the_world_from_the_journal() -> None:
    """A daemon restart replays the journal: the world process is new, and the journal's
    world fires and the agent's calls, applied again in order, give the same world."""
    agent = ToolUsingAgent(*ORACLE_LIKE)
    registry, spec = _with_agent(agent)
    sink = JournalSink()
    first = RunWorker("local/gaia2-resume", spec, registry, sink)
    outcome = await first.run()
    assert outcome.state == "SUCCEEDED", outcome.reason
    before = first.verdicts["gaia2"].details["executed"]
    again = RunWorker("local/gaia2-resume", spec, registry, NullSink(), journal=sink.entries)
    world = again.scenario.world
    assert isinstance(world, Gaia2World)
    await again._open_world()
    try:
        await again._rebuild_world(again._build())
        after = await world.executed()
    finally:
        await again._close_world()
    assert [(e["event_id"], e["time"], e["tool"], e["failed"]) for e in after] == [
        (e["event_id"], e["time"], e["tool"], e["failed"]) for e in before
    ]
    assert any(e["event_type"] == "AGENT" for e in after) and any(e["event_type"] == "ENV" for e in after)


async def test_a_world_process_that_dies_fails_the_run_naming_it() -> None:
    """Broken on purpose: the world process is killed mid-run. The run must not succeed."""
    spec = RunSpec.from_dict(
        {
            "benchmark": {"name": "gaia2", "scenario": "sclate_two_turns"},
            "agent": {"harness": "scripted", "options": {"turn_ms": 300}},
        }
    )
    worker = RunWorker("local/gaia2-killed", spec, default_registry(), NullSink())
    world = worker.scenario.world
    assert isinstance(world, Gaia2World)

    async def kill_once_open() -> None:
        while world.description is None:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        process = world._process
        assert process is not None and process._proc is not None
        process._proc.kill()

    killer = asyncio.create_task(kill_once_open())
    outcome = await worker.run()
    await killer
    assert outcome.state == "FAILED"
    assert "the Gaia2 world process exited (code -9)" in outcome.reason


@pytest.mark.parametrize(
    ("doc", "raw", "named"),
    [
        (_broken(lambda d: d["events"][0].update(event_type=["USER"])), None, "events[0].event_type"),
        (_broken(lambda d: d["events"][0]["action"].update(app={"name": "x"})), None, "events[0].action.app"),
        (_broken(lambda d: d["apps"][0].update(name="Other")), None, "apps[].name: Other"),
        (None, '{"version": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        (None, '{"version": ' + "9" * 5000 + "}", "an integer of more than 4300 digits"),
    ],
)
def test_a_scenario_file_with_values_of_the_wrong_kind_is_refused_naming_file_and_field(
    tmp_path: Path, doc: Any, raw: str | None, named: str
) -> None:
    # Before: TypeError (unhashable type: 'list'), RecursionError or ValueError escaped
    # CreateRun; a renamed app blamed the event without naming the apps' names.
    with pytest.raises(InvalidArgument) as err:
        _load(tmp_path, doc, raw=raw)
    assert str(tmp_path / "tiny.json") in err.value.message and named in err.value.message


def test_a_scenario_file_that_is_not_utf8_or_missing_is_named(tmp_path: Path) -> None:
    (tmp_path / "tiny.json").write_bytes(json.dumps(_good_file()).encode("utf-16"))
    with pytest.raises(InvalidArgument, match=r"tiny\.json is not UTF-8 text"):
        Gaia2Benchmark().load(ScenarioConfig(data_dir=tmp_path, scenario="tiny"))
    # Before: "name one scenario file with --scenario", the file asked for unnamed.
    with pytest.raises(NotFound, match=r"has no scenario file other\.json \(files: tiny\)"):
        Gaia2Benchmark().load(ScenarioConfig(data_dir=tmp_path, scenario="other"))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda d: d["events"][0]["action"]["args"][0].pop("value_type"), "events[0].action.args[0].value_type"),
        (lambda d: d["events"][0]["action"]["args"][0].update(value_type=True), "events[0].action.args[0].value_type"),
        (lambda d: d["events"][0].pop("dependencies"), "events[0].dependencies"),
    ],
)
def test_what_are_would_refuse_without_naming_the_field_is_refused_at_creation(
    tmp_path: Path, change: Any, named: str
) -> None:
    # Before: accepted at CreateRun; ARE then failed the run with "expected string or
    # bytes-like object" or "2 validation errors for ExportedTrace", no field named.
    with pytest.raises(InvalidArgument) as err:
        _load(tmp_path, _broken(change))
    assert named in err.value.message


async def test_are_s_own_refusal_names_the_fields_it_refused(tmp_path: Path) -> None:
    doc = _good_file()
    doc["events"][0]["class_name"] = 7  # only ARE's pydantic models check it
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(doc))
    world = WorldProcess(cwd=tmp_path / "are")
    await world.start()
    try:
        with pytest.raises(InvalidArgument) as err:
            await world.request("open", source={"file": str(path)}, oracle=True)
    finally:
        await world.close()
    # Before: "ValidationError: 2 validation errors for ExportedTrace (+6 lines)".
    assert str(path) in err.value.message and "events.0.ExportedEvent.class_name" in err.value.message
