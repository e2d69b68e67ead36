"""PersonaMem (v1, 128k): one persona's conversation over simulated days, multiple-choice
questions asked where upstream cuts the history, scored by upstream's answer rule.

``PersonaMemBenchmark().load(ScenarioConfig(data_dir=..., options={"context": "8567"}))``
reads the release files unchanged from a folder: ``questions_128k.csv`` and
``shared_contexts_128k.jsonl`` (options ``questions_file`` / ``contexts_file`` name
others, e.g. the 32k pair). A scenario is one shared context (one persona's
conversation) and the questions that point at it: the agent's memory must start
empty for each context, so a run picks one, by ``context`` (a prefix of its
``shared_context_id``) or by ``subset`` (question ids, all of one context; the
scenario then asks only those). ``contexts(config)`` and ``question_ids(config)``
list what there is. ``scenario="tiny"`` is the project's own fixture in the same
schema (``scenarios/questions_tiny.csv``, ``scenarios/shared_contexts_tiny.jsonl``,
written by ``scripts/personamem_fixture.py``).

Options: ``questions_file``, ``contexts_file``, ``context``, ``assistant_turns``
(``"drop"`` default, or ``"attach"``), ``consolidate_at`` (``"HH:MM"`` UTC or None),
``start_date`` (the first block's day, ``YYYY-MM-DD``; default 2026-01-05).
See ``_scenario`` for the mapping onto simulated time.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters import BenchmarkInfo, ScenarioConfig
from adapters.personamem._data import (
    LETTERS,
    QUESTION_TYPES,
    REQUIRED_COLUMNS,
    ContextMessage,
    PersonaMemQuestion,
    read_context,
    read_questions,
    shared_context_id,
)
from adapters.personamem._scenario import (
    DEFAULT_START,
    SESSION_TIME,
    Ask,
    Block,
    PersonaMemScenario,
    PersonaMemSource,
    Turn,
    accuracy,
    plan_blocks,
)
from adapters.personamem._scoring import INSTRUCTIONS, AnswerCheck, check_answer, extract_options, question_prompt
from sclated.errors import InvalidArgument, NotFound

__all__ = [
    "BUILTIN_SCENARIOS",
    "DEFAULT_START",
    "INSTRUCTIONS",
    "LETTERS",
    "QUESTION_TYPES",
    "REQUIRED_COLUMNS",
    "SESSION_TIME",
    "AnswerCheck",
    "Ask",
    "Block",
    "ContextMessage",
    "ContextSummary",
    "PersonaMemBenchmark",
    "PersonaMemQuestion",
    "PersonaMemScenario",
    "PersonaMemSource",
    "Turn",
    "accuracy",
    "check_answer",
    "extract_options",
    "plan_blocks",
    "question_prompt",
    "read_context",
    "read_questions",
    "shared_context_id",
]

SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
BUILTIN_SCENARIOS: tuple[str, ...] = ("tiny",)
OPTIONS = ("questions_file", "contexts_file", "context", "assistant_turns", "consolidate_at", "start_date")
_DEFAULT_SIZE = "128k"


@dataclass(frozen=True, slots=True)
class ContextSummary:
    shared_context_id: str
    persona_id: str
    questions: int


def _text_option(value: Any) -> str:
    """An option's text; a number (the CLI reads ``context=8567`` as JSON, and the run's
    options travel as a protobuf Struct, so as a float) back as its digits."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class PersonaMemBenchmark:
    """The PersonaMem adapter (implements :class:`adapters.BenchmarkAdapter`)."""

    @property
    def info(self) -> BenchmarkInfo:
        return BenchmarkInfo(
            name="personamem",
            description=(
                "PersonaMem-128k: one persona's conversation, a session per block on consecutive "
                "simulated days; multiple-choice questions asked where upstream cuts the history, "
                "scored by upstream's answer rule (accuracy by question_type)."
            ),
            data_format=(
                "a folder with upstream's questions_128k.csv (columns question_id, question_type, topic, "
                "user_question_or_message, correct_answer, all_options, shared_context_id, "
                "end_index_in_shared_context; others kept) and shared_contexts_128k.jsonl (one "
                "{shared_context_id: [messages]} object per line); options questions_file/contexts_file "
                "name other files; pick one context with option context=<id prefix> or subset=question ids"
            ),
            builtin_scenarios=BUILTIN_SCENARIOS,
            data_file_options=frozenset({"questions_file", "contexts_file"}),
            builtin_data=(SCENARIOS_DIR,),
        )

    def _files(self, config: ScenarioConfig) -> tuple[Path, Path]:
        unknown = sorted(set(config.options) - set(OPTIONS))
        if unknown:
            raise InvalidArgument(
                f"unknown personamem option(s): {', '.join(unknown)} (known: {', '.join(OPTIONS)})",
                field="run.benchmark.options",
            )
        if config.data_dir is not None:
            folder, size = Path(config.data_dir), _DEFAULT_SIZE
            if not folder.is_dir():
                raise NotFound(f"PersonaMem data_dir {folder} is not a directory")
        elif config.scenario in BUILTIN_SCENARIOS:
            folder, size = SCENARIOS_DIR, str(config.scenario)
        else:
            raise NotFound(
                f"no PersonaMem scenario {config.scenario!r}: give data_dir or one of {', '.join(BUILTIN_SCENARIOS)}"
            )
        questions = str(config.options.get("questions_file") or f"questions_{size}.csv")
        contexts = str(config.options.get("contexts_file") or f"shared_contexts_{size}.jsonl")
        return folder / questions, folder / contexts

    def questions(self, config: ScenarioConfig) -> list[PersonaMemQuestion]:
        """Every question of the questions file, in file order."""
        return read_questions(self._files(config)[0])

    def question_ids(self, config: ScenarioConfig) -> list[str]:
        return [q.question_id for q in self.questions(config)]

    def contexts(self, config: ScenarioConfig) -> list[ContextSummary]:
        """The shared contexts the questions point at, in order of first mention."""
        counts: dict[str, list[PersonaMemQuestion]] = {}
        for q in self.questions(config):
            counts.setdefault(q.shared_context_id, []).append(q)
        return [ContextSummary(cid, qs[0].extra.get("persona_id", ""), len(qs)) for cid, qs in counts.items()]

    def load(self, config: ScenarioConfig) -> PersonaMemScenario:
        questions_path, contexts_path = self._files(config)
        questions = read_questions(questions_path)
        context_id, chosen = _choose(questions, config, questions_path)
        messages = read_context(contexts_path, context_id)
        for q in chosen:
            if q.end_index > len(messages):
                raise InvalidArgument(
                    f"{questions_path.name} row {q.row} (question_id {q.question_id}): end_index_in_shared_context "
                    f"{q.end_index} is past the end of its context ({len(messages)} messages in {contexts_path.name})",
                    field="end_index_in_shared_context",
                )
        options = dict(config.options)
        assistant_turns = options.get("assistant_turns", "drop")
        if assistant_turns not in ("drop", "attach"):
            raise InvalidArgument(
                f"option assistant_turns must be 'drop' or 'attach', not {assistant_turns!r}",
                field="options.assistant_turns",
            )
        consolidate: dt.time | None = dt.time(2, 0)
        if "consolidate_at" in options:
            value = options["consolidate_at"]
            try:
                consolidate = None if value is None else dt.time.fromisoformat(str(value))
            except ValueError:
                raise InvalidArgument(
                    f"option consolidate_at={value!r} is not a time like '02:00'", field="options.consolidate_at"
                ) from None
        start = DEFAULT_START
        if options.get("start_date") is not None:
            try:
                start = dt.date.fromisoformat(str(options["start_date"]))
            except ValueError:
                raise InvalidArgument(
                    f"option start_date={options['start_date']!r} is not a date like '2026-01-05'",
                    field="options.start_date",
                ) from None
        return PersonaMemScenario(
            context_id, messages, chosen, assistant_turns=assistant_turns, consolidate_at=consolidate, start_date=start
        )


