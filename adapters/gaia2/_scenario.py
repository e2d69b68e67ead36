"""Gaia2 (ARE) scenarios on sclate's scheduler.

ARE's event DAG maps onto sclate's triggers one to one:

- a root event at ``start + relative`` (or an absolute ``event_time``) is ``At``;
  an event with dependencies and an absolute time waits for both (``After`` its
  dependencies and a timer ``At`` that time);
- an event after others (ARE's ``depends_on(..., delay)``) is ``After(deps, delay)``:
  it fires ``delay`` after the last dependency *fired*, which is ARE's "after the
  dependencies' times" with no tick between;
- a condition (ARE's ``ConditionCheckEvent``, polled once per tick there) is armed by
  ``After``/``At`` like any event, then checked by the world after every change, and
  its own event is a ``When`` over the world's answer: it fires at the change that
  made it true, not at the next tick;
- ARE's ``StopEvent`` ends the world; the run then grades with ARE's validation.

Every event is a :class:`WorldEvent` executed by the run's world process
(``_world.py``) at its fire time. Oracle mode executes the scenario's oracle
actions too, as ARE's oracle runner does; the parity test compares the two.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters._base import (
    BenchmarkInfo,
    Capability,
    GradeContext,
    Judge,
    RoundInfo,
    ScenarioConfig,
    ToolReply,
    Verdict,
    WorldChange,
)
from adapters.gaia2._files import check_scenario_file
from adapters.gaia2._world import WorldProcess
from sclated.errors import FailedPrecondition, InvalidArgument, NotFound
from sclated.scheduler import (
    After,
    AgentControl,
    At,
    DeliverPrompt,
    EventSource,
    EventSpec,
    Grade,
    MutateWorld,
    Notify,
    Snapshot,
    StopRun,
    When,
    WorldEvent,
)

__all__ = ["ARE_SCENARIOS", "Gaia2Benchmark", "Gaia2Scenario", "Gaia2World", "event_specs"]

_S = 1_000_000_000
JUDGE_MAX_TOKENS = 768
"""ARE's judge prompts ask for reasoning before the verdict ([[True]], [[success]])."""
_OWN = Path(__file__).with_name("scenarios")
ARE_SCENARIOS = (
    "scenario_tutorial",
    "scenario_apps_tutorial",
    "scenario_events_tutorial",
    "scenario_validation_tutorial",
    "scenario_find_image_file",
)
"""The scenarios shipped in ARE's wheel that run offline (the MCP and HF demos need
a network or a bare ``python`` with ``mcp``)."""

MET = "gaia2.met."
QUIESCENT = "gaia2.quiescent"
STOPPED = "gaia2.stopped"
FAILED = "gaia2.failed"
DEADLINE = "gaia2.deadline"
TURNS_OPEN = "gaia2.turns_open"
END = "gaia2.end"
GRADE_ID = "gaia2"


def _ns(seconds: float) -> int:
    return round(seconds * _S)


def event_specs(description: Mapping[str, Any]) -> list[EventSpec]:
    """The scheduler's events for a world's description (``open``'s answer)."""
    start = float(description["start_time"])
    specs: list[EventSpec] = []
    agent = not description.get("oracle", True)
    if agent:  # one session for the whole scenario, as ARE's agent lives through it
        specs.append(EventSpec("gaia2.session", At(_ns(start)), (AgentControl("start"),)))
    for ev in description["events"]:
        if agent and ev["class_name"] == "OracleEvent":
            continue  # what the agent is expected to do: the judge's, not the scheduler's
        eid = str(ev["event_id"])
        deps = tuple(str(d) for d in ev["deps"])
        rel = ev.get("relative")
        absolute = ev.get("event_time")
        data = {"gaia2_type": ev["event_type"], "app": ev["app"], "function": ev["function"]}
        if deps and rel is None and absolute is not None:
            # ARE: once the dependencies ran, at its own absolute time (or at once, if
            # that passed): After the dependencies and a timer at that time.
            specs.append(EventSpec(f"{eid}#at", At(_ns(float(absolute))), (), data=data))
            trigger: At | After = After((*deps, f"{eid}#at"), 0)
        elif deps:
            trigger = After(deps, _ns(float(rel or 0)))
        elif absolute is not None:
            trigger = At(_ns(float(absolute)))
        else:
            trigger = At(_ns(start + float(rel or 0)))
        if ev["class_name"] in ("ConditionCheckEvent", "ValidationEvent"):
            specs.append(EventSpec(f"{eid}#arm", trigger, (WorldEvent(eid),), data=data))
            specs.append(EventSpec(eid, When(_met(eid), f"ARE condition {eid} holds"), (), data=data))
        else:
            specs.append(EventSpec(eid, trigger, (WorldEvent(eid),), data=data))
    duration = description.get("duration")
    if duration:
        specs.append(EventSpec(DEADLINE, At(_ns(start + float(duration))), (MutateWorld({DEADLINE: True}),)))
    end_effects: tuple[Any, ...] = (AgentControl("stop"), Grade(GRADE_ID)) if agent else (Grade(GRADE_ID),)
    specs.append(EventSpec(END, When(_ended, "the world has nothing left to run"), end_effects))
    specs.append(
        EventSpec("gaia2.stop", When(_graded, "ARE's validation recorded"), (StopRun("Gaia2 scenario complete"),))
    )
    return specs


