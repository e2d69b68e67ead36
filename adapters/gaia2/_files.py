"""Gaia2 scenario files (ARE's export format), checked on the daemon's host.

ARE's own loader swallows every error (``load_scenario`` logs and returns
None) and its pydantic messages do not say which file they are about. A run's
file is checked here first, without ARE, so that a bad file is refused when
the run is created, with the file and the field named. What only ARE can
check (its apps' state, its DAG rules) is refused by the world process when
the run starts, also naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters._data_files import read_json
from sclated.errors import InvalidArgument

__all__ = ["ScenarioFile", "check_scenario_file"]

EXPORT_VERSION = "are_simulation_v1"
_EVENT_TYPES = frozenset({"USER", "ENV", "AGENT", "CONDITION"})
_FIELD = "run.benchmark.data_dir"


@dataclass(frozen=True, slots=True)
class ScenarioFile:
    path: Path
    scenario_id: str
    events: int


def _bad(path: Path, where: str, what: str) -> InvalidArgument:
    return InvalidArgument(f"Gaia2 scenario file {path}: {where}: {what}", field=_FIELD)


def check_scenario_file(path: Path) -> ScenarioFile:
    """Parse and check ``path``; InvalidArgument names the file and the field."""
    doc = read_json(path, "Gaia2 scenario file")
    if not isinstance(doc, dict):
        raise _bad(path, "top level", "must be an object")
    if doc.get("version") != EXPORT_VERSION:
        raise _bad(path, "version", f"must be {EXPORT_VERSION!r}, got {doc.get('version')!r}")
    meta = doc.get("metadata")
    definition = meta.get("definition") if isinstance(meta, dict) else None
    if not isinstance(definition, dict):
        raise _bad(path, "metadata.definition", "missing (it holds scenario_id and start_time)")
    scenario_id = definition.get("scenario_id")
    if not isinstance(scenario_id, str) or not scenario_id:
        raise _bad(path, "metadata.definition.scenario_id", "must be a non-empty string")
    start = definition.get("start_time")
    if start is not None and (not isinstance(start, int | float) or isinstance(start, bool) or start < 0):
        raise _bad(path, "metadata.definition.start_time", f"must be epoch seconds >= 0, got {start!r}")
    apps = doc.get("apps")
    if not isinstance(apps, list) or not apps:
        raise _bad(path, "apps", "must be a non-empty list")
    app_names: set[str] = set()
    for i, app in enumerate(apps):
        if not isinstance(app, dict):
            raise _bad(path, f"apps[{i}]", "must be an object")
        for key in ("name", "class_name"):
            if not isinstance(app.get(key), str) or not app[key]:
                raise _bad(path, f"apps[{i}].{key}", "must be a non-empty string")
        app_names.add(app["name"])
        if "app_state" in app and not isinstance(app["app_state"], dict | type(None)):
            raise _bad(path, f"apps[{i}].app_state", "must be an object")
    events = doc.get("events")
    if not isinstance(events, list) or not events:
        raise _bad(path, "events", "must be a non-empty list")
    ids: set[str] = set()
    for i, event in enumerate(events):
        _check_event(path, i, event, ids, app_names)
    for i, event in enumerate(events):
        for dep in event.get("dependencies") or ():
            if dep not in ids:
                raise _bad(path, f"events[{i}].dependencies", f"names unknown event {dep!r}")
    return ScenarioFile(path, scenario_id, len(events))


def _check_event(path: Path, i: int, event: Any, ids: set[str], app_names: set[str]) -> None:
    where = f"events[{i}]"
    if not isinstance(event, dict):
        raise _bad(path, where, "must be an object")
    eid = event.get("event_id")
    if not isinstance(eid, str) or not eid:
        raise _bad(path, f"{where}.event_id", "must be a non-empty string")
    if eid in ids:
        raise _bad(path, f"{where}.event_id", f"{eid!r} is used twice")
    ids.add(eid)
    if not isinstance(event.get("event_type"), str) or event["event_type"] not in _EVENT_TYPES:
        raise _bad(
            path, f"{where}.event_type", f"must be one of {sorted(_EVENT_TYPES)}, got {event.get('event_type')!r}"
        )
    for key in ("event_time", "event_relative_time"):
        value = event.get(key)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool) or value < 0):
            raise _bad(path, f"{where}.{key}", f"must be a number >= 0 or null, got {value!r}")
    deps = event.get("dependencies")
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise _bad(path, f"{where}.dependencies", "must be a list of event ids (ARE's files always have one)")
    action = event.get("action")
    if event.get("event_type") == "CONDITION":
        return
    if not isinstance(action, dict):
        raise _bad(path, f"{where}.action", "must be an object with app, function and args")
    if not isinstance(action.get("app"), str) or action["app"] not in app_names:
        raise _bad(
            path,
            f"{where}.action.app",
            f"{str(action.get('app'))[:80]!r} is not the name of one of the file's apps (apps[].name: "
            f"{', '.join(sorted(app_names))})",
        )
    if not isinstance(action.get("function"), str) or not action["function"]:
        raise _bad(path, f"{where}.action.function", "must be a non-empty string")
    args = action.get("args", [])
    if not isinstance(args, list):
        raise _bad(path, f"{where}.action.args", "must be a list")
    for j, arg in enumerate(args):
        if not isinstance(arg, dict) or not isinstance(arg.get("name"), str):
            raise _bad(path, f"{where}.action.args[{j}]", "must be an object with a name")
        if not isinstance(arg.get("value_type"), str) or not arg["value_type"]:
            # ARE reads the value by it (and fails on anything else without naming the field).
            raise _bad(path, f"{where}.action.args[{j}].value_type", "must be a type name (str, int, list[str], ...)")
