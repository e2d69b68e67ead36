"""MetaClaw-Bench on simulated time.

Each upstream day becomes one simulated day on the date of its seeded session
transcript (weekdays, Mon 2026-03-16 onwards in the small subset)::

    <date> 09:00            metaclaw:<day>:start          AgentControl(start), workspace hint
    +offset of transcript   metaclaw:<day>:opening<k>     the transcript's seeded user message(s)
    turn end of previous    metaclaw:<day>:<r>:prompt     the round ([Previous Feedback] prefixed)
    turn end of <r>         metaclaw:<day>:<r>:grade      Grade(check_id=<day>/<r>)
    grade of last round     metaclaw:<day>:feedback       standalone feedback (as upstream)
    turn end of feedback    metaclaw:<day>:stop           AgentControl(stop)
    next night 02:00        metaclaw:<day>:consolidate    AgentControl(consolidate, memory)
    ...                     metaclaw:end                  StopRun after the last day's stop

A round's prompt is only known once the previous round is graded (upstream
feedback depends on the outcome), so the source emits each prompt when the
previous grade appears in the snapshot; its ``When`` condition (previous turn
ended and graded) then already holds. A day's start is emitted when the
previous day has stopped, at its planned time or now if that has passed, so a
slow day delays the next one instead of overlapping it.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters import Capability, GradeContext, RoundInfo, Verdict
from adapters.metaclaw._data import MetaClawData, MetaClawDay, MetaClawRound, is_day_dir
from adapters.metaclaw._scoring import (
    extract_bbox,
    file_check_feedback,
    multi_choice_feedback,
    multi_choice_metrics,
    multi_choice_score,
    normalize_answer,
    standalone_feedback,
    with_feedback,
)
from sclated.errors import NotFound
from sclated.scheduler import (
    AgentControl,
    At,
    DeliverPrompt,
    EventSource,
    EventSpec,
    Grade,
    Snapshot,
    StopRun,
    When,
)

__all__ = ["MetaClawScenario", "MetaClawSource", "TimelineConfig", "turn_ended"]

_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class TimelineConfig:
    day_start: dt.time = dt.time(9, 0)
    """When each day's session starts (UTC, on the transcript's date)."""
    consolidate_at: dt.time | None = dt.time(2, 0)
    """Nightly memory consolidation between days (UTC, the night after); None: none."""
    openings: bool = True
    """Deliver the transcript's seeded user messages before the first round."""
    standalone_feedback: bool = True
    """After the last round, send its feedback on its own (upstream does)."""
    protocol: str = "continual"
    """``continual``: one workspace kept across days, each day's folder added the morning
    it starts, the transcript's seeded messages delivered as live turns (any agent).
    ``upstream``: as upstream's ``infer_cmd.py`` runs OpenClaw: each day's seeded
    transcript is its session's history (no model call), and each day starts from a
    fresh workspace (persona files, that day's folder, ``scripts/``), keeping only the
    harness's own memory files (it needs ``Capability.SEEDED_SESSIONS``)."""


def turn_ended(snap: Snapshot, round_id: str) -> bool:
    """Whether the run recorded the end of the agent's turn for ``round_id``."""
    for action in reversed(snap.actions):
        if action.kind == "turn_end" and action.actor == "agent" and action.data.get("round_id") == round_id:
            return True
    return False


def _grade_details(outcome: Any) -> Mapping[str, Any] | None:
    """The feedback-relevant part of a grade outcome, whatever shape the run stored.

    The run applies grade outcomes as inputs; it may store the :class:`Verdict`
    itself or a JSON form of it. An ungraded verdict gives no feedback.
    """
    if isinstance(outcome, Verdict):
        return outcome.details if outcome.graded else None
    if isinstance(outcome, Mapping):
        if outcome.get("graded") is False:
            return None
        details = outcome.get("details")
        if isinstance(details, Mapping):
            return details
        return outcome
    return None


