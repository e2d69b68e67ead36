"""LongMemEval-s on simulated time: one question, its haystack as dated sessions.

Mapping (one scenario = one upstream item, since every item has its own
history and the agent's memory must start empty for it):

* each haystack session starts at its ``haystack_dates`` entry (UTC, upstream
  format ``2023/05/20 (Sat) 02:21``), or as soon as the previous session has
  stopped if that is later;
* its user turns are delivered in order, each after the agent's previous turn
  ended; the agent answers them itself. The haystack's assistant turns are not
  the agent's words, so by default they are not delivered
  (``assistant_turns="drop"``); with ``assistant_turns="attach"`` each user turn
  carries the recorded assistant reply that followed it, which is what
  single-session-assistant questions ask about;
* the agent is stopped after each session and started before the next; when a
  night (02:00 UTC) falls between two sessions on different dates, the memory
  system is told to consolidate;
* the question is asked in a final session at ``question_date`` and graded by
  the upstream judge prompt (``ctx.judge``), with exact/contains matches
  reported beside the judge's label.

Event ids (``<q>`` is the question id)::

    lme:<q>:s<i>:start         At(session date)          AgentControl(start)
    lme:<q>:s<i>:t<j>          After(start) / When(previous turn ended)  DeliverPrompt
    lme:<q>:s<i>:stop          When(last turn ended)     AgentControl(stop)
    lme:<q>:s<i>:consolidate   At(02:00 after the session)  AgentControl(consolidate, memory)
    lme:<q>:question:start     At(question_date)         AgentControl(start)
    lme:<q>:question:ask       After(start)              DeliverPrompt(question, round_id=<q>)
    lme:<q>:question:grade     When(turn ended)          Grade(check_id=<q>)
    lme:<q>:question:stop      When(graded)              AgentControl(stop)
    lme:<q>:end                After(stop)               StopRun
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from adapters import Capability, GradeContext, RoundInfo, Verdict
from adapters._data_files import typed
from adapters.longmemeval._judge import anscheck_prompt, contains_match, exact_match, judge_label
from sclated.errors import InvalidArgument, NotFound
from sclated.scheduler import (
    After,
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

__all__ = [
    "DATE_FORMAT",
    "HaystackSession",
    "LongMemEvalItem",
    "LongMemEvalScenario",
    "LongMemEvalSource",
    "parse_date",
]

DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"
_NS = 1_000_000_000
AssistantTurns = Literal["drop", "attach"]
_RECORDED = "[Recorded assistant reply in the original conversation]"


def parse_date(raw: str, where: str = "LongMemEval date") -> dt.datetime:
    """Upstream dates (``2023/05/20 (Sat) 02:21``) are UTC wall times; ``where`` names the
    file and field in the error."""
    try:
        return dt.datetime.strptime(raw.strip(), DATE_FORMAT).replace(tzinfo=dt.UTC)
    except ValueError:
        raise InvalidArgument(
            f"{where} {raw[:80]!r} is not in the upstream format like '2023/05/20 (Sat) 02:21'"
        ) from None


def _ns(moment: dt.datetime) -> int:
    return int(moment.timestamp()) * _NS + moment.microsecond * 1000


@dataclass(frozen=True, slots=True)
class HaystackSession:
    index: int
    session_id: str
    date: dt.datetime
    turns: tuple[str, ...]
    """The messages delivered, one per upstream user turn."""
    has_answer: bool


@dataclass(frozen=True, slots=True)
class LongMemEvalItem:
    question_id: str
    question_type: str
    question: str
    answer: Any
    question_date: dt.datetime
    sessions: tuple[HaystackSession, ...]
    answer_session_ids: tuple[str, ...]

    @property
    def abstention(self) -> bool:
        return "_abs" in self.question_id

    @classmethod
    def from_upstream(
        cls, raw: Mapping[str, Any], *, assistant_turns: AssistantTurns = "drop", where: str = "LongMemEval item"
    ) -> LongMemEvalItem:
        """An upstream item; ``where`` (its file and place in it) starts every error, which
        names the field too."""
        missing = [
            k
            for k in (
                "question_id",
                "question_type",
                "question",
                "answer",
                "question_date",
                "haystack_session_ids",
                "haystack_dates",
                "haystack_sessions",
            )
            if k not in raw
        ]
        if missing:
            raise InvalidArgument(f"{where}: lacks fields {missing}", field=missing[0])
        typed(raw, "question_id", (str, int), where)
        typed(raw, "question_type", str, where)
        typed(raw, "question", str, where)
        typed(raw, "question_date", str, where)
        typed(raw, "answer_session_ids", list, where, required=False)
        ids, dates, bodies = (
            typed(raw, "haystack_session_ids", list, where),
            typed(raw, "haystack_dates", list, where),
            typed(raw, "haystack_sessions", list, where),
        )
        if not len(ids) == len(dates) == len(bodies):
            raise InvalidArgument(
                f"{where}: haystack_session_ids, haystack_dates and haystack_sessions differ in length "
                f"({len(ids)}, {len(dates)}, {len(bodies)})",
                field="haystack_sessions",
            )
        sessions: list[HaystackSession] = []
        for index, (sid, date, body) in enumerate(zip(ids, dates, bodies, strict=True)):
            at = f"{where}, haystack_sessions[{index}]"
            if not isinstance(body, list) or not all(isinstance(t, Mapping) for t in body):
                raise InvalidArgument(
                    f"{at} must be a list of turns (objects with role and content)", field="haystack_sessions"
                )
            if not isinstance(date, str):
                raise InvalidArgument(f"{where}, haystack_dates[{index}] must be a string", field="haystack_dates")
            if not isinstance(sid, str | int):
                raise InvalidArgument(
                    f"{where}, haystack_session_ids[{index}] must be a string", field="haystack_session_ids"
                )
            turns = _turns(body, assistant_turns)
            if not turns:
                continue  # nothing the user said: nothing to deliver
            sessions.append(
                HaystackSession(
                    index=index,
                    session_id=str(sid),
                    date=parse_date(date, f"{where}, haystack_dates[{index}]"),
                    turns=turns,
                    has_answer=any(bool(t.get("has_answer")) for t in body),
                )
            )
        # Simulated time never goes back: sessions run in date order (upstream's
        # _s and _m files are already sorted; the sort is stable for ties).
        sessions.sort(key=lambda s: s.date)
        return cls(
            question_id=str(raw["question_id"]),
            question_type=str(raw["question_type"]),
            question=str(raw["question"]),
            answer=raw["answer"],
            question_date=parse_date(str(raw["question_date"]), f"{where}, question_date"),
            sessions=tuple(sessions),
            answer_session_ids=tuple(str(s) for s in raw.get("answer_session_ids") or ()),
        )


def _turns(body: Sequence[Mapping[str, Any]], assistant_turns: AssistantTurns) -> tuple[str, ...]:
    out: list[str] = []
    pending_prefix: list[str] = []
    for turn in body:
        role, content = turn.get("role"), str(turn.get("content", ""))
        if role == "user":
            text = content
            if pending_prefix:
                text = "\n\n".join([*pending_prefix, text])
                pending_prefix = []
            out.append(text)
        elif role == "assistant" and assistant_turns == "attach":
            note = f"{_RECORDED}\n{content}"
            if out:
                out[-1] = f"{out[-1]}\n\n{note}"
            else:
                pending_prefix.append(note)
    return tuple(out)


def _turn_ended(snap: Snapshot, round_id: str) -> bool:
    for action in reversed(snap.actions):
        if action.kind == "turn_end" and action.actor == "agent" and action.data.get("round_id") == round_id:
            return True
    return False


def _ended(round_id: str) -> Callable[[Snapshot], bool]:
    return lambda snap: _turn_ended(snap, round_id)


def _graded(check_id: str) -> Callable[[Snapshot], bool]:
    return lambda snap: check_id in snap.grades


class LongMemEvalSource:
    def __init__(self, item: LongMemEvalItem, *, consolidate_at: dt.time | None = dt.time(2, 0)) -> None:
        self._item = item
        self._consolidate_at = consolidate_at
        self._name = f"longmemeval:{item.question_id}"
        self._emitted: set[str] = set()

    @property
    def name(self) -> str:
        return self._name

    def _eid(self, *parts: str) -> str:
        return ":".join(("lme", self._item.question_id, *parts))

    def _emit(self, out: list[EventSpec], spec: EventSpec) -> None:
        if spec.id not in self._emitted:
            self._emitted.add(spec.id)
            out.append(spec)

    def poll(self, snapshot: Snapshot) -> Iterable[EventSpec]:
        out: list[EventSpec] = []
        item = self._item
        prev_stop: str | None = None
        prev_date: dt.datetime | None = None
        prev_tag = ""
        for sess in item.sessions:
            tag = f"s{sess.index}"
            start_id = self._eid(tag, "start")
            if prev_stop is not None and snapshot.fired_at(prev_stop) is None:
                return out
            if prev_stop is not None and prev_date is not None:
                self._maybe_consolidate(out, snapshot, prev_date, sess.date, prev_tag)
            self._emit(
                out,
                EventSpec(
                    start_id,
                    At(max(_ns(sess.date), snapshot.now_ns)),
                    (AgentControl("start"),),
                    data={
                        "session": sess.session_id,
                        "date": sess.date.strftime(DATE_FORMAT),
                        "phase": "start",
                    },
                ),
            )
            if snapshot.fired_at(start_id) is None:
                return out
            prev_round: str | None = None
            for j, text in enumerate(sess.turns):
                rid = f"{item.question_id}/{tag}/t{j}"
                trigger: After | When = (
                    After((start_id,)) if prev_round is None else When(_ended(prev_round), f"turn {prev_round} ended")
                )
                self._emit(
                    out,
                    EventSpec(
                        self._eid(tag, f"t{j}"),
                        trigger,
                        (DeliverPrompt(text, session=sess.session_id, round_id=rid),),
                        data={"session": sess.session_id, "round_id": rid, "phase": "haystack"},
                    ),
                )
                prev_round = rid
            assert prev_round is not None
            stop_id = self._eid(tag, "stop")
            self._emit(
                out,
                EventSpec(
                    stop_id,
                    When(_ended(prev_round), f"turn {prev_round} ended"),
                    (AgentControl("stop"),),
                    data={"session": sess.session_id, "phase": "stop"},
                ),
            )
            prev_stop, prev_date, prev_tag = stop_id, sess.date, tag
        if prev_stop is not None and snapshot.fired_at(prev_stop) is None:
            return out
        if prev_stop is not None and prev_date is not None:
            self._maybe_consolidate(out, snapshot, prev_date, item.question_date, prev_tag)
        self._question_events(out, snapshot)
        return out

    def _maybe_consolidate(
        self,
        out: list[EventSpec],
        snap: Snapshot,
        after: dt.datetime,
        before: dt.datetime,
        tag: str,
    ) -> None:
        if self._consolidate_at is None or after.date() == before.date():
            return
        night = dt.datetime.combine(after.date() + dt.timedelta(days=1), self._consolidate_at, tzinfo=dt.UTC)
        if night >= before:
            return
        self._emit(
            out,
            EventSpec(
                self._eid(tag, "consolidate"),
                At(max(_ns(night), snap.now_ns)),
                (AgentControl("consolidate", target="memory"),),
                data={"phase": "night"},
            ),
        )

    def _question_events(self, out: list[EventSpec], snap: Snapshot) -> None:
        item = self._item
        qsession = f"{item.question_id}:question"
        start_id, ask_id = self._eid("question", "start"), self._eid("question", "ask")
        grade_id, stop_id = self._eid("question", "grade"), self._eid("question", "stop")
        qid = item.question_id
        specs = (
            EventSpec(
                start_id,
                At(max(_ns(item.question_date), snap.now_ns)),
                (AgentControl("start"),),
                data={
                    "session": qsession,
                    "date": item.question_date.strftime(DATE_FORMAT),
                    "phase": "start",
                },
            ),
            EventSpec(
                ask_id,
                After((start_id,)),
                (DeliverPrompt(item.question, session=qsession, round_id=qid),),
                data={"session": qsession, "round_id": qid, "phase": "question"},
            ),
            EventSpec(
                grade_id,
                When(_ended(qid), f"turn {qid} ended"),
                (
                    Grade(
                        qid,
                        spec={"question_type": item.question_type, "abstention": item.abstention},
                    ),
                ),
                data={"round_id": qid, "phase": "grade"},
            ),
            EventSpec(
                stop_id,
                When(_graded(qid), f"{qid} graded"),
                (AgentControl("stop"),),
                data={"phase": "stop"},
            ),
            EventSpec(
                self._eid("end"),
                After((stop_id,)),
                (StopRun(reason="LongMemEval question answered and graded"),),
                data={"phase": "end"},
            ),
        )
        for spec in specs:
            self._emit(out, spec)


class LongMemEvalScenario:
    """One LongMemEval item (implements :class:`adapters.Scenario`)."""

    def __init__(self, item: LongMemEvalItem, *, consolidate_at: dt.time | None = dt.time(2, 0)) -> None:
        self.item = item
        self._consolidate_at = consolidate_at
        self._source: LongMemEvalSource | None = None

    @property
    def name(self) -> str:
        return f"longmemeval:{self.item.question_id}"

    @property
    def start_ns(self) -> int:
        first = self.item.sessions[0].date if self.item.sessions else self.item.question_date
        return _ns(first)

    @property
    def rounds(self) -> Sequence[RoundInfo]:
        day = self.item.question_date.date().isoformat()
        return [RoundInfo(self.item.question_id, day, self.item.question_type)]

    def sources(self) -> Sequence[EventSource]:
        if self._source is None:
            self._source = LongMemEvalSource(self.item, consolidate_at=self._consolidate_at)
        return [self._source]

    @property
    def requires(self) -> Mapping[Capability, str]:
        if self._consolidate_at is None:
            return {}
        return {Capability.CONSOLIDATE: "the memory system is told to consolidate after each simulated day"}

    @property
    def world(self) -> None:
        return None

    @property
    def environment(self) -> None:
        return None

    def workspace_seed(self) -> None:
        return None

    async def grade(self, effect: Grade, ctx: GradeContext) -> Verdict:
        item = self.item
        if effect.check_id != item.question_id:
            raise NotFound(f"LongMemEval scenario {self.name!r} has no check {effect.check_id!r}")
        reply = ctx.reply_for(item.question_id)
        if reply is None:
            return Verdict(item.question_id, 0.0, True, reason="the agent gave no answer")
        prompt = anscheck_prompt(item.question_type, item.question, item.answer, reply, item.abstention)
        judged = await ctx.judge(prompt)
        label = judge_label(judged.text)
        return Verdict(
            item.question_id,
            1.0 if label else 0.0,
            True,
            reason=f"judge said {judged.text.strip()[:40]!r}",
            details={
                "judge": "yes" if label else "no",
                "judge_reply": judged.text,
                **judged.details(),
                "judge_prompt": prompt,
                "exact_match": exact_match(item.answer, reply),
                "contains_answer": contains_match(item.answer, reply),
                "question_type": item.question_type,
                "abstention": item.abstention,
            },
        )
