"""Reading a MetaClaw-Bench data directory in its upstream layout.

Layout (as in aiming-lab/MetaClaw ``benchmark/data/metaclaw-bench-small``)::

    all_tests.json                      days: id, session, eval, agent, arc, ...
    eval/dayNN/questions.json           rounds of a day
    eval/scripts/*.py                   checker scripts file_check commands call
    workspaces/shared/                  persona files + one folder per day
    openclaw_state/agents/<agent>/sessions/<session>.jsonl   seeded transcripts
    openclaw_cfg/                       the upstream harness configuration

Nothing here is rewritten: rounds keep their upstream ids, questions, eval
specs and feedback; this module only reads and indexes them, and decides which
rounds cannot be graded because an input they need is not in the data.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sclated.errors import InvalidArgument, NotFound

__all__ = ["MetaClawData", "MetaClawDay", "MetaClawRound", "OpeningMessage", "read_data"]

_DAY_DIR = re.compile(r"^day\d+$")
# `scripts/<name>.py` as a word of a shell command: upstream copies eval/scripts/
# into the workspace as scripts/ before checking.
_SCRIPT = re.compile(r"(?<![\w./-])scripts/([\w.-]+\.py)\b")
# File names in questions and commands: `day08/prod_config.py`, `log_handler.py`.
_FILE = re.compile(r"(?<![\w/.-])((?:day\d+/)?[\w-]+(?:\.[\w-]+)*\.(?:py|json|md|txt|ya?ml|csv|log|sh|toml|ini|cfg))\b")
_BACKUP = re.compile(r"check_backup\.py\s+(\S+)")


@dataclass(frozen=True, slots=True)
class MetaClawRound:
    round_id: str
    """Unique in the run: ``<day>/<upstream round id>``, e.g. ``day01/r1``."""
    day: str
    upstream_id: str
    kind: str
    """``file_check`` or ``multi_choice``."""
    question: str
    eval: Mapping[str, Any]
    feedback: Mapping[str, Any]
    gradable: bool = True
    why_ungradable: str = ""


@dataclass(frozen=True, slots=True)
class OpeningMessage:
    """A user message pre-seeded in the day's upstream session transcript."""

    offset_s: float
    """Seconds after the session's own start timestamp."""
    text: str


@dataclass(frozen=True, slots=True)
class MetaClawDay:
    day: str
    """The test id (``day01``); also the workspace folder name."""
    eval_name: str
    session: str
    desc: str
    date: dt.date
    date_source: str
    """``session`` (from the transcript's timestamp) or ``weekday-fill``."""
    openings: tuple[OpeningMessage, ...]
    rounds: tuple[MetaClawRound, ...]
    workspace_dir: Path | None
    agent: str = ""
    """Upstream's OpenClaw agent id for the day (``all_tests.json``'s ``agent``)."""
    transcript: Path | None = None
    """The day's seeded session transcript (``openclaw_state/agents/<agent>/sessions/<session>.jsonl``)."""


@dataclass(frozen=True, slots=True)
class MetaClawData:
    name: str
    root: Path
    workspace_src: Path
    scripts_dir: Path | None
    days: tuple[MetaClawDay, ...]
    harness_config: Path | None = None
    """Upstream's OpenClaw config (``openclaw_config_file``), when the data has one."""


def _resolve(root: Path, raw: str | None, default: str) -> Path:
    """Upstream paths are relative to the MetaClaw checkout; map them onto ``root``."""
    candidates: list[Path] = []
    if raw:
        raw = raw.replace("${METACLAW_ROOT}/", "")
        marker = f"/{root.name}/"
        if marker in raw:
            candidates.append(root / raw.split(marker, 1)[1])
        candidates.append(root / raw)
    candidates.append(root / default)
    for cand in candidates:
        if cand.exists():
            return cand
    return candidates[-1]


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotFound(f"MetaClaw data: {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"MetaClaw data: {path} is not valid JSON: {exc}") from None


def _read_session(path: Path) -> tuple[dt.datetime | None, tuple[OpeningMessage, ...]]:
    """The transcript's start time and its seeded user messages (offsets from the start)."""
    if not path.is_file():
        return None, ()
    start: dt.datetime | None = None
    openings: list[OpeningMessage] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        ts_raw = rec.get("timestamp")
        ts = _parse_iso(ts_raw) if isinstance(ts_raw, str) else None
        if rec.get("type") == "session" and ts is not None:
            start = ts
        msg = rec.get("message")
        if rec.get("type") == "message" and isinstance(msg, Mapping) and msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, str):
                text = content
            else:
                text = "\n".join(
                    str(part.get("text", ""))
                    for part in content or []
                    if isinstance(part, Mapping) and part.get("type") == "text"
                )
            if start is None:
                start = ts
            offset = (ts - start).total_seconds() if ts is not None and start is not None else 0.0
            if text.strip():
                openings.append(OpeningMessage(max(0.0, offset), text))
    return start, tuple(openings)


def _parse_iso(raw: str) -> dt.datetime | None:
    try:
        parsed = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _next_weekday(day: dt.date) -> dt.date:
    nxt = day + dt.timedelta(days=1)
    while nxt.weekday() >= 5:
        nxt += dt.timedelta(days=1)
    return nxt


