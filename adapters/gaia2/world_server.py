"""The Gaia2 world process: ARE's apps and event DAG, stepped by sclate's scheduler.

Runs under ARE's own interpreter (``.venv-are``: ARE pins exact versions of
numpy, pandas and pydantic that the daemon's environment cannot share), one
process per run, started by :mod:`adapters.gaia2._world`. It never reads a
clock of its own: every request names the simulated time it happens at, and
ARE's time manager is held paused at that time. So the same requests give the
same world, which is what lets a journal replay it.

Protocol: one JSON object per line on stdin, one answer per line on the
original stdout (``{"ok": true, ...}`` or ``{"ok": false, "error": {"type",
"message", "field"}}``); everything ARE prints goes to stderr.

Operations:
- ``open``: build a scenario (``registry`` id, JSON ``file``, or a ``generated``
  load shape) and describe its event DAG.
- ``fire``: execute one scenario event at its time.
- ``validate``: ARE's own validation of the world as it is.
- ``log``: the executed events, in execution order.
- ``are_oracle``: run the same scenario, fresh, on ARE's own oracle event loop
  (what parity and ``bench gaia2`` compare against).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import random
import sys
import time
import traceback
import uuid
from typing import Any

_OUT = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
sys.stdout = sys.stderr  # ARE prints; only answers go to the protocol stream

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from are.simulation.environment import Environment, EnvironmentConfig  # noqa: E402
from are.simulation.notification_system import VerboseNotificationSystem  # noqa: E402
from are.simulation.types import (  # noqa: E402
    AgentValidationEvent,
    CompletedEvent,
    ConditionCheckEvent,
    EnvironmentState,
    Event,
    EventType,
    OracleEvent,
    StopEvent,
    ValidationEvent,
)

logging.getLogger().setLevel(logging.WARNING)
for _name in ("are", "are.simulation"):
    logging.getLogger(_name).setLevel(logging.WARNING)


class WorldError(Exception):
    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


# -- building scenarios ---------------------------------------------------------------


def _reseed_ids(seed: int = 0) -> None:
    """ARE names code-built events ``<Class>-<TYPE>-<uuid4>``: a new name every build.
    Its uuid4 drawn from a seeded generator instead gives the same scenario the same
    ids in every build, so that a run, its replay and ARE's own oracle run agree."""
    rng = random.Random(seed)
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)  # type: ignore[assignment]


class HostJudge:
    """ARE's judge engine (``engine(messages) -> (text, metadata)``), answered by the
    run's judge on the host: a ``{"judge": ...}`` line out, a ``{"judge_reply": ...}``
    line back. Unlike ARE's stock LiteLLM engine it leaves the reply's text alone
    (1.2.0 lowercases True/False, which its own soft checkers then never find)."""

    calls = 0

    def __call__(self, messages: list[dict[str, Any]], **kwargs: Any) -> tuple[str, dict[str, Any]]:
        HostJudge.calls += 1
        _OUT.write(json.dumps({"judge": {"messages": messages}}, default=str) + "\n")
        line = sys.stdin.readline()
        if not line:
            raise RuntimeError("the host went away during a judge call")
        reply = json.loads(line)
        if "judge_error" in reply:
            raise RuntimeError(f"the run's judge failed: {reply['judge_error']}")
        return str(reply["judge_reply"]["text"]), {}


