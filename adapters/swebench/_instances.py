"""SWE-bench instances as upstream writes them (Verified's 5.x rows; SWE-Gym's rows).

Rows come from a JSON list or JSON lines, unchanged. ``FAIL_TO_PASS`` and
``PASS_TO_PASS`` are JSON-encoded strings in Verified and lists in SWE-Gym; both
are read. The 5.x columns (``eval_script``, ``log_parser``, ``eval_type``,
``image``) are optional: a row without them (SWE-Gym) gets an eval script made the
way swebench 4.x made them (``_scripts.py``) and the pytest parser.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters._data_files import parse_json, read_text
from sclated.errors import InvalidArgument

__all__ = ["REQUIRED_FIELDS", "SWEInstance", "read_instances"]

REQUIRED_FIELDS: tuple[str, ...] = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "version",
    "created_at",
)
"""What every row must have (SWE-Gym has no ``environment_setup_commit``)."""


@dataclass(frozen=True, slots=True)
class SWEInstance:
    instance_id: str
    repo: str
    base_commit: str
    patch: str
    test_patch: str
    problem_statement: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    version: str
    created_at: dt.datetime
    hints_text: str
    raw: Mapping[str, Any]
    """The row as read (handed to swebench's own functions unchanged)."""

    @property
    def repo_name(self) -> str:
        """The repository's own name (``astropy`` of ``astropy/astropy``): its folder in the workspace."""
        return self.repo.rsplit("/", 1)[-1]

    @property
    def image(self) -> str | None:
        value = self.raw.get("image")
        return str(value) if value else None


def _tests(value: Any, where: str, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise InvalidArgument(f"{where}: {name} is a string but not a JSON list of test ids", field=name) from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise InvalidArgument(f"{where}: {name} must be a list of test ids (or its JSON text)", field=name)
    return tuple(value)


def _created_at(value: Any, where: str) -> dt.datetime:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # pandas' JSON export writes timestamps as epoch milliseconds.
        try:
            return dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
        except (OverflowError, OSError, ValueError):
            raise InvalidArgument(
                f"{where}: created_at {value!r} is not a time in epoch milliseconds", field="created_at"
            ) from None
    try:
        parsed = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"{where}: created_at {value!r} is not an ISO date-time", field="created_at") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def parse_instance(row: Any, where: str) -> SWEInstance:
    if not isinstance(row, dict):
        raise InvalidArgument(f"{where}: an instance must be a JSON object, not {type(row).__name__}")
    missing = [f for f in REQUIRED_FIELDS if f not in row]
    if missing:
        raise InvalidArgument(f"{where}: missing field(s) {', '.join(missing)}", field=missing[0])
    for name in ("instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement"):
        if not isinstance(row[name], str) or (name != "patch" and not row[name].strip()):
            raise InvalidArgument(f"{where}: {name} must be a non-empty string", field=name)
    iid = row["instance_id"]
    if "/" not in row["repo"]:
        raise InvalidArgument(f"{where} ({iid}): repo {row['repo']!r} is not owner/name", field="repo")
    if "diff --git" not in row["test_patch"]:
        raise InvalidArgument(f"{where} ({iid}): test_patch is not a git diff", field="test_patch")
    for name in ("eval_script", "log_parser", "eval_type", "image"):
        if name in row and row[name] is not None and not isinstance(row[name], str):
            raise InvalidArgument(f"{where} ({iid}): {name} must be a string", field=name)
    return SWEInstance(
        instance_id=iid,
        repo=row["repo"],
        base_commit=row["base_commit"],
        patch=row["patch"],
        test_patch=row["test_patch"],
        problem_statement=row["problem_statement"],
        fail_to_pass=_tests(row["FAIL_TO_PASS"], f"{where} ({iid})", "FAIL_TO_PASS"),
        pass_to_pass=_tests(row["PASS_TO_PASS"], f"{where} ({iid})", "PASS_TO_PASS"),
        version=str(row["version"]),
        created_at=_created_at(row["created_at"], f"{where} ({iid})"),
        hints_text=str(row.get("hints_text") or ""),
        raw=dict(row),
    )


def read_instances(path: Path) -> list[SWEInstance]:
    """Every instance of a ``.json`` (a list) or ``.jsonl`` file; errors name the file and line."""
    text = read_text(path, "SWE-bench data file")
    rows: list[tuple[str, Any]] = []
    if path.suffix == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            rows.append((f"{path.name} line {n}", parse_json(line, f"{path.name} line {n}")))
    else:
        data = parse_json(text, f"SWE-bench data file {path}")
        if not isinstance(data, list):
            raise InvalidArgument(f"SWE-bench data file {path} must be a JSON list of instances (or use .jsonl)")
        rows = [(f"{path.name} item {i}", row) for i, row in enumerate(data)]
    out = [parse_instance(row, where) for where, row in rows]
    if not out:
        raise InvalidArgument(f"SWE-bench data file {path} has no instances")
    seen: set[str] = set()
    for inst in out:
        if inst.instance_id in seen:
            raise InvalidArgument(f"{path.name}: instance {inst.instance_id} appears twice", field="instance_id")
        seen.add(inst.instance_id)
    return out


def pick(instances: Sequence[SWEInstance], subset: Sequence[str], repo: str | None) -> list[SWEInstance]:
    """The instances of one run: ``subset`` (ids) or ``repo``, of ONE repository, oldest first."""
    known = {i.instance_id: i for i in instances}
    unknown = [s for s in subset if s not in known]
    if unknown:
        raise InvalidArgument(f"subset names unknown instance ids {unknown}", field="subset")
    chosen = [known[s] for s in subset] if subset else list(instances)
    if repo is not None:
        chosen = [i for i in chosen if i.repo == repo]
        if not chosen:
            repos = sorted({i.repo for i in instances})
            raise InvalidArgument(f"no instance of repo {repo!r}; the data has {repos}", field="options.repo")
    repos = sorted({i.repo for i in chosen})
    if len(repos) > 1:
        counts = ", ".join(f"{r} ({sum(i.repo == r for i in chosen)})" for r in repos)
        raise InvalidArgument(
            "a SWE-bench run is one repository's instances as consecutive working days; "
            f"the selection spans {counts}: give --benchmark-option repo=OWNER/NAME or a subset",
            field="options.repo",
        )
    if not chosen:
        raise InvalidArgument("no instance selected", field="subset")
    return sorted(chosen, key=lambda i: (i.created_at, i.instance_id))
