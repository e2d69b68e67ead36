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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters._data_files import parse_json, read_json, read_text, typed
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
        try:
            if cand.exists():
                return cand
        except OSError:  # a name too long to be a path: not there
            continue
    return candidates[-1]


_DATA = "MetaClaw data file"
_TRANSCRIPT = "MetaClaw session transcript"


def _name(test: Mapping[str, Any], key: str, where: str, default: str) -> str:
    """A name that becomes part of a path (a day's eval folder, its agent and session):
    one path component, as upstream's are."""
    value = typed(test, key, str, where, required=False)
    if value is None:
        return default
    if not value or len(value) > 255 or value in (".", "..") or any(c in value for c in "/\\\0"):
        raise InvalidArgument(f"{where}: {key} {value[:80]!r} is not a file name", field=key)
    return str(value)


def _read_session(path: Path) -> tuple[dt.datetime | None, tuple[OpeningMessage, ...]]:
    """The transcript's start time and its seeded user messages (offsets from the start)."""
    if not path.is_file():
        return None, ()
    start: dt.datetime | None = None
    openings: list[OpeningMessage] = []
    for n, line in enumerate(read_text(path, _TRANSCRIPT).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{_TRANSCRIPT} {path} line {n}"
        rec = _parse_line(line, where)
        ts_raw = rec.get("timestamp")
        ts = _parse_iso(ts_raw) if isinstance(ts_raw, str) else None
        if rec.get("type") == "session" and ts is not None:
            start = ts
        msg = rec.get("message")
        if rec.get("type") == "message" and isinstance(msg, Mapping) and msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, str):
                text = content
            elif content is not None and not isinstance(content, list):
                raise InvalidArgument(f"{where}: message.content must be text or a list of parts", field="content")
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


def _parse_line(line: str, where: str) -> Mapping[str, Any]:
    rec = parse_json(line, where)
    if not isinstance(rec, Mapping):
        raise InvalidArgument(f"{where}: a transcript line must be a JSON object")
    return rec


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
    materials = read_text(readme, "MetaClaw workspace file") if readme.is_file() else ""
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
    """Every problem is an InvalidArgument (or NotFound) naming the file and the field."""
    root = root.resolve()
    all_tests_path = root / "all_tests.json"
    all_tests = read_json(all_tests_path, _DATA)
    where = f"{_DATA} {all_tests_path}"
    if not isinstance(all_tests, Mapping) or not isinstance(all_tests.get("test"), list):
        raise InvalidArgument(f"{where} has no `test` list", field="test")
    eval_dir = _resolve(root, typed(all_tests, "eval_dir", str, where, required=False), "eval")
    workspace_src = _resolve(root, typed(all_tests, "workspace_src", str, where, required=False), "workspaces/shared")
    state_dir = _resolve(root, typed(all_tests, "openclaw_state_dir", str, where, required=False), "openclaw_state")
    config = _resolve(
        root, typed(all_tests, "openclaw_config_file", str, where, required=False), "openclaw_cfg/openclaw.json"
    )
    if scripts_dir is None and (eval_dir / "scripts").is_dir():
        scripts_dir = eval_dir / "scripts"

    tests: list[tuple[str, str, Mapping[str, Any]]] = []
    for i, test in enumerate(all_tests["test"]):
        at = f"{where}, test[{i}]"
        if not isinstance(test, Mapping):
            raise InvalidArgument(f"{at} must be an object (a day)", field="test")
        tests.append((at, _name(test, "id", at, ""), test))
    known = [day for _, day, _ in tests]
    for at, day, _ in tests:
        if not day:
            raise InvalidArgument(f"{at}: id must be a day's name (day01)", field="id")
    unknown = [s for s in subset if s not in known]
    if unknown:
        raise InvalidArgument(
            f"MetaClaw subset names unknown days {unknown}; {all_tests_path} has: {', '.join(known)}",
            field="subset",
        )

    days: list[MetaClawDay] = []
    prev_date: dt.date | None = None
    for at, day, test in tests:
        eval_name = _name(test, "eval", at, day)
        session = _name(test, "session", at, "")
        agent = _name(test, "agent", at, "")
        desc = typed(test, "desc", str, at, required=False) or ""
        transcript = state_dir / "agents" / agent / "sessions" / f"{session}.jsonl"
        start, openings = _read_session(transcript)
        if start is not None:
            date, source = start.astimezone(dt.UTC).date(), "session"
        elif prev_date is not None:
            # No transcript: the next weekday keeps the arc on working days.
            date, source = _next_weekday(prev_date), "weekday-fill"
        else:
            raise InvalidArgument(
                f"{at} ({day}): no session transcript with a timestamp at {transcript} (its agent and "
                "session), so the first simulated date is unknown",
                field="session",
            )
        if prev_date is not None and date <= prev_date:
            raise InvalidArgument(
                f"{at} ({day}): its date {date}, from {transcript}'s timestamps, does not come after {prev_date}",
                field="session",
            )
        prev_date = date
        if subset and day not in subset:
            continue
        questions_path = eval_dir / eval_name / "questions.json"
        if not questions_path.exists():
            raise NotFound(f"{at} ({day}): eval {eval_name!r} has no {questions_path}", field="eval")
        rounds = _read_rounds(questions_path, day, workspace_src, scripts_dir)
        day_dir = workspace_src / day
        days.append(
            MetaClawDay(
                day=day,
                eval_name=eval_name,
                session=session,
                desc=desc,
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


def _read_rounds(path: Path, day: str, workspace_src: Path, scripts_dir: Path | None) -> list[MetaClawRound]:
    """The rounds of one day's ``questions.json`` (an object, or a list of them, with ``rounds``)."""
    questions = read_json(path, _DATA)
    groups = questions if isinstance(questions, list) else [questions]
    rounds: list[MetaClawRound] = []
    for g, group in enumerate(groups):
        at = f"{_DATA} {path}" + (f", [{g}]" if isinstance(questions, list) else "")
        if not isinstance(group, Mapping):
            raise InvalidArgument(f"{at} must be an object with rounds", field="rounds")
        for r, rec in enumerate(typed(group, "rounds", list, at, required=False) or []):
            where = f"{at}, rounds[{r}]"
            if not isinstance(rec, Mapping):
                raise InvalidArgument(f"{where} must be an object (a round)", field="rounds")
            upstream_id = str(typed(rec, "id", (str, int), where))
            question = typed(rec, "question", str, where)
            kind = typed(rec, "type", str, where, required=False) or "multi_choice"
            eval_spec: Mapping[str, Any] = typed(rec, "eval", dict, where, required=False) or {}
            feedback: Mapping[str, Any] = typed(rec, "feedback", dict, where, required=False) or {}
            problems = _missing_inputs(kind, question, eval_spec, day, workspace_src, scripts_dir)
            rounds.append(
                MetaClawRound(
                    round_id=f"{day}/{upstream_id}",
                    day=day,
                    upstream_id=upstream_id,
                    kind=kind,
                    question=question,
                    eval=eval_spec,
                    feedback=feedback,
                    gradable=not problems,
                    why_ungradable="; ".join(problems),
                )
            )
    return rounds


def is_day_dir(path: Path) -> bool:
    return path.is_dir() and bool(_DAY_DIR.match(path.name))