def _load(source: dict[str, Any], *, oracle: bool = True, judge: bool = False) -> Any:
    """``oracle=False``: a scenario for an agent. A Gaia2 JSON scenario then gets its
    turns as ARE's own preprocessing builds them (the next turn's events wait on a
    condition: the agent's n-th answer to the user)."""
    _reseed_ids()
    if "registry" in source:
        from are.simulation.scenarios.utils.registry import registry

        name = str(source["registry"])
        try:
            cls = registry.get_scenario(name)
        except KeyError:
            known = ", ".join(sorted(registry.get_all_scenarios()))
            raise WorldError(f"ARE has no scenario {name!r}; it has: {known}", "scenario") from None
        scenario = cls()
        scenario.initialize()
        return scenario
    if "file" in source:
        from are.simulation.data_handler.importer import JsonScenarioImporter

        path = str(source["file"])
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            scenario, _, _ = JsonScenarioImporter().import_from_json_to_benchmark(
                text, apps_to_skip=["SandboxLocalFileSystem"], load_completed_events=False
            )
        except Exception as exc:  # pydantic's and ARE's own errors, named with the file
            raise WorldError(f"{path}: ARE could not import it: {_fields_or_first_line(exc)}", "file") from exc
        try:
            if oracle:
                scenario.initialize()
                scenario.patch_oracle_user_message_order()
            else:
                from are.simulation.scenarios.scenario_imported_from_json.utils import preprocess_scenario

                config = None
                if judge:
                    from are.simulation.validation.configs import GraphPerEventJudgeConfig

                    config = GraphPerEventJudgeConfig(engine=HostJudge())
                preprocess_scenario(scenario, judge_config=config)
        except Exception as exc:
            raise WorldError(f"{path}: ARE rejected its events or apps: {_first_line(exc)}", "events") from exc
        return scenario
    if "generated" in source:
        return _generated(dict(source["generated"]))
    raise WorldError("open needs one of registry, file, generated", "source")