def _missing_inputs(
    kind: str,
    question: str,
    eval_spec: Mapping[str, Any],
    day: str,
    workspace_src: Path,
    scripts_dir: Path | None,
) -> list[str]:
    """Why a round cannot be graded from this data (empty when it can).

    Only file_check rounds read the workspace: a multi_choice round carries its
    options in the question text. A file named by a file_check round is a
    *missing input* when it is not in the data and either the day's README lists
    it among the day's materials or the checker backs it up (a backup check
    only makes sense for a file that exists before the agent acts). Files the
    round asks the agent to create are neither, so they do not count.
    """
    if kind != "file_check":
        return []
    command = str(eval_spec.get("command", ""))
    problems: list[str] = []
    for script in sorted(set(_SCRIPT.findall(command))):
        if scripts_dir is None or not (scripts_dir / script).is_file():
            problems.append(
                f"checker script scripts/{script} is not in the data (upstream eval/scripts/ was "
                "left out); pass options={'scripts_dir': <upstream eval/scripts>} to grade it"
            )
    day_dir = workspace_src / day
    readme = day_dir / "README.md"
    materials = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    backed_up = {Path(arg).name for arg in _BACKUP.findall(command)}
    seen: set[str] = set()
    for name in _FILE.findall(f"{question}\n{command}"):
        base = Path(name).name
        if base in seen or base.startswith("check_"):
            continue
        seen.add(base)
        rel = name if "/" in name else f"{day}/{name}"
        if (workspace_src / rel).exists() or (workspace_src / base).exists():
            continue
        if re.search(rf"(?<![\w.-]){re.escape(base)}(?![\w-])", materials) or base in backed_up:
            problems.append(f"input file {rel} is not in the data (left out of this subset)")
    return problems


def read_data(root: Path, *, scripts_dir: Path | None = None, subset: Sequence[str] = ()) -> MetaClawData:
    root = root.resolve()
    all_tests_path = root / "all_tests.json"
    all_tests = _load_json(all_tests_path)
    if not isinstance(all_tests, Mapping) or not isinstance(all_tests.get("test"), list):
        raise InvalidArgument(f"MetaClaw data: {all_tests_path} has no `test` list")
    eval_dir = _resolve(root, all_tests.get("eval_dir"), "eval")
    workspace_src = _resolve(root, all_tests.get("workspace_src"), "workspaces/shared")
    state_dir = _resolve(root, all_tests.get("openclaw_state_dir"), "openclaw_state")
    config = _resolve(root, all_tests.get("openclaw_config_file"), "openclaw_cfg/openclaw.json")
    if scripts_dir is None and (eval_dir / "scripts").is_dir():
        scripts_dir = eval_dir / "scripts"

    tests: list[Mapping[str, Any]] = list(all_tests["test"])
    known = [str(t.get("id")) for t in tests]
    unknown = [s for s in subset if s not in known]
    if unknown:
        raise InvalidArgument(
            f"MetaClaw subset names unknown days {unknown}; known: {', '.join(known)}",
            field="subset",
        )

    days: list[MetaClawDay] = []
    prev_date: dt.date | None = None
    for test in tests:
        day = str(test["id"])
        eval_name = str(test.get("eval", day))
        session = str(test.get("session", ""))
        agent = str(test.get("agent", ""))
        transcript = state_dir / "agents" / agent / "sessions" / f"{session}.jsonl"
        start, openings = _read_session(transcript)
        if start is not None:
            date, source = start.astimezone(dt.UTC).date(), "session"
        elif prev_date is not None:
            # No transcript: the next weekday keeps the arc on working days.
            date, source = _next_weekday(prev_date), "weekday-fill"
        else:
            raise InvalidArgument(
                f"MetaClaw data: day {day} has no session transcript with a timestamp, "
                "so the first simulated date is unknown"
            )
        if prev_date is not None and date <= prev_date:
            raise InvalidArgument(f"MetaClaw data: day {day} ({date}) does not come after {prev_date}")
        prev_date = date
        if subset and day not in subset:
            continue
        questions = _load_json(eval_dir / eval_name / "questions.json")
        groups = questions if isinstance(questions, list) else [questions]
        rounds: list[MetaClawRound] = []
        for group in groups:
            for rec in group.get("rounds", []):
                kind = str(rec.get("type", "multi_choice"))
                eval_spec: Mapping[str, Any] = rec.get("eval", {}) or {}
                problems = _missing_inputs(kind, str(rec["question"]), eval_spec, day, workspace_src, scripts_dir)
                rounds.append(
                    MetaClawRound(
                        round_id=f"{day}/{rec['id']}",
                        day=day,
                        upstream_id=str(rec["id"]),
                        kind=kind,
                        question=str(rec["question"]),
                        eval=eval_spec,
                        feedback=rec.get("feedback", {}) or {},
                        gradable=not problems,
                        why_ungradable="; ".join(problems),
                    )
                )
        day_dir = workspace_src / day
        days.append(
            MetaClawDay(
                day=day,
                eval_name=eval_name,
                session=session,
                desc=str(test.get("desc", "")),
                date=date,
                date_source=source,
                openings=openings,
                rounds=tuple(rounds),
                workspace_dir=day_dir if day_dir.is_dir() else None,
                agent=agent,
                transcript=transcript if transcript.is_file() else None,
            )
        )
    return MetaClawData(
        name=str(all_tests.get("name", root.name)),
        root=root,
        workspace_src=workspace_src,
        scripts_dir=scripts_dir,
        days=tuple(days),
        harness_config=config if config.is_file() else None,
    )


def is_day_dir(path: Path) -> bool:
    return path.is_dir() and bool(_DAY_DIR.match(path.name))