def _met(eid: str) -> Any:
    key = MET + eid

    def predicate(snap: Snapshot) -> bool:
        return bool(snap.world.get(key))

    return predicate


def _graded(snap: Snapshot) -> bool:
    return GRADE_ID in snap.grades


def _ended(snap: Snapshot) -> bool:
    w = snap.world
    if w.get(STOPPED) or w.get(DEADLINE) or w.get(FAILED):
        return True
    return bool(w.get(QUIESCENT)) and not w.get(TURNS_OPEN)


class _Source:
    def __init__(self, specs: list[EventSpec]) -> None:
        self._specs = specs
        self._given = False

    @property
    def name(self) -> str:
        return "gaia2"

    def poll(self, snapshot: Snapshot) -> Iterable[EventSpec]:
        if self._given:
            return ()
        self._given = True
        return self._specs


PREAMBLE = """\
You work for the user in a simulated world of apps (email, calendar, messaging, contacts, ...).
Reach them with the `are` command in your shell:
  are tools [APP]                          list the apps' tools and their arguments
  are call APP FUNCTION key=value ...      call one (values are JSON when they parse as JSON)
When something happens (a reply, a new message), you are told in a follow-up message: do not
poll. To let time pass until then: are call SystemApp wait_for_notification timeout=300
When the task is done, answer the user directly in your reply.

"""
"""Told to the agent with its first task: unmodified harnesses learn the tools from it."""


def _user_text(message: str) -> str:
    """The user's words in ARE's formatted user message (``Message: ...``)."""
    _, sep, rest = message.partition("Message: ")
    if not sep:
        return message
    return rest.split("\nAlready read:", 1)[0].strip()