def _fields_or_first_line(exc: BaseException) -> str:
    """A pydantic error as the fields it names (``events.0.action.args.0.value_type: ...``);
    any other as its first line."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return _first_line(exc)
    errors = exc.errors()
    shown = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors[:3])
    more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
    return f"{type(exc).__name__}: {shown}{more}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = text.splitlines()
    return f"{type(exc).__name__}: {lines[0]}" + (f" (+{len(lines) - 1} lines)" if len(lines) > 1 else "")


def _generated(spec: dict[str, Any]) -> Any:
    """A load shape for ``bench gaia2``: N timed ENV events on one small app,
    either independent (1 s apart) or one chain (each 1 s after the last)."""
    from are.simulation.apps.app import App
    from are.simulation.scenarios.scenario import Scenario
    from are.simulation.tool_utils import env_tool
    from are.simulation.types import OperationType, event_registered

    shape = str(spec.get("shape", "independent"))
    n = int(spec.get("n", 1000))
    if shape not in ("independent", "chain") or not 1 <= n <= 1_000_000:
        raise WorldError(f"generated needs shape independent|chain and n in [1, 1000000], got {spec}", "generated")

    class Counter(App):
        def __init__(self) -> None:
            super().__init__("Counter")
            self.total = 0

        def get_state(self) -> dict[str, Any]:
            return {"total": self.total}

        def load_state(self, state_dict: dict[str, Any]) -> None:
            self.total = int(state_dict.get("total", 0))

        def reset(self) -> None:
            self.total = 0

        @env_tool()
        @event_registered(operation_type=OperationType.WRITE, event_type=EventType.ENV)
        def bump(self, i: int) -> int:
            self.total += 1
            return self.total

    class Generated(Scenario):
        def init_and_populate_apps(self, *args: Any, **kwargs: Any) -> None:
            self.apps = [Counter()]

        def build_events_flow(self) -> None:
            app = self.get_typed_app(Counter)
            events: list[Any] = []
            for i in range(n):
                ev = Event.from_function(app.bump, i=i).with_id(f"e{i:06d}")
                if shape == "independent" or not events:
                    ev = ev.depends_on(None, delay_seconds=i + 1 if shape == "independent" else 1)
                else:
                    ev = ev.depends_on(events[-1], delay_seconds=1)
                events.append(ev)
            self.events = events

    scenario = Generated(scenario_id=f"generated_{shape}_{n}", start_time=1_700_000_000, duration=None)
    scenario.initialize()
    return scenario


# -- the world stepped from outside ----------------------------------------------------


class World:
    def __init__(self, scenario: Any, oracle: bool) -> None:
        self.scenario = scenario
        self.oracle = oracle
        self.start = float(scenario.start_time or 0)
        self.env = Environment(
            EnvironmentConfig(
                oracle_mode=oracle,
                start_time=self.start,
                duration=None,
                time_increment_in_seconds=int(scenario.time_increment_in_seconds or 1),
                verbose=False,
            ),
            notification_system=VerboseNotificationSystem(),
        )
        self._last_logged: Any = None
        logged = self.env.add_to_log

        def add_to_log(events: Any) -> None:  # apps keep this callback from register_apps
            batch = events if isinstance(events, list) else [events]
            if batch:
                self._last_logged = batch[-1]
            logged(events)

        self.env.add_to_log = add_to_log
        self.env.register_apps(scenario.apps)
        self.env.state = EnvironmentState.RUNNING
        self.env.time_manager.pause()
        self._set_time(self.start)
        self.by_id: dict[str, Any] = {}
        for ev in scenario.events:
            self._index(ev)
        self.done: set[str] = set()
        self.completed: dict[str, CompletedEvent] = {}
        self.order: list[dict[str, Any]] = []
        self.remaining: dict[str, int] = {i: len(e.dependencies) for i, e in self.by_id.items()}
        self.ready: set[str] = {i for i, n in self.remaining.items() if n == 0 and self._runs(self.by_id[i])}
        self.armed: dict[str, Any] = {}  # conditions and validations waiting to hold
        self.stopped = False

    def _index(self, root: Any) -> None:
        stack = [root]  # a chain of 10,000 events is deeper than Python's recursion
        while stack:
            ev = stack.pop()
            if ev.event_id in self.by_id:
                continue
            self.by_id[ev.event_id] = ev
            stack.extend(ev.successors)

    def _runs(self, ev: Any) -> bool:
        """Oracle events run only in oracle mode (otherwise the agent acts)."""
        return self.oracle or type(ev) is not OracleEvent

    def _set_time(self, t: float) -> None:
        tm = self.env.time_manager
        tm.add_offset(t - tm.time())

    def describe(self) -> dict[str, Any]:
        events = []
        for ev in self.by_id.values():
            kind = type(ev).__name__
            action = getattr(ev, "action", None)
            app = getattr(action, "app", None)
            func = getattr(action, "function", None)
            if type(ev) is OracleEvent:
                desc = getattr(ev, "action_desc", None)
                app_name, func_name = getattr(desc, "app", ""), getattr(desc, "function", "")
            else:
                app_name = getattr(app, "name", "") if app is not None else ""
                func_name = getattr(func, "__name__", "") if callable(func) else ""
            events.append(
                {
                    "event_id": ev.event_id,
                    "class_name": kind,
                    "event_type": ev.event_type.name if ev.event_type is not None else "",
                    "event_time": ev.event_time if not ev.dependencies or ev.event_relative_time is None else None,
                    "relative": ev.event_relative_time,
                    "deps": [d.event_id for d in ev.dependencies],
                    "app": app_name,
                    "function": func_name,
                }
            )
        return {
            "scenario_id": self.scenario.scenario_id,
            "start_time": self.start,
            "duration": self.scenario.duration,
            "tick_s": int(self.scenario.time_increment_in_seconds or 1),
            "oracle": self.oracle,
            "events": events,
            "apps": [a.name for a in self.scenario.apps],
        }

    # one event, as ARE's Environment.process_event would run it
    def fire(self, event_id: str, t: float, now: float | None = None) -> dict[str, Any]:
        """``t``: the event's scheduled time, which ARE records as its time; ``now``:
        what the apps' clock reads while it runs (sclate's fire time, a little later
        under the hybrid clock)."""
        ev = self.by_id.get(event_id)
        if ev is None:
            raise WorldError(f"the scenario has no event {event_id!r}", "event_id")
        if not self._runs(ev):
            raise WorldError(f"{event_id!r} is the oracle's action: with an agent, the agent acts", "event_id")
        if event_id in self.done:
            raise WorldError(f"event {event_id!r} already ran", "event_id")
        self._set_time(max(t, now if now is not None else t))
        self.env.tick_count = max(0, int((t - self.start) // max(1, self.env.time_increment_in_seconds)))
        kind = type(ev)
        newly_met: list[str] = []
        if kind is StopEvent:
            self.stopped = True
            self._finish(event_id, None, t)
        elif kind in (ConditionCheckEvent, ValidationEvent):
            self.ready.discard(event_id)
            self.armed[event_id] = ev
        elif kind is AgentValidationEvent:
            val = ev.get_validator()
            val._start_tick = self.env.tick_count
            self.env.agent_action_validators.append(val)
            self._finish(event_id, None, t)
        else:
            # ARE stamps an event with its scheduled time when it queues it; here that
            # is the fire time sclate's scheduler ran it at.
            ev.event_time = t
            run = ev
            if kind is OracleEvent:
                run = ev.make(self.env).with_type(EventType.AGENT)
            run = self._resolve(run)
            completed = run.execute()
            self.env.add_to_log(completed)
            self._finish(event_id, completed, t)
        newly_met = self._check_armed(t)
        return {
            **self._state(newly_met),
            "notifications": self.notifications(),
            "order": self.order[-1:] if self.order and self.order[-1]["event_id"] == event_id else [],
        }

    def _resolve(self, ev: Any) -> Any:
        """ARE resolves ``{{event_id.key}}`` arguments against its whole sorted log for
        every event; only the events an argument names are needed."""
        names = set()
        for value in (ev.action.args or {}).values() if ev.action is not None else ():
            if isinstance(value, str) and value.strip().startswith("{{"):
                names.add(value.strip()[2:].split("}}")[0].split(".")[0])
        past = [self.completed[n] for n in names if n in self.completed]
        return self.env.resolve_arg_placeholders(ev, past)

    def _finish(self, event_id: str, completed: Any, t: float) -> None:
        self.done.add(event_id)
        self.ready.discard(event_id)
        if completed is not None:
            self.completed[event_id] = completed
            self.order.append(
                {
                    "event_id": event_id,
                    "event_type": completed.event_type.name,
                    "time": t,
                    "tool": completed.tool_name if completed.action is not None else "",
                    "failed": completed.failed(),
                }
            )
        ev = self.by_id[event_id]
        for succ in ev.successors:
            sid = succ.event_id
            self.remaining[sid] -= 1
            if self.remaining[sid] == 0 and self._runs(succ):
                self.ready.add(sid)

    def _check_armed(self, t: float) -> list[str]:
        met: list[str] = []
        for cid, ev in list(self.armed.items()):
            if type(ev) is ConditionCheckEvent:
                ev.event_time = t
                ok, completed = ev.check(self.env)
                if ok:
                    del self.armed[cid]
                    self.env.add_to_log(completed)
                    self._finish(cid, None, t)
                    met.append(cid)
            else:  # ValidationEvent: milestones met ends it, a minefield fails the world
                try:
                    result, completed = ev.validate(self.env)
                except Exception:
                    self.env.state = EnvironmentState.FAILED
                    del self.armed[cid]
                    continue
                if result.success:
                    del self.armed[cid]
                    self.env.add_to_log(completed)
                    self._finish(cid, None, t)
                    met.append(cid)
        return met

    # -- the agent's side (oracle=False) --------------------------------------------------

    def tools(self) -> list[dict[str, Any]]:
        """The agent's tools, as ARE declares them (``<App>__<function>``)."""
        out = []
        for app in self.scenario.apps:
            if app.name == "InternalContacts":
                continue
            for tool in app.get_tools():
                out.append(
                    {
                        "name": tool.name,
                        "app": app.name,
                        "function": tool.name.split("__", 1)[1],
                        "description": tool.function_description or "",
                        "write": bool(tool.write_operation),
                        "args": [
                            {
                                "name": a.name,
                                "type": a.arg_type,
                                "description": a.description or "",
                                "required": not a.has_default,
                                "default": a.default if a.has_default else None,
                            }
                            for a in tool.args
                        ],
                        "returns": tool.return_type if isinstance(tool.return_type, str) else str(tool.return_type),
                    }
                )
        return out

    def call(self, app_name: str, function: str, args: dict[str, Any], now: float) -> dict[str, Any]:
        """One of the agent's tool calls, checked against ARE's signature of the tool and
        recorded by ARE as an AGENT event at ``now``; a refusal or a raising tool is a
        tool error for the agent, never an error of the world."""
        self._set_time(now)
        tool = next((t for t in self._agent_tools(app_name) if t.name == f"{app_name}__{function}"), None)
        if tool is None:
            names = sorted(t.name.split("__", 1)[1] for t in self._agent_tools(app_name))
            if not names:
                apps = sorted({a.name for a in self.scenario.apps if a.get_tools()})
                return self._answer(now, error=f"no app {app_name!r}; apps: {', '.join(apps)}")
            return self._answer(now, error=f"{app_name} has no tool {function!r}; it has: {', '.join(names)}")
        known = {a.name: a for a in tool.args}
        unknown = sorted(set(args) - set(known))
        missing = sorted(n for n, a in known.items() if not a.has_default and n not in args)
        if unknown or missing:
            parts = ([f"unknown argument(s) {', '.join(unknown)}"] if unknown else []) + (
                [f"missing argument(s) {', '.join(missing)}"] if missing else []
            )
            sig = ", ".join(f"{a.name}: {a.arg_type}" + ("" if not a.has_default else " = ...") for a in tool.args)
            return self._answer(now, error=f"{tool.name}({sig}): {'; '.join(parts)}")
        try:
            result = tool(**args)
        except Exception as exc:  # ARE logged it as a failed AGENT event
            self._note_call(tool.name, now, failed=True)
            return self._answer(now, error=_first_line(exc))
        self._note_call(tool.name, now, failed=False)
        return self._answer(now, result=result)

    def _note_call(self, tool_name: str, now: float, *, failed: bool) -> None:
        """The agent's call in the executed order, under the id ARE logged it with."""
        last = self._last_logged
        event_id = last.event_id if last is not None else f"agent-call-{len(self.order)}"
        self.order.append(
            {"event_id": event_id, "event_type": "AGENT", "time": now, "tool": tool_name, "failed": failed}
        )

    def _agent_tools(self, app_name: str) -> list[Any]:
        for app in self.scenario.apps:
            if app.name == app_name and app.name != "InternalContacts":
                return list(app.get_tools())
        return []

    def _answer(self, now: float, *, result: Any = None, error: str | None = None) -> dict[str, Any]:
        met = self._check_armed(now)
        return {
            "result": _jsonable(result),
            "error": error,
            **self._state(met),
            "notifications": self.notifications(),
        }

    def _state(self, met: list[str]) -> dict[str, Any]:
        return {
            "conditions_met": met,
            "quiescent": not self.ready,
            "stopped": self.stopped,
            "failed": self.env.state == EnvironmentState.FAILED,
        }

    def notifications(self) -> list[dict[str, str]]:
        """What ARE would show the agent by now (its notification system's queue)."""
        if self.oracle:
            return []
        queue = self.env.notification_system.message_queue
        # Stamped with the world clock's own float; a microsecond covers datetime's rounding.
        now = self.env.time_manager.time() + 1e-6
        stamp = datetime.datetime.fromtimestamp(now, tz=datetime.UTC)
        return [{"type": m.message_type.name, "text": m.message} for m in queue.get_by_timestamp(stamp)]

    def validate(self) -> dict[str, Any]:
        for ev in self.armed.values():  # ARE's final checks refuse a live validation
            if type(ev) is ValidationEvent:
                self.env.state = EnvironmentState.FAILED
        try:
            result = self.scenario.validate(self.env)
        except Exception as exc:
            return {"success": False, "exception": _first_line(exc), "rationale": None}
        return {
            "success": result.success,
            "exception": _first_line(result.exception) if result.exception is not None else None,
            "rationale": result.rationale,
            "judged": getattr(self.scenario, "judge", None) is not None,
            "judge_calls": HostJudge.calls,
        }


