"""MetaClaw-Bench: upstream days and rounds on simulated days.

``MetaClawBenchmark().load(ScenarioConfig(data_dir=...))`` reads an upstream
data directory unchanged (e.g. ``metaclaw-bench-small``);
``ScenarioConfig(scenario="tiny")`` loads the project's own small scenario in
the same layout. ``subset`` keeps the named days (``day01`` ...).

Options: ``scripts_dir`` (upstream ``eval/scripts`` when the data lacks it),
``seed_dir`` (where workspace seeds are laid out; a temp dir by default),
``day_start`` / ``consolidate_at`` (``"HH:MM"`` UTC; ``consolidate_at=None``
turns nightly consolidation off), ``openings`` and ``standalone_feedback``
(bools, default True), ``protocol`` (``continual`` or ``upstream``; by default
``upstream`` for an agent that takes seeded sessions, OpenClaw, and
``continual`` otherwise: see :class:`TimelineConfig`).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from adapters import BenchmarkInfo, Capability, ScenarioConfig
from adapters.metaclaw._data import (
    MetaClawData,
    MetaClawDay,
    MetaClawRound,
    OpeningMessage,
    read_data,
)
from adapters.metaclaw._scenario import MetaClawScenario, MetaClawSource, TimelineConfig, turn_ended
from adapters.metaclaw._scoring import (
    extract_bbox,
    file_check_feedback,
    multi_choice_feedback,
    multi_choice_score,
    normalize_answer,
    standalone_feedback,
    with_feedback,
)
from sclated.errors import InvalidArgument, NotFound

__all__ = [
    "BUILTIN_SCENARIOS",
    "MetaClawBenchmark",
    "MetaClawData",
    "MetaClawDay",
    "MetaClawRound",
    "MetaClawScenario",
    "MetaClawSource",
    "OpeningMessage",
    "TimelineConfig",
    "extract_bbox",
    "file_check_feedback",
    "multi_choice_feedback",
    "multi_choice_score",
    "normalize_answer",
    "read_data",
    "standalone_feedback",
    "turn_ended",
    "with_feedback",
]

_SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
_PROTOCOLS = ("continual", "upstream")
BUILTIN_SCENARIOS: tuple[str, ...] = ("tiny",)
PATH_OPTIONS = frozenset({"scripts_dir", "seed_dir"})
"""Options that are host paths: ``seed_dir`` is written to (the day's seeds are laid out there)."""


def _time_option(options: dict[str, Any], key: str, default: dt.time | None) -> dt.time | None:
    if key not in options:
        return default
    raw = options[key]
    if raw is None:
        return None
    try:
        return dt.time.fromisoformat(str(raw))
    except ValueError:
        raise InvalidArgument(f"option {key}={raw!r} is not a time like '09:00'", field=f"options.{key}") from None


class MetaClawBenchmark:
    """The MetaClaw-Bench adapter (implements :class:`adapters.BenchmarkAdapter`)."""

    @property
    def info(self) -> BenchmarkInfo:
        return BenchmarkInfo(
            name="metaclaw",
            description=(
                "MetaClaw-Bench: multi-day workspace tasks (file_check) and preference questions "
                "(multi_choice) with feedback carried into the next round; days on simulated time."
            ),
            data_format=(
                "upstream metaclaw-bench layout: all_tests.json, eval/dayNN/questions.json, "
                "[eval/scripts/], workspaces/shared/, "
                "openclaw_state/agents/<agent>/sessions/*.jsonl"
            ),
            builtin_scenarios=BUILTIN_SCENARIOS,
            path_options=PATH_OPTIONS,
            builtin_data=(_SCENARIOS_DIR,),
        )

    def load(self, config: ScenarioConfig) -> MetaClawScenario:
        if config.data_dir is not None:
            root = Path(config.data_dir)
        elif config.scenario in BUILTIN_SCENARIOS:
            root = _SCENARIOS_DIR / str(config.scenario)
        else:
            raise NotFound(
                f"no MetaClaw scenario {config.scenario!r}: give data_dir or one of {', '.join(BUILTIN_SCENARIOS)}"
            )
        options = dict(config.options)
        scripts = options.get("scripts_dir")
        data = read_data(root, scripts_dir=Path(scripts) if scripts else None, subset=config.subset)
        day_start = _time_option(options, "day_start", dt.time(9, 0))
        if day_start is None:
            raise InvalidArgument("option day_start cannot be None", field="options.day_start")
        protocol = options.get("protocol")
        if protocol is None:
            protocol = "upstream" if Capability.SEEDED_SESSIONS in config.agent_capabilities else "continual"
        if protocol not in _PROTOCOLS:
            raise InvalidArgument(
                f"option protocol={protocol!r} is not one of {', '.join(_PROTOCOLS)}", field="options.protocol"
            )
        if protocol == "upstream" and options.get("openings"):
            raise InvalidArgument(
                "protocol=upstream makes the seeded messages the session's history: openings cannot be delivered "
                "as turns too",
                field="options.openings",
            )
        timeline = TimelineConfig(
            day_start=day_start,
            # Upstream has no nightly consolidation; a continual run has it by default.
            consolidate_at=_time_option(options, "consolidate_at", dt.time(2, 0) if protocol == "continual" else None),
            openings=protocol == "continual" and bool(options.get("openings", True)),
            standalone_feedback=bool(options.get("standalone_feedback", True)),
            protocol=str(protocol),
        )
        seed = options.get("seed_dir")
        return MetaClawScenario(data, timeline=timeline, seed_dir=Path(seed) if seed else None)
