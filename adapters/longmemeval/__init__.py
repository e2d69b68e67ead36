"""LongMemEval-s: one question's dated haystack sessions, then the question.

``LongMemEvalBenchmark().load(ScenarioConfig(data_dir=..., subset=(qid,)))``
reads upstream items unchanged from a JSON list (``longmemeval_s.json``; give
the file or its folder). A scenario is one item: each item has its own
history, so the agent's memory must start empty for it; run one scenario per
question id (``question_ids(config)`` lists them). ``scenario="tiny"`` is the
project's own 3-item fixture in the same schema.

Options: ``file`` (file name inside ``data_dir``, default ``longmemeval_s.json``),
``assistant_turns`` (``"drop"`` default, or ``"attach"``), ``consolidate_at``
(``"HH:MM"`` UTC or None).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from adapters import BenchmarkInfo, ScenarioConfig
from adapters._data_files import read_json, typed
from adapters.longmemeval._judge import (
    QUESTION_TYPES,
    anscheck_prompt,
    contains_match,
    exact_match,
    judge_label,
)
from adapters.longmemeval._scenario import (
    DATE_FORMAT,
    HaystackSession,
    LongMemEvalItem,
    LongMemEvalScenario,
    LongMemEvalSource,
    parse_date,
)
from sclated.errors import InvalidArgument, NotFound

__all__ = [
    "BUILTIN_SCENARIOS",
    "DATE_FORMAT",
    "QUESTION_TYPES",
    "HaystackSession",
    "LongMemEvalBenchmark",
    "LongMemEvalItem",
    "LongMemEvalScenario",
    "LongMemEvalSource",
    "anscheck_prompt",
    "contains_match",
    "exact_match",
    "judge_label",
    "parse_date",
]

_SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
BUILTIN_SCENARIOS: tuple[str, ...] = ("tiny",)


class LongMemEvalBenchmark:
    """The LongMemEval adapter (implements :class:`adapters.BenchmarkAdapter`)."""

    @property
    def info(self) -> BenchmarkInfo:
        return BenchmarkInfo(
            name="longmemeval",
            description=(
                "LongMemEval-s: timestamped chat sessions on their own simulated dates, "
                "then one question judged by the upstream yes/no prompt."
            ),
            data_format=(
                "upstream JSON list of items (question_id, question_type, question, answer, "
                "question_date, haystack_session_ids, haystack_dates, haystack_sessions, "
                "answer_session_ids), e.g. longmemeval_s.json"
            ),
            builtin_scenarios=BUILTIN_SCENARIOS,
            data_file_options=frozenset({"file"}),
            builtin_data=(_SCENARIOS_DIR,),
        )

    def _raw_items(self, config: ScenarioConfig) -> tuple[Path, list[dict[str, Any]]]:
        """The data file and its items."""
        if config.data_dir is not None:
            path = Path(config.data_dir)
            if path.is_dir():
                path = path / str(config.options.get("file", "longmemeval_s.json"))
        elif config.scenario in BUILTIN_SCENARIOS:
            path = _SCENARIOS_DIR / f"{config.scenario}.json"
        else:
            raise NotFound(
                f"no LongMemEval scenario {config.scenario!r}: give data_dir or one of {', '.join(BUILTIN_SCENARIOS)}"
            )
        raw = read_json(path, "LongMemEval data file")
        if not isinstance(raw, list):
            raise InvalidArgument(f"LongMemEval data file {path} is not a JSON list of items")
        for i, item in enumerate(raw):
            where = f"LongMemEval data file {path}, item {i}"
            if not isinstance(item, dict):
                raise InvalidArgument(f"{where}: must be an object (an item)")
            if typed(item, "question_id", (str, int), where) == "":
                raise InvalidArgument(f"{where}: question_id is empty", field="question_id")
        return path, raw

    def question_ids(self, config: ScenarioConfig) -> list[str]:
        return [str(item.get("question_id")) for item in self._raw_items(config)[1]]

    def load(self, config: ScenarioConfig) -> LongMemEvalScenario:
        path, raw = self._raw_items(config)
        ids = [str(item.get("question_id")) for item in raw]
        chosen = [item for item in raw if not config.subset or str(item.get("question_id")) in config.subset]
        unknown = [q for q in config.subset if q not in ids]
        if unknown:
            raise InvalidArgument(f"LongMemEval subset names question_ids not in {path}: {unknown}", field="subset")
        if len(chosen) != 1:
            shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
            raise InvalidArgument(
                f"a LongMemEval scenario is one question (each has its own history); "
                f"{len(chosen)} selected: give subset=(question_id,), one of {shown}",
                field="subset",
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
                    f"option consolidate_at={value!r} is not a time like '02:00'",
                    field="options.consolidate_at",
                ) from None
        at = raw.index(chosen[0])
        item = LongMemEvalItem.from_upstream(
            chosen[0],
            assistant_turns=assistant_turns,
            where=f"LongMemEval data file {path}, item {at} ({ids[at]})",
        )
        return LongMemEvalScenario(item, consolidate_at=consolidate)