def _jsonable(value: Any) -> Any:
    """A tool's return value as JSON (ARE returns dataclasses, enums, datetimes)."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.loads(json.dumps(value, default=str))


def are_oracle(source: dict[str, Any]) -> dict[str, Any]:
    """The scenario on ARE's own oracle event loop, recording the order it executes in."""
    built = time.perf_counter()
    scenario = _load(source)
    order: list[dict[str, Any]] = []
    lateness = [0.0]

    class RecordingEnvironment(Environment):
        def add_to_log(self, events: Any) -> None:
            for e in events if isinstance(events, list) else [events]:
                if e.event_type != EventType.CONDITION and e.event_time is not None:
                    # ARE's clock runs on the wall clock between its jumps: how far it
                    # moved past the event's time before the event ran.
                    lateness[0] = max(lateness[0], self.time_manager.time() - e.event_time)
                order.append(
                    {
                        "event_id": e.event_id,
                        "event_type": e.event_type.name,
                        "time": e.event_time,
                        "tool": e.tool_name if e.event_type != EventType.CONDITION else "",
                        "failed": e.failed(),
                    }
                )
            super().add_to_log(events)

    env = RecordingEnvironment(
        EnvironmentConfig(
            oracle_mode=True,
            queue_based_loop=True,
            start_time=scenario.start_time,
            exit_when_no_events=True,
            verbose=False,
        ),
        notification_system=VerboseNotificationSystem(),
    )
    started = time.perf_counter()
    env.run(scenario)
    wall = time.perf_counter() - started
    try:
        result = scenario.validate(env)
        outcome: dict[str, Any] = {
            "success": result.success,
            "exception": _first_line(result.exception) if result.exception is not None else None,
        }
    except Exception as exc:
        outcome = {"success": False, "exception": _first_line(exc)}
    env.stop()
    return {"order": order, "run_s": wall, "build_s": started - built, "lateness_s_max": lateness[0], **outcome}


