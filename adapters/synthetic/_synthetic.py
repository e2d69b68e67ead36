"""A synthetic benchmark for tests and load: N simulated days, each with M
timed tasks, one condition event and DAG events.

Per day ``d`` (starting at ``start`` + d days):
- ``d{d}.start``    At 09:00                 AgentControl start
- ``d{d}.task{k}``  At 09:00 + k * spacing   DeliverPrompt (k = 0..M-1)
- ``d{d}.review``   After task0 + 30 min     Notify (a DAG edge with a delay)
- ``d{d}.done``     When all M tasks of the day have a turn_end action
                                               MutateWorld day_done=d
- ``d{d}.grade``    After done               Grade
- ``d{d}.stop``     After grade + 1 min      AgentControl stop
and finally ``end`` After the last day's stop: StopRun.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters import BenchmarkInfo, Capability, GradeContext, RoundInfo, ScenarioConfig, Verdict
from sclated.errors import InvalidArgument
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
)

__all__ = ["SyntheticBenchmark", "SyntheticScenario"]

_S = 1_000_000_000
_DEFAULT_START = int(dt.datetime(2026, 1, 5, tzinfo=dt.UTC).timestamp()) * _S


def _int_option(options: Mapping[str, Any], key: str, default: int, lo: int, hi: int) -> int:
    raw = options.get(key, default)
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if not isinstance(raw, int) or isinstance(raw, bool) or not lo <= raw <= hi:
        raise InvalidArgument(
            f"synthetic option {key!r} must be an integer in [{lo}, {hi}], got {raw!r}",
            field=f"run.benchmark.options.{key}",
        )
    return raw


@dataclass(frozen=True, slots=True)
class _Options:
    days: int
    events_per_day: int
    spacing_s: int
    start_ns: int


class _DaySource:
    """Yields every event of the scenario on its first poll."""

    def __init__(self, opts: _Options) -> None:
        self._opts = opts
        self._given = False

    @property
    def name(self) -> str:
        return "synthetic"

    def poll(self, snapshot: Snapshot) -> Iterable[EventSpec]:
        if self._given:
            return ()
        self._given = True
        return list(self._events())

    def _events(self) -> Iterable[EventSpec]:
        o = self._opts
        last_stop = ""
        for d in range(o.days):
            day0 = o.start_ns + d * 86_400 * _S + 9 * 3600 * _S
            yield EventSpec(f"d{d}.start", At(day0), (AgentControl("start"),), data={"day": d})
            for k in range(o.events_per_day):
                rid = f"d{d}.task{k}"
                yield EventSpec(
                    rid,
                    At(day0 + 60 * _S + k * o.spacing_s * _S),
                    (
                        DeliverPrompt(
                            f"Day {d}, task {k}: reply with the word done.",
                            session=f"d{d}",
                            round_id=rid,
                        ),
                    ),
                    data={"day": d, "round_id": rid},
                )
            yield EventSpec(
                f"d{d}.review",
                After((f"d{d}.task0",), 30 * 60 * _S),
                (Notify(f"Reminder for day {d}: review your notes."),),
                data={"day": d},
            )
            yield EventSpec(
                f"d{d}.done",
                When(
                    _all_done(d, o.events_per_day),
                    f"all {o.events_per_day} tasks of day {d} answered",
                ),
                (MutateWorld({"day_done": d}),),
                data={"day": d},
            )
            yield EventSpec(f"d{d}.grade", After((f"d{d}.done",)), (Grade(f"d{d}"),), data={"day": d})
            yield EventSpec(
                f"d{d}.stop",
                After((f"d{d}.grade",), 60 * _S),
                (AgentControl("stop"),),
                data={"day": d},
            )
            last_stop = f"d{d}.stop"
        yield EventSpec("end", After((last_stop,), _S), (StopRun("all days done"),))


def _all_done(day: int, count: int) -> Any:
    prefix = f"d{day}.task"

    def predicate(snap: Snapshot) -> bool:
        seen = {
            a.data.get("round_id")
            for a in snap.actions
            if a.kind == "turn_end" and str(a.data.get("round_id", "")).startswith(prefix)
        }
        return len(seen) >= count

    return predicate


class SyntheticScenario:
    def __init__(self, opts: _Options) -> None:
        self._opts = opts

    @property
    def name(self) -> str:
        return f"synthetic-{self._opts.days}x{self._opts.events_per_day}"

    @property
    def start_ns(self) -> int:
        return self._opts.start_ns

    @property
    def rounds(self) -> Sequence[RoundInfo]:
        return [RoundInfo(f"d{d}", str(d), "day") for d in range(self._opts.days)]

    def sources(self) -> Sequence[EventSource]:
        return [_DaySource(self._opts)]

    @property
    def requires(self) -> Mapping[Capability, str]:
        return {}

    @property
    def world(self) -> None:
        return None

    @property
    def environment(self) -> None:
        return None

    def workspace_seed(self) -> Path | None:
        return None

    async def grade(self, effect: Grade, ctx: GradeContext) -> Verdict:
        d = effect.check_id
        answered = [ctx.reply_for(f"{d}.task{k}") for k in range(self._opts.events_per_day)]
        good = sum(1 for r in answered if r is not None and "done" in r.lower())
        return Verdict(d, good / len(answered), True, details={"answered": good})


class SyntheticBenchmark:
    @property
    def info(self) -> BenchmarkInfo:
        return BenchmarkInfo(
            name="synthetic",
            description="N simulated days of M timed tasks plus condition and DAG events (tests and load)",
            data_format="none (options: days, events_per_day, spacing_s)",
            builtin_scenarios=("default",),
        )

    def load(self, config: ScenarioConfig) -> SyntheticScenario:
        if config.data_dir is not None:
            raise InvalidArgument("the synthetic benchmark takes no data_dir", field="run.benchmark.data_dir")
        o = config.options
        return SyntheticScenario(
            _Options(
                days=_int_option(o, "days", 3, 1, 3650),
                events_per_day=_int_option(o, "events_per_day", 4, 1, 1000),
                spacing_s=_int_option(o, "spacing_s", 3600, 1, 86_400),
                start_ns=_DEFAULT_START,
            )
        )