class Gaia2World:
    """The run's ARE world: one world process, opened with the run."""

    def __init__(self, source: Mapping[str, Any], *, oracle: bool) -> None:
        self.source = dict(source)
        """What the world is built from: ``registry``, ``file`` or ``generated``."""
        self._oracle = oracle
        self._judge: Judge | None = None
        self.judges: list[dict[str, Any]] = []
        """Who judged (endpoint, model), once each, for the verdict."""
        self._process: WorldProcess | None = None
        self.description: dict[str, Any] | None = None
        self._reset()

    def _reset(self) -> None:
        self._flags: dict[str, bool] = {}
        self._turns: deque[str] = deque()  # kinds of the deliveries whose turns are open
        self._answered = True
        self._told_preamble = False

    async def open(self, run_dir: Path | None, judge: Judge | None = None) -> None:
        self._reset()
        self._judge = judge
        self.judges = []
        process = WorldProcess(
            cwd=run_dir / "gaia2" if run_dir is not None else None,
            judge=self._ask_judge if judge is not None else None,
        )
        await process.start()
        self._process = process
        self.description = await process.request(
            "open", source=self.source, oracle=self._oracle, judge=judge is not None
        )

    async def _ask_judge(self, messages: list[dict[str, Any]]) -> str:
        """ARE's judge messages as one prompt to the run's judge (which records who judged)."""
        assert self._judge is not None
        prompt = "\n\n".join(str(m.get("content", "")) for m in messages if m.get("content"))
        reply = await self._judge(prompt, max_tokens=JUDGE_MAX_TOKENS)
        if reply.details() not in self.judges:
            self.judges.append(reply.details())
        return reply.text

    async def apply(self, effect: WorldEvent, *, due_ns: int, fired_ns: int) -> WorldChange:
        answer = await self._request("fire", event_id=effect.event_id, time=due_ns / _S, now=fired_ns / _S)
        return self._change(answer)

    async def tools(self) -> list[dict[str, Any]]:
        return list((await self._request("tools"))["tools"])

    async def agent_call(self, app: str, function: str, args: Mapping[str, Any], at_ns: int) -> ToolReply:
        answer = await self._request("call", app=app, function=function, args=dict(args), time=at_ns / _S)
        error = answer.get("error")
        if error is None and (app, function) == ("AgentUserInterface", "send_message_to_user"):
            self._answered = True
        return ToolReply(answer.get("result"), error, self._change(answer))

    def wait_for(self, app: str, function: str, args: Mapping[str, Any]) -> float | None:
        if (app, function) != ("SystemApp", "wait_for_notification"):
            return None
        timeout = args.get("timeout", 0)
        if isinstance(timeout, str):
            try:
                timeout = float(timeout)
            except ValueError:
                timeout = 0
        return max(0.0, float(timeout)) if isinstance(timeout, int | float) else 0.0

    async def agent_reply(self, text: str, at_ns: int) -> WorldChange:
        kind = self._turns.popleft() if self._turns else ""
        if kind == "user" and not self._answered and text.strip():
            reply = await self.agent_call("AgentUserInterface", "send_message_to_user", {"content": text}, at_ns)
            return self._change_after(reply.change)
        return self._change({})

    def _change_after(self, change: WorldChange) -> WorldChange:
        return WorldChange({**change.state, **self._turn_state()}, change.deliveries)

    def _change(self, answer: Mapping[str, Any]) -> WorldChange:
        state: dict[str, Any] = {MET + c: True for c in answer.get("conditions_met", ())}
        deliveries: list[DeliverPrompt | Notify] = []
        for note in answer.get("notifications", ()):
            if note["type"] == "USER_MESSAGE":
                text = _user_text(note["text"])
                if not self._told_preamble:
                    text, self._told_preamble = PREAMBLE + text, True
                deliveries.append(DeliverPrompt(text, session="gaia2"))
                self._turns.append("user")
                self._answered = False
            elif note["type"] == "ENVIRONMENT_NOTIFICATION":
                deliveries.append(Notify(note["text"]))
                self._turns.append("notification")
        for key, field in ((QUIESCENT, "quiescent"), (STOPPED, "stopped"), (FAILED, "failed")):
            if field in answer:
                self._flag(state, key, bool(answer[field]))
        state.update(self._turn_state())
        return WorldChange(state, tuple(deliveries))

    def _turn_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        self._flag(state, TURNS_OPEN, bool(self._turns))
        return state

    def _flag(self, state: dict[str, Any], key: str, value: bool) -> None:
        if self._flags.get(key, False) != value:
            self._flags[key] = value
            state[key] = value

    async def validate(self) -> dict[str, Any]:
        return await self._request("validate")

    async def executed(self) -> list[dict[str, Any]]:
        return list((await self._request("log"))["order"])

    async def _request(self, op: str, **fields: Any) -> dict[str, Any]:
        if self._process is None:
            raise FailedPrecondition("the Gaia2 world is not open", reason="WORLD_DOWN")
        return await self._process.request(op, **fields)

    async def close(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            await process.close()


class Gaia2Scenario:
    def __init__(self, name: str, source: Mapping[str, Any], *, oracle: bool) -> None:
        self._name = name
        self._world = Gaia2World(source, oracle=oracle)
        self.oracle = oracle

    @property
    def name(self) -> str:
        return self._name

    @property
    def world(self) -> Gaia2World:
        return self._world

    @property
    def environment(self) -> None:
        return None

    @property
    def start_ns(self) -> int:
        d = self._world.description
        return _ns(float(d["start_time"])) if d is not None else 0

    @property
    def rounds(self) -> Sequence[RoundInfo]:
        return [RoundInfo(GRADE_ID, "", "scenario")]

    def sources(self) -> Sequence[EventSource]:
        d = self._world.description
        if d is None:
            raise FailedPrecondition("a Gaia2 scenario's events come from its world: open it first")
        return [_Source(event_specs(d))]

    @property
    def requires(self) -> Mapping[Capability, str]:
        return {}

    def workspace_seed(self) -> Path | None:
        return None

    async def grade(self, effect: Grade, ctx: GradeContext) -> Verdict:
        result = await self._world.validate()
        order = await self._world.executed()
        success = result.get("success")
        details = {
            "validator": "ARE Scenario.validate (oracle mode: no judge)"
            if self.oracle
            else ("ARE GraphPerEventJudge" if result.get("judged") else "ARE Scenario.validate (no judge)"),
            "judge_calls": result.get("judge_calls", 0),
            "judges": list(self._world.judges),
            "success": success,
            "exception": result.get("exception"),
            "rationale": result.get("rationale"),
            "executed": order,
            "failed_events": [e["event_id"] for e in order if e.get("failed")],
        }
        if success is None:
            return Verdict(effect.check_id, None, False, "ARE's validation gave no outcome", details)
        why = str(result.get("exception") or result.get("rationale") or "")
        return Verdict(effect.check_id, 1.0 if success else 0.0, True, why[:2000], details)


@dataclass(frozen=True, slots=True)
class _Pick:
    name: str
    source: dict[str, Any]


class Gaia2Benchmark:
    @property
    def info(self) -> BenchmarkInfo:
        own = tuple(sorted(p.stem for p in _OWN.glob("*.json")))
        return BenchmarkInfo(
            name="gaia2",
            description="Gaia2 / ARE scenarios: apps, timed and conditional environment events, ARE's validation",
            data_format="ARE export JSON (version are_simulation_v1), one scenario per file: "
            "--data-dir DIR with --scenario FILE_STEM (or a directory of one file)",
            builtin_scenarios=(*ARE_SCENARIOS, *own),
            builtin_data=(_OWN,),
        )

    def load(self, config: ScenarioConfig) -> Gaia2Scenario:
        oracle = config.options.get("oracle", False)
        if not isinstance(oracle, bool):
            raise InvalidArgument(
                f"gaia2 option 'oracle' must be true or false, got {oracle!r}", field="run.benchmark.options.oracle"
            )
        unknown = sorted(set(config.options) - {"oracle"})
        if unknown:
            raise InvalidArgument(
                f"unknown gaia2 option(s): {', '.join(unknown)} (known: oracle)", field="run.benchmark.options"
            )
        pick = self._pick(config)
        return Gaia2Scenario(pick.name, pick.source, oracle=oracle)

    def _pick(self, config: ScenarioConfig) -> _Pick:
        names = [*([config.scenario] if config.scenario else []), *config.subset]
        if len(names) > 1:
            raise InvalidArgument(f"a gaia2 run is one scenario; got {names}", field="run.benchmark.subset")
        name = names[0] if names else None
        if config.data_dir is not None:
            files = sorted(config.data_dir.glob("*.json"))
            if name is not None:
                files = [f for f in files if f.stem == name]
            if len(files) != 1:
                found = ", ".join(f.stem for f in sorted(config.data_dir.glob("*.json"))) or "none"
                if name is not None:
                    raise NotFound(
                        f"Gaia2 data {config.data_dir} has no scenario file {name}.json (files: {found})",
                        field="run.benchmark.scenario",
                    )
                raise InvalidArgument(
                    f"Gaia2 data {config.data_dir}: name one scenario file with --scenario (files: {found})",
                    field="run.benchmark.scenario",
                )
            checked = check_scenario_file(files[0])
            return _Pick(checked.scenario_id, {"file": str(files[0].resolve())})
        if name is None:
            name = "scenario_events_tutorial"
        own = _OWN / f"{name}.json"
        if own.is_file():
            check_scenario_file(own)
            return _Pick(name, {"file": str(own)})
        if name in ARE_SCENARIOS:
            return _Pick(name, {"registry": name})
        raise InvalidArgument(
            f"unknown gaia2 scenario {name!r}; built in: {', '.join(self.info.builtin_scenarios)}",
            field="run.benchmark.scenario",
        )
