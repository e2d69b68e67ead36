"""PersonaMem's release files, read unchanged: the questions CSV and the shared contexts.

* ``questions_<size>.csv``: one row per question, read by header name (extra
  columns are kept, not required). ``all_options`` is a Python list literal of
  four strings ``"(a) ..."`` to ``"(d) ..."`` (upstream writes ``str(list)``),
  ``correct_answer`` is ``"(a)"`` to ``"(d)"``, ``end_index_in_shared_context``
  an int: the visible history is ``context[:end_index]``.
* ``shared_contexts_<size>.jsonl``: one object per line with a single key, the
  ``shared_context_id``, whose value is the message list (``role`` and
  ``content``; roles ``system``, ``user``, ``assistant``).

Every problem is an :class:`InvalidArgument` (or :class:`NotFound` for a file or
id that is not there) naming the file and the row (the n-th data row after the
header, counted from 1) or line, and the field.
"""

from __future__ import annotations

import ast
import csv
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters._data_files import parse_json
from sclated.errors import InvalidArgument, NotFound

__all__ = [
    "LETTERS",
    "QUESTION_TYPES",
    "REQUIRED_COLUMNS",
    "ContextMessage",
    "PersonaMemQuestion",
    "read_context",
    "read_questions",
    "shared_context_id",
]

LETTERS = "abcd"
REQUIRED_COLUMNS: tuple[str, ...] = (
    "question_id",
    "question_type",
    "topic",
    "user_question_or_message",
    "correct_answer",
    "all_options",
    "shared_context_id",
    "end_index_in_shared_context",
)
QUESTION_TYPES: tuple[str, ...] = (
    "recall_user_shared_facts",
    "suggest_new_ideas",
    "acknowledge_latest_preferences",
    "track_full_preference_evolution",
    "revisit_reasons_behind_preference_updates",
    "provide_preference_aligned_recommendations",
    "generalize_to_new_scenarios",
)
"""The release's seven names (upstream ``inference.py::question_type_mapping``); others are
carried as they are, not refused."""
ROLES = ("system", "user", "assistant")