def _choose(
    questions: list[PersonaMemQuestion], config: ScenarioConfig, path: Path
) -> tuple[str, list[PersonaMemQuestion]]:
    """The scenario's context and its questions, from ``context`` and ``subset``."""
    by_context: dict[str, list[PersonaMemQuestion]] = {}
    for q in questions:
        by_context.setdefault(q.shared_context_id, []).append(q)
    listed = ", ".join(f"{cid[:12]} ({len(qs)} questions)" for cid, qs in list(by_context.items())[:12])
    listed += ", ..." if len(by_context) > 12 else ""
    wanted: str | None = None
    if config.options.get("context") is not None:
        prefix = _text_option(config.options["context"]).strip().lower()
        matches = [cid for cid in by_context if cid.lower().startswith(prefix)] if prefix else []
        if not matches:
            raise InvalidArgument(
                f"option context={prefix!r} is the start of no shared_context_id in {path.name}; "
                f"its contexts: {listed}",
                field="options.context",
            )
        if len(matches) > 1:
            raise InvalidArgument(
                f"option context={prefix!r} starts {len(matches)} shared_context_ids in {path.name} "
                f"({', '.join(m[:12] for m in matches)}): give more of it",
                field="options.context",
            )
        wanted = matches[0]
    if config.subset:
        by_id = {q.question_id: q for q in questions}
        unknown = [qid for qid in config.subset if qid not in by_id]
        if unknown:
            raise InvalidArgument(f"PersonaMem subset names question ids not in {path.name}: {unknown}", field="subset")
        picked = [q for q in questions if q.question_id in set(config.subset)]
        contexts = sorted({q.shared_context_id for q in picked})
        if wanted is not None and contexts != [wanted]:
            others = [q.question_id for q in picked if q.shared_context_id != wanted]
            raise InvalidArgument(
                f"PersonaMem subset questions {others} are not on context {wanted[:12]} (option context)",
                field="subset",
            )
        if len(contexts) > 1:
            raise InvalidArgument(
                f"a PersonaMem scenario is one shared context; the subset's questions are on {len(contexts)} "
                f"({', '.join(c[:12] for c in contexts)}): give question ids of one context",
                field="subset",
            )
        return contexts[0], picked
    if wanted is not None:
        return wanted, by_context[wanted]
    if len(by_context) == 1:
        ((only, qs),) = by_context.items()
        return only, qs
    raise InvalidArgument(
        f"a PersonaMem scenario is one shared context (one persona's conversation); {path.name} has "
        f"{len(by_context)}: give option context=<shared_context_id prefix> or subset=(question ids of one "
        f"context); its contexts: {listed}",
        field="options.context",
    )