def _feedback_for(rnd: MetaClawRound, outcome: Any) -> str:
    details = _grade_details(outcome)
    if details is None:
        return ""
    if rnd.kind == "multi_choice":
        selected = details.get("selected") or []
        return multi_choice_feedback(
            selected,
            normalize_answer(rnd.eval.get("answer", "")),
            rnd.feedback,
            format_valid=bool(details.get("format_valid", True)),
        )
    return file_check_feedback(bool(details.get("passed", False)), rnd.feedback)


def _at(date: dt.date, when: dt.time) -> int:
    moment = dt.datetime.combine(date, when, tzinfo=dt.UTC)
    return int(moment.timestamp()) * _NS + moment.microsecond * 1000


class MetaClawSource:
    """The benchmark's progression: one chain of events per day, emitted as it unfolds."""

    def __init__(
        self,
        days: Sequence[MetaClawDay],
        config: TimelineConfig,
        *,
        name: str = "metaclaw",
        day_data: Callable[[MetaClawDay], Mapping[str, Any]] | None = None,
    ) -> None:
        self._name = name
        self._days = tuple(days)
        self._cfg = config
        self._day_data = day_data
        self._emitted: set[str] = set()

    @property
    def name(self) -> str:
        return self._name

    def _eid(self, day: MetaClawDay, step: str) -> str:
        return f"{self._name}:{day.day}:{step}"

    def start_ns(self, day: MetaClawDay) -> int:
        return _at(day.date, self._cfg.day_start)

    def _emit(self, out: list[EventSpec], spec: EventSpec) -> None:
        if spec.id not in self._emitted:
            self._emitted.add(spec.id)
            out.append(spec)

    def poll(self, snapshot: Snapshot) -> Iterable[EventSpec]:
        out: list[EventSpec] = []
        for index, day in enumerate(self._days):
            start_id = self._eid(day, "start")
            if index == 0:
                self._emit(out, self._start_event(day, self.start_ns(day)))
            elif start_id not in self._emitted:
                prev = self._days[index - 1]
                if snapshot.fired_at(self._eid(prev, "stop")) is None:
                    break
                if self._cfg.consolidate_at is not None:
                    night = _at(prev.date + dt.timedelta(days=1), self._cfg.consolidate_at)
                    self._emit(
                        out,
                        EventSpec(
                            self._eid(prev, "consolidate"),
                            At(max(night, snapshot.now_ns)),
                            (AgentControl("consolidate", target="memory"),),
                            data={"day": prev.day, "phase": "night"},
                        ),
                    )
                self._emit(out, self._start_event(day, max(self.start_ns(day), snapshot.now_ns)))
            if snapshot.fired_at(start_id) is None:
                break
            self._day_events(day, snapshot, out)
        last = self._days[-1] if self._days else None
        if last is not None and snapshot.fired_at(self._eid(last, "stop")) is not None:
            self._emit(
                out,
                EventSpec(
                    f"{self._name}:end",
                    At(snapshot.now_ns),
                    (StopRun(reason="MetaClaw-Bench scenario complete"),),
                    data={"phase": "end"},
                ),
            )
        return out

    def _start_event(self, day: MetaClawDay, at_ns: int) -> EventSpec:
        data: dict[str, Any] = {
            "day": day.day,
            "session": day.session,
            "date": day.date.isoformat(),
        }
        if self._day_data is not None:
            data.update(self._day_data(day))
        return EventSpec(self._eid(day, "start"), At(at_ns), (AgentControl("start"),), data=data)

    def _day_events(self, day: MetaClawDay, snap: Snapshot, out: list[EventSpec]) -> None:
        start_id = self._eid(day, "start")
        start_at = snap.fired_at(start_id)
        assert start_at is not None
        openings = day.openings if self._cfg.openings else ()
        # The turn before the first round: the last opening message, if any.
        prev_turn: str | None = None
        for k, msg in enumerate(openings, start=1):
            rid = f"{day.day}/opening{k}"
            trigger: At | When
            if prev_turn is None:
                trigger = At(start_at + int(msg.offset_s * _NS))
            else:
                trigger = When(_ended(prev_turn), f"turn {prev_turn} ended")
            self._emit(
                out,
                EventSpec(
                    self._eid(day, f"opening{k}"),
                    trigger,
                    (DeliverPrompt(msg.text, session=day.session, round_id=rid),),
                    data={"day": day.day, "phase": "opening"},
                ),
            )
            prev_turn = rid
        prev_round: MetaClawRound | None = None
        for rnd in day.rounds:
            # Grades can wait on their turn end from the start of the day.
            self._emit(
                out,
                EventSpec(
                    self._eid(day, f"{rnd.upstream_id}:grade"),
                    When(_ended(rnd.round_id), f"turn {rnd.round_id} ended"),
                    (Grade(rnd.round_id, spec=_grade_spec(rnd)),),
                    data={"day": day.day, "round_id": rnd.round_id, "phase": "grade"},
                ),
            )
            text = rnd.question
            if prev_round is None:
                if prev_turn is None:
                    cond = When(_session_ready(start_id), f"{start_id} fired and the agent's session started")
                else:
                    cond = When(_ended(prev_turn), f"turn {prev_turn} ended")
            else:
                if prev_round.round_id not in snap.grades:
                    return
                fb = _feedback_for(prev_round, snap.grades[prev_round.round_id])
                if fb:
                    text = with_feedback(fb, rnd.question)
                cond = When(
                    _ended_and_graded(prev_round.round_id),
                    f"turn {prev_round.round_id} ended and graded",
                )
            self._emit(
                out,
                EventSpec(
                    self._eid(day, f"{rnd.upstream_id}:prompt"),
                    cond,
                    (DeliverPrompt(text, session=day.session, round_id=rnd.round_id),),
                    data={
                        "day": day.day,
                        "round_id": rnd.round_id,
                        "phase": "round",
                        "kind": rnd.kind,
                    },
                ),
            )
            prev_round = rnd
        if prev_round is None:
            stop_cond = (
                When(_ended(prev_turn), f"turn {prev_turn} ended")
                if prev_turn
                else When(_started(start_id), f"{start_id} fired")
            )
        else:
            if prev_round.round_id not in snap.grades:
                return
            fb = _feedback_for(prev_round, snap.grades[prev_round.round_id])
            if fb and self._cfg.standalone_feedback:
                rid = f"{day.day}/feedback"
                self._emit(
                    out,
                    EventSpec(
                        self._eid(day, "feedback"),
                        When(
                            _ended_and_graded(prev_round.round_id),
                            f"turn {prev_round.round_id} graded",
                        ),
                        (DeliverPrompt(standalone_feedback(fb), session=day.session, round_id=rid),),
                        data={"day": day.day, "phase": "feedback"},
                    ),
                )
                stop_cond = When(_ended(rid), f"turn {rid} ended")
            else:
                stop_cond = When(_ended_and_graded(prev_round.round_id), f"turn {prev_round.round_id} graded")
        self._emit(
            out,
            EventSpec(
                self._eid(day, "stop"),
                stop_cond,
                (AgentControl("stop"),),
                data={"day": day.day, "phase": "stop"},
            ),
        )