# -- the loop ---------------------------------------------------------------------------


def main() -> None:
    world: World | None = None
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "open":
                oracle = bool(req.get("oracle", False))
                judged = bool(req.get("judge", False)) and not oracle
                world = World(_load(dict(req["source"]), oracle=oracle, judge=judged), oracle)
                answer: dict[str, Any] = world.describe()
            elif op == "are_oracle":
                answer = are_oracle(dict(req["source"]))
            elif world is None:
                raise WorldError(f"{op!r} before open", "op")
            elif op == "fire":
                now = req.get("now")
                answer = world.fire(str(req["event_id"]), float(req["time"]), float(now) if now is not None else None)
            elif op == "fire_many":  # the bench's batches: one round trip per fire time
                answer = {"results": [world.fire(str(e), float(req["time"])) for e in req["event_ids"]]}
            elif op == "tools":
                answer = {"tools": world.tools()}
            elif op == "call":
                args = req.get("args") or {}
                if not isinstance(args, dict):
                    raise WorldError("call args must be an object", "args")
                answer = world.call(str(req["app"]), str(req["function"]), args, float(req["time"]))
            elif op == "validate":
                answer = world.validate()
            elif op == "log":
                answer = {"order": world.order}
            else:
                raise WorldError(f"unknown op {op!r}", "op")
            reply = {"ok": True, **answer}
        except WorldError as exc:
            reply = {"ok": False, "error": {"type": "WorldError", "message": str(exc), "field": exc.field}}
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            reply = {"ok": False, "error": {"type": type(exc).__name__, "message": _first_line(exc), "field": ""}}
        _OUT.write(json.dumps(reply, default=str) + "\n")


if __name__ == "__main__":
    main()