def shared_context_id(messages: Sequence[Mapping[str, Any]]) -> str:
    """Upstream's ``generate_shared_context_id``: sha256 over ``" ".join(map(str, messages))``
    (each message's Python ``str``, keys in file order)."""
    return hashlib.sha256(" ".join(map(str, messages)).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ContextMessage:
    index: int
    role: str
    content: str


@dataclass(frozen=True, slots=True)
class PersonaMemQuestion:
    row: int
    """The data row in the CSV (1: the first row after the header)."""
    question_id: str
    question_type: str
    topic: str
    question: str
    """``user_question_or_message``."""
    correct_answer: str
    """As the file has it: ``"(c)"``."""
    all_options: str
    """The column's raw text (the list literal), which upstream pastes into its prompt as is."""
    options: tuple[str, ...]
    shared_context_id: str
    end_index: int
    extra: Mapping[str, str] = field(default_factory=dict)
    """The row's other columns (``persona_id``, the distance and length columns)."""

    @property
    def correct_letter(self) -> str:
        return self.correct_answer.lower().strip("() ")


def _where(path: Path, row: int, question_id: str = "") -> str:
    named = f" (question_id {question_id})" if question_id else ""
    return f"{path.name} row {row}{named}"


def read_questions(path: Path) -> list[PersonaMemQuestion]:
    reader: csv.DictReader[str] | None = None
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames
            if not header:
                raise InvalidArgument(f"PersonaMem questions file {path} is empty: no header row")
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise InvalidArgument(
                    f"PersonaMem questions file {path} lacks the columns {missing} (its header has {list(header)})",
                    field=missing[0],
                )
            out: list[PersonaMemQuestion] = []
            seen: dict[str, int] = {}
            for row_no, row in enumerate(reader, start=1):
                question = _question(path, row_no, row)
                if question.question_id in seen:
                    raise InvalidArgument(
                        f"{_where(path, row_no)}: question_id {question.question_id} "
                        f"repeats row {seen[question.question_id]}",
                        field="question_id",
                    )
                seen[question.question_id] = row_no
                out.append(question)
    except FileNotFoundError:
        raise NotFound(f"PersonaMem questions file {path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"PersonaMem questions file {path} is not UTF-8 text: {exc}") from None
    except OSError as exc:  # a directory, or unreadable
        raise InvalidArgument(f"PersonaMem questions file {path} cannot be read: {exc.strerror or exc}") from None
    except csv.Error as exc:
        line = f" at line {reader.line_num}" if reader is not None and reader.line_num else ""
        raise InvalidArgument(f"PersonaMem questions file {path} is not valid CSV{line}: {exc}") from None
    if not out:
        raise InvalidArgument(f"PersonaMem questions file {path} has no question rows")
    return out


def _question(path: Path, row_no: int, row: Mapping[str | Any, str | Any]) -> PersonaMemQuestion:
    if None in row:  # more cells than the header has columns
        raise InvalidArgument(f"{_where(path, row_no)}: more cells than the header has columns")
    values = {k: ("" if v is None else str(v)) for k, v in row.items()}
    qid = values["question_id"].strip()
    where = _where(path, row_no, qid)
    for column in REQUIRED_COLUMNS:
        if not values[column].strip():
            raise InvalidArgument(f"{where}: {column} is empty", field=column)
    raw_options = values["all_options"]
    try:
        options = ast.literal_eval(raw_options)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        options = None
    if not (isinstance(options, list) and len(options) == 4 and all(isinstance(o, str) for o in options)):
        raise InvalidArgument(
            f"{where}: all_options is not a list of 4 options (a Python list literal of 4 strings): "
            f"{raw_options[:120]!r}",
            field="all_options",
        )
    for letter, option in zip(LETTERS, options, strict=True):
        if not option.startswith(f"({letter}) "):
            raise InvalidArgument(
                f"{where}: all_options item {LETTERS.index(letter) + 1} does not start with "
                f"'({letter}) ': {option[:60]!r}",
                field="all_options",
            )
    correct = values["correct_answer"].strip()
    if correct.lower().strip("() ") not in LETTERS or len(correct.lower().strip("() ")) != 1:
        raise InvalidArgument(
            f"{where}: correct_answer {correct!r} is not one of (a), (b), (c), (d)", field="correct_answer"
        )
    raw_end = values["end_index_in_shared_context"].strip()
    try:
        end_index = int(raw_end)
    except ValueError:
        raise InvalidArgument(
            f"{where}: end_index_in_shared_context {raw_end!r} is not an integer",
            field="end_index_in_shared_context",
        ) from None
    if end_index < 1:
        raise InvalidArgument(
            f"{where}: end_index_in_shared_context {end_index} is below 1 (the question would see no history)",
            field="end_index_in_shared_context",
        )
    return PersonaMemQuestion(
        row=row_no,
        question_id=qid,
        question_type=values["question_type"].strip(),
        topic=values["topic"].strip(),
        question=values["user_question_or_message"],
        correct_answer=correct,
        all_options=raw_options,
        options=tuple(options),
        shared_context_id=values["shared_context_id"].strip(),
        end_index=end_index,
        extra={k: v for k, v in values.items() if k not in REQUIRED_COLUMNS},
    )


def _line_key(line: str) -> str | None:
    """The key of a ``{"<id>": [...]}`` line without parsing the (large) list."""
    stripped = line.lstrip()
    if not stripped.startswith('{"'):
        return None
    end = stripped.find('"', 2)
    return stripped[2:end] if end > 2 else None


def read_context(path: Path, context_id: str) -> tuple[ContextMessage, ...]:
    """The messages of ``context_id`` (only that line is parsed in full)."""
    try:
        with path.open(encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                key = _line_key(line)
                if key is not None and key != context_id:
                    continue
                obj = parse_json(line, f"{path.name} line {line_no}")
                if not isinstance(obj, dict) or len(obj) != 1:
                    raise InvalidArgument(
                        f"{path.name} line {line_no}: not an object with one key (shared_context_id -> messages)"
                    )
                ((found, messages),) = obj.items()
                if found == context_id:
                    return _messages(path, line_no, messages)
    except FileNotFoundError:
        raise NotFound(f"PersonaMem contexts file {path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"PersonaMem contexts file {path} is not UTF-8 text: {exc}") from None
    except OSError as exc:  # a directory, or unreadable
        raise InvalidArgument(f"PersonaMem contexts file {path} cannot be read: {exc.strerror or exc}") from None
    raise NotFound(f"{path.name} has no shared context {context_id}")


def _messages(path: Path, line_no: int, raw: Any) -> tuple[ContextMessage, ...]:
    where = f"{path.name} line {line_no}"
    if not isinstance(raw, list) or not raw:
        raise InvalidArgument(f"{where}: the context is not a non-empty list of messages")
    out: list[ContextMessage] = []
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict):
            raise InvalidArgument(f"{where}: message {i} is not an object with role and content")
        role, content = msg.get("role"), msg.get("content")
        if role not in ROLES:
            raise InvalidArgument(f"{where}: message {i} has role {role!r}, not one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise InvalidArgument(f"{where}: message {i} has no text content (content is {type(content).__name__})")
        out.append(ContextMessage(i, role, content))
    return tuple(out)