def _ended(round_id: str) -> Callable[[Snapshot], bool]:
    return lambda snap: turn_ended(snap, round_id)


def _ended_and_graded(round_id: str) -> Callable[[Snapshot], bool]:
    return lambda snap: round_id in snap.grades and turn_ended(snap, round_id)


def _started(event_id: str) -> Callable[[Snapshot], bool]:
    return lambda snap: snap.fired_at(event_id) is not None


def _session_ready(start_id: str) -> Callable[[Snapshot], bool]:
    """The day's start fired and the agent said its session is ready (the run records
    ``session_started`` once a start control is done: a seeded session can take the
    harness tens of seconds, and a prompt fired before would wait for it)."""

    def ready(snap: Snapshot) -> bool:
        return snap.fired_at(start_id) is not None and any(
            a.kind == "session_started" and a.actor == "agent" and a.data.get("event_id") == start_id
            for a in snap.actions
        )

    return ready


def _grade_spec(rnd: MetaClawRound) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": rnd.kind, "day": rnd.day, "round": rnd.upstream_id}
    if rnd.kind == "file_check":
        spec["command"] = rnd.eval.get("command", "")
        spec["expect_exit"] = rnd.eval.get("expect_exit", 0)
    else:
        spec["answer"] = sorted(normalize_answer(rnd.eval.get("answer", "")))
        spec["n_options"] = len(rnd.eval.get("options", {}) or {})
    if not rnd.gradable:
        spec["ungradable"] = rnd.why_ungradable
    return spec


class MetaClawScenario:
    """A loaded MetaClaw-Bench scenario (implements :class:`adapters.Scenario`)."""

    def __init__(
        self,
        data: MetaClawData,
        *,
        timeline: TimelineConfig | None = None,
        seed_dir: Path | None = None,
        workspace_dest: str = "/workspace",
    ) -> None:
        if not data.days:
            raise NotFound(f"MetaClaw scenario {data.name!r} has no days selected")
        self.data = data
        self.timeline = timeline or TimelineConfig()
        self._seed_dir = seed_dir
        self._materialized: Path | None = None
        self._workspace_dest = workspace_dest
        self._rounds = {r.round_id: r for d in data.days for r in d.rounds}
        self._source: MetaClawSource | None = None

    # -- Scenario protocol -----------------------------------------------------
    @property
    def name(self) -> str:
        return self.data.name

    @property
    def days(self) -> tuple[MetaClawDay, ...]:
        return self.data.days

    @property
    def start_ns(self) -> int:
        return _at(self.data.days[0].date, self.timeline.day_start)

    @property
    def rounds(self) -> Sequence[RoundInfo]:
        return [
            RoundInfo(r.round_id, r.day, r.kind, gradable=r.gradable, why_ungradable=r.why_ungradable)
            for d in self.data.days
            for r in d.rounds
        ]

    def round(self, round_id: str) -> MetaClawRound:
        try:
            return self._rounds[round_id]
        except KeyError:
            raise NotFound(f"MetaClaw scenario {self.name!r} has no round {round_id!r}") from None

    def sources(self) -> Sequence[EventSource]:
        # One source per scenario object: it remembers what it has emitted.
        if self._source is None:
            self._materialize()
            self._source = MetaClawSource(self.data.days, self.timeline, day_data=self._day_hint)
        return [self._source]

    @property
    def requires(self) -> Mapping[Capability, str]:
        needs = {Capability.WORKSPACE: "each day's files are put in the workspace and file_check rounds run there"}
        if self.timeline.protocol == "upstream":
            needs[Capability.SEEDED_SESSIONS] = "protocol=upstream makes each day's seeded transcript its history"
        return needs

    @property
    def world(self) -> None:
        return None

    @property
    def environment(self) -> None:
        return None

    def workspace_seed(self) -> Path | None:
        """Persona files (and checker scripts when present): the workspace root before day one."""
        return self._materialize() / "common"

    def day_workspace(self, day: str) -> Path | None:
        """A folder to copy into the workspace before ``day`` starts: ``<day>/`` (continual),
        or the whole fresh workspace of that day (upstream)."""
        sub = "upstream" if self.timeline.protocol == "upstream" else "days"
        root = self._materialize() / sub / day
        return root if root.is_dir() else None

    async def grade(self, effect: Grade, ctx: GradeContext) -> Verdict:
        rnd = self.round(effect.check_id)
        if not rnd.gradable:
            return Verdict(rnd.round_id, None, False, reason=rnd.why_ungradable)
        if rnd.kind == "file_check":
            return await self._grade_file_check(rnd, ctx)
        if rnd.kind == "multi_choice":
            return self._grade_multi_choice(rnd, ctx.reply_for(rnd.round_id))
        return Verdict(rnd.round_id, None, False, reason=f"unknown round type {rnd.kind!r}")

    # -- grading ----------------------------------------------------------------
    async def _grade_file_check(self, rnd: MetaClawRound, ctx: GradeContext) -> Verdict:
        command = str(rnd.eval.get("command", ""))
        if not command:
            return Verdict(rnd.round_id, None, False, reason="file_check round without a command")
        expect_exit = int(rnd.eval.get("expect_exit", 0))
        timeout = float(rnd.eval.get("timeout", 30))
        code, output = await ctx.exec_in_workspace(command, timeout_s=timeout)
        passed = code == expect_exit
        expect_stdout = rnd.eval.get("expect_stdout")
        if passed and expect_stdout is not None:
            # Upstream's optional stdout check; the context returns combined output.
            pattern = str(expect_stdout)
            passed = bool(re.search(pattern, output)) if rnd.eval.get("expect_stdout_regex") else pattern in output
        return Verdict(
            rnd.round_id,
            1.0 if passed else 0.0,
            True,
            reason=f"exit {code}, expected {expect_exit}",
            details={
                "passed": passed,
                "exit_code": code,
                "output": output[-4000:],
                "command": command,
            },
        )

    def _grade_multi_choice(self, rnd: MetaClawRound, reply: str | None) -> Verdict:
        correct = normalize_answer(rnd.eval.get("answer", ""))
        n_options = len(rnd.eval.get("options", {}) or {})
        selected = extract_bbox(reply)
        score = multi_choice_score(selected, correct, n_options)
        reason = "no \\bbox{} answer" if selected is None else f"selected {','.join(sorted(selected))}"
        return Verdict(
            rnd.round_id,
            score,
            True,
            reason=reason,
            details={
                "selected": sorted(selected) if selected is not None else None,
                "format_valid": selected is not None,
                "correct": sorted(correct),
                "n_options": n_options,
                "passed": selected is not None and bool(correct) and set(selected) == set(correct),
                "metrics": multi_choice_metrics(selected, correct),
                "replied": reply is not None,
            },
        )

    # -- workspace ------------------------------------------------------------------
    def _day_hint(self, day: MetaClawDay) -> Mapping[str, Any]:
        seed = self.day_workspace(day.day)
        hint: dict[str, Any] = {"workspace_dest": self._workspace_dest}
        if seed is not None:
            hint["workspace_seed"] = str(seed)
        if self.timeline.protocol == "upstream":
            hint["workspace_fresh"] = True
            hint["session_seed"] = {
                "session_id": day.session,
                "agent": day.agent,
                "transcript": str(day.transcript) if day.transcript is not None else "",
                "harness_config": str(self.data.harness_config) if self.data.harness_config else "",
            }
        return hint

    def _materialize(self) -> Path:
        """Lay the seeds out once: ``common/`` and ``days/<day>/<day>/``.

        Upstream gives each day a fresh workspace holding the persona files,
        that day's folder only, and eval/scripts/ as scripts/. A continual run
        keeps one workspace, so the persona files and scripts are seeded once
        and each day's folder is added the morning it starts.
        """
        if self._materialized is not None:
            return self._materialized
        root = self._seed_dir
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="sclate-metaclaw-"))
            # Ours alone: removed with the scenario (the run is over) or at exit,
            # as tempfile.TemporaryDirectory does.
            self._cleanup = weakref.finalize(self, shutil.rmtree, root, ignore_errors=True)
        common = root / "common"
        common.mkdir(parents=True, exist_ok=True)
        src = self.data.workspace_src
        if src.is_dir():
            for item in sorted(src.iterdir()):
                if is_day_dir(item):
                    continue
                if item.is_dir():
                    shutil.copytree(item, common / item.name, dirs_exist_ok=True)
                else:
                    shutil.copy2(item, common / item.name)
        if self.data.scripts_dir is not None:
            shutil.copytree(self.data.scripts_dir, common / "scripts", dirs_exist_ok=True)
        for day in self.data.days:
            if day.workspace_dir is not None:
                shutil.copytree(day.workspace_dir, root / "days" / day.day / day.day, dirs_exist_ok=True)
            if self.timeline.protocol == "upstream":
                # Upstream's _copy_workspace_for_test: persona files, scripts/, this day only.
                fresh = root / "upstream" / day.day
                shutil.copytree(common, fresh, dirs_exist_ok=True)
                if day.workspace_dir is not None:
                    shutil.copytree(day.workspace_dir, fresh / day.day, dirs_exist_ok=True)
        self._materialized = root
        return root
