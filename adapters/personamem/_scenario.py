"""PersonaMem on simulated time: one persona's shared context as daily sessions, its
questions asked where upstream cuts the history.

Mapping (one scenario = one shared context and the questions that point at it; our
choice, since the release has no dates, see docs/personamem-notes.md §5):

* block *k* (the *k*-th ``system`` message starts it; messages before the first one,
  if any, are block 0) is one session on simulated day ``D0 + k`` at 09:00 UTC
  (``D0`` = 2026-01-05 unless ``start_date`` says otherwise), or as soon as the
  previous session stopped if that is later;
* the block's ``system`` persona message opens the session: it is put in front of
  the session's first message as upstream folds a system message into the next one
  (``convert_role_system_to_user``: ``"[System]: <persona>\\n" + message``);
* every ``user`` message is one user turn, delivered after the agent's previous
  turn ended; the agent answers it itself. The recorded ``assistant`` messages are
  not the agent's words: dropped by default (``assistant_turns="drop"``); with
  ``"attach"`` each is appended to the turn before it, marked as the recorded reply
  (a recorded reply past a question's cut goes with the next turn instead, so a
  question never sees a message beyond its ``end_index``);
* a question with ``end_index_in_shared_context = e`` is asked right after the turn
  that delivered message ``e - 1`` (the same session and day), as upstream's user
  message: the question, upstream's instruction and the raw ``all_options`` text.
  It is graded by upstream's ``extract_answer`` rule. The agent's answer stays in its
  history: a continual run cannot take a question back (upstream probes each
  question against a fresh copy of the history);
* the agent is stopped after each session; at 02:00 UTC between two days the memory
  system is told to consolidate (``consolidate_at``, None: never).

Event ids (``<c>`` is the context id's first 8 characters)::

    pm:<c>:b<k>:start        At(day k, 09:00)                  AgentControl(start)
    pm:<c>:b<k>:t<n>         When(session ready / previous turn ended)  DeliverPrompt
    pm:<c>:q:<qid>           When(previous turn ended)         DeliverPrompt(round_id=<qid>)
    pm:<c>:q:<qid>:grade     When(its turn ended)              Grade(check_id=<qid>)
    pm:<c>:b<k>:stop         When(last turn ended)             AgentControl(stop)
    pm:<c>:b<k>:consolidate  At(02:00 the next day)            AgentControl(consolidate, memory)
    pm:<c>:end               When(every question graded)       StopRun

Each step is proposed once the one before it has fired, so only a handful of
conditions are pending at any time, whatever the context's length.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from adapters import Capability, GradeContext, RoundInfo, Verdict
from adapters.personamem._data import ContextMessage, PersonaMemQuestion
from adapters.personamem._scoring import check_answer, question_prompt
from sclated.errors import NotFound
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
    "DEFAULT_START",
    "SESSION_TIME",
    "Ask",
    "Block",
    "PersonaMemScenario",
    "PersonaMemSource",
    "Turn",
    "accuracy",
    "plan_blocks",
]

AssistantTurns = Literal["drop", "attach"]
DEFAULT_START = dt.date(2026, 1, 5)
SESSION_TIME = dt.time(9, 0)
_NS = 1_000_000_000
_RECORDED = "[Recorded assistant reply in the original conversation]"


def _ns(moment: dt.datetime) -> int:
    return int(moment.timestamp()) * _NS + moment.microsecond * 1000


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn: what the agent is sent, and which context messages it carries."""

    round_id: str
    text: str
    messages: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Ask:
    """A question, asked once the history up to its ``end_index`` has been delivered."""

    question: PersonaMemQuestion

    @property
    def round_id(self) -> str:
        return self.question.question_id

    @property
    def text(self) -> str:
        return question_prompt(self.question.question, self.question.all_options)


Step = Turn | Ask


@dataclass(frozen=True, slots=True)
class Block:
    index: int
    start: dt.datetime
    session: str
    steps: tuple[Step, ...]

    @property
    def day(self) -> str:
        return self.start.date().isoformat()


def plan_blocks(
    context_id: str,
    messages: Sequence[ContextMessage],
    questions: Sequence[PersonaMemQuestion],
    *,
    assistant_turns: AssistantTurns = "drop",
    start_date: dt.date = DEFAULT_START,
) -> tuple[Block, ...]:
    """The context's blocks as sessions of turns, with each question at its cut.

    Questions must have ``1 <= end_index <= len(messages)`` (the loader checks).
    """
    short = context_id[:8]
    cuts: dict[int, list[PersonaMemQuestion]] = defaultdict(list)
    for q in questions:
        cuts[q.end_index].append(q)
    steps: dict[int, list[Step]] = defaultdict(list)
    turn_counts: dict[int, int] = defaultdict(int)
    block = -1
    prefix = ""  # the block's persona, folded into its next turn
    parts: list[str] = []
    carried: list[int] = []
    has_user = False

    def flush() -> None:
        nonlocal prefix, parts, carried, has_user
        if not prefix and not parts:
            return
        k = max(block, 0)
        text = prefix + "\n\n".join(parts) if parts else prefix.rstrip("\n")
        n = turn_counts[k]
        turn_counts[k] += 1
        steps[k].append(Turn(f"{short}/b{k:02d}/t{n}", text, tuple(carried)))
        prefix, parts, carried, has_user = "", [], [], False

    def ask(end: int) -> None:
        if end in cuts:
            flush()
            steps[max(block, 0)].extend(Ask(q) for q in cuts[end])

    for msg in messages:
        ask(msg.index)
        if msg.role == "system":
            flush()
            block += 1
            prefix += f"[System]: {msg.content}\n"
            carried.append(msg.index)
            continue
        block = max(block, 0)
        if msg.role == "user":
            if has_user:
                flush()
            parts.append(msg.content)
            carried.append(msg.index)
            has_user = True
        elif assistant_turns == "attach":
            parts.append(f"{_RECORDED}\n{msg.content}")
            carried.append(msg.index)
    ask(len(messages))
    flush()
    out: list[Block] = []
    for k in sorted(steps):
        start = dt.datetime.combine(start_date + dt.timedelta(days=k), SESSION_TIME, tzinfo=dt.UTC)
        out.append(Block(k, start, f"personamem:{short}:b{k:02d}", tuple(steps[k])))
    return tuple(out)


def _turn_ended(snap: Snapshot, round_id: str) -> bool:
    for action in reversed(snap.actions):
        if action.kind == "turn_end" and action.actor == "agent" and action.data.get("round_id") == round_id:
            return True
    return False


def _ended(round_id: str) -> Callable[[Snapshot], bool]:
    return lambda snap: _turn_ended(snap, round_id)


def _session_ready(start_id: str) -> Callable[[Snapshot], bool]:
    """The start fired and the run said the agent's session is ready (``session_started``)."""

    def ready(snap: Snapshot) -> bool:
        return snap.fired_at(start_id) is not None and any(
            a.kind == "session_started" and a.actor == "agent" and a.data.get("event_id") == start_id
            for a in snap.actions
        )

    return ready


def _all_graded(check_ids: tuple[str, ...]) -> Callable[[Snapshot], bool]:
    return lambda snap: all(c in snap.grades for c in check_ids)


class PersonaMemSource:
    def __init__(
        self, context_id: str, blocks: Sequence[Block], *, consolidate_at: dt.time | None = dt.time(2, 0)
    ) -> None:
        self._short = context_id[:8]
        self._blocks = tuple(blocks)
        self._consolidate_at = consolidate_at
        self._question_ids = tuple(s.round_id for b in self._blocks for s in b.steps if isinstance(s, Ask))
        self._emitted: set[str] = set()

    @property
    def name(self) -> str:
        return f"personamem:{self._short}"

    def _eid(self, *parts: str) -> str:
        return ":".join(("pm", self._short, *parts))

    def _emit(self, out: list[EventSpec], spec: EventSpec) -> None:
        if spec.id not in self._emitted:
            self._emitted.add(spec.id)
            out.append(spec)

    def poll(self, snapshot: Snapshot) -> Iterable[EventSpec]:
        out: list[EventSpec] = []
        prev: Block | None = None
        for block in self._blocks:
            tag = f"b{block.index:02d}"
            if prev is not None:
                if snapshot.fired_at(self._eid(f"b{prev.index:02d}", "stop")) is None:
                    return out
                self._maybe_consolidate(out, snapshot, prev, block)
            if not self._block(out, snapshot, block, tag):
                return out
            prev = block
        if prev is None or snapshot.fired_at(self._eid(f"b{prev.index:02d}", "stop")) is None:
            return out
        self._emit(
            out,
            EventSpec(
                self._eid("end"),
                When(_all_graded(self._question_ids), "every question graded"),
                (StopRun(reason="PersonaMem context delivered and every question graded"),),
                data={"phase": "end"},
            ),
        )
        return out

    def _block(self, out: list[EventSpec], snap: Snapshot, block: Block, tag: str) -> bool:
        """Propose the block's next events; True once its stop is proposed."""
        start_id = self._eid(tag, "start")
        common = {"session": block.session, "block": block.index, "day": block.day}
        self._emit(
            out,
            EventSpec(
                start_id,
                At(max(_ns(block.start), snap.now_ns)),
                (AgentControl("start"),),
                data={**common, "date": block.start.isoformat(), "phase": "start"},
            ),
        )
        if snap.fired_at(start_id) is None:
            return False
        prev_round: str | None = None
        for step in block.steps:
            trigger = (
                When(_session_ready(start_id), f"session {block.session} ready")
                if prev_round is None
                else When(_ended(prev_round), f"turn {prev_round} ended")
            )
            rid = step.round_id
            if isinstance(step, Turn):
                event_id = self._eid(tag, rid.rsplit("/", 1)[-1])
                phase = "context"
            else:
                event_id = self._eid("q", rid)
                phase = "question"
            self._emit(
                out,
                EventSpec(
                    event_id,
                    trigger,
                    (DeliverPrompt(step.text, session=block.session, round_id=rid),),
                    data={**common, "round_id": rid, "phase": phase},
                ),
            )
            if isinstance(step, Ask):
                q = step.question
                self._emit(
                    out,
                    EventSpec(
                        self._eid("q", rid, "grade"),
                        When(_ended(rid), f"turn {rid} ended"),
                        (Grade(rid, spec={"question_type": q.question_type, "topic": q.topic}),),
                        data={"round_id": rid, "phase": "grade"},
                    ),
                )
            if snap.fired_at(event_id) is None:
                return False
            prev_round = rid
        stop_trigger = (
            When(_ended(prev_round), f"turn {prev_round} ended") if prev_round is not None else After((start_id,))
        )
        self._emit(
            out,
            EventSpec(self._eid(tag, "stop"), stop_trigger, (AgentControl("stop"),), data={**common, "phase": "stop"}),
        )
        return True

    def _maybe_consolidate(self, out: list[EventSpec], snap: Snapshot, prev: Block, block: Block) -> None:
        if self._consolidate_at is None:
            return
        night = dt.datetime.combine(prev.start.date() + dt.timedelta(days=1), self._consolidate_at, tzinfo=dt.UTC)
        if night >= block.start:
            return
        self._emit(
            out,
            EventSpec(
                self._eid(f"b{prev.index:02d}", "consolidate"),
                At(max(_ns(night), snap.now_ns)),
                (AgentControl("consolidate", target="memory"),),
                data={"phase": "night"},
            ),
        )


def _fmt(letters: Iterable[str]) -> str:
    return ",".join(f"({x})" for x in sorted(letters)) or "none"


class PersonaMemScenario:
    """One shared context and its questions (implements :class:`adapters.Scenario`)."""

    def __init__(
        self,
        context_id: str,
        messages: Sequence[ContextMessage],
        questions: Sequence[PersonaMemQuestion],
        *,
        assistant_turns: AssistantTurns = "drop",
        consolidate_at: dt.time | None = dt.time(2, 0),
        start_date: dt.date = DEFAULT_START,
    ) -> None:
        self.context_id = context_id
        self.messages = tuple(messages)
        self.questions = tuple(questions)
        self.blocks = plan_blocks(
            context_id, self.messages, self.questions, assistant_turns=assistant_turns, start_date=start_date
        )
        self._consolidate_at = consolidate_at
        self._where: dict[str, Block] = {s.round_id: b for b in self.blocks for s in b.steps if isinstance(s, Ask)}
        self._by_id = {q.question_id: q for q in self.questions}
        self._source: PersonaMemSource | None = None

    @property
    def name(self) -> str:
        return f"personamem:{self.context_id[:12]}"

    @property
    def start_ns(self) -> int:
        return _ns(self.blocks[0].start)

    @property
    def rounds(self) -> Sequence[RoundInfo]:
        """One gradable round per question (its kind is its question_type), in asking order."""
        return [
            RoundInfo(s.round_id, b.day, s.question.question_type)
            for b in self.blocks
            for s in b.steps
            if isinstance(s, Ask)
        ]

    def sources(self) -> Sequence[EventSource]:
        if self._source is None:
            self._source = PersonaMemSource(self.context_id, self.blocks, consolidate_at=self._consolidate_at)
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

    def workspace_seed(self) -> Path | None:
        return None

    async def grade(self, effect: Grade, ctx: GradeContext) -> Verdict:
        q = self._by_id.get(effect.check_id)
        if q is None:
            raise NotFound(f"PersonaMem scenario {self.name!r} has no question {effect.check_id!r}")
        block = self._where[q.question_id]
        details: dict[str, Any] = {
            "question_type": q.question_type,
            "topic": q.topic,
            "correct_answer": q.correct_answer,
            "shared_context_id": q.shared_context_id,
            "end_index": q.end_index,
            "block": block.index,
            "day": block.day,
        }
        for column in ("persona_id", "distance_to_ref_in_blocks"):
            if column in q.extra:
                details[column] = q.extra[column]
        reply = ctx.reply_for(q.question_id)
        if reply is None or not reply.strip():
            why = "the agent gave no reply" if reply is None else "the agent's turn ended with an empty reply"
            return Verdict(
                q.question_id,
                0.0,
                True,
                reason=f"{why} (a failed turn or no answer): counted wrong, correct {q.correct_answer}",
                details={**details, "predicted_options": [], "answered": False},
            )
        check = check_answer(reply, q.correct_answer)
        predicted = _fmt(check.predicted_options)
        return Verdict(
            q.question_id,
            1.0 if check.correct else 0.0,
            True,
            reason=f"predicted {predicted}, correct {q.correct_answer}",
            details={
                **details,
                "answered": True,
                "predicted_options": [f"({x})" for x in sorted(check.predicted_options)],
                "predicted_answer": check.predicted_answer[-2000:],
                "matched_on": check.matched_on,
            },
        )

    def accuracy(self, verdicts: Mapping[str, Verdict]) -> dict[str, Any]:
        """Overall accuracy and by question_type and topic over this scenario's questions
        (an ungraded or missing one counts as wrong), as the paper reports it."""
        return accuracy(
            [
                (q.question_type, q.topic, bool((v := verdicts.get(q.question_id)) and v.graded and v.score))
                for q in self.questions
            ]
        )


def accuracy(results: Iterable[tuple[str, str, bool]]) -> dict[str, Any]:
    """``(question_type, topic, correct)`` per question -> overall / by_question_type / by_topic,
    each ``{"n": ..., "correct": ..., "accuracy": ...}``."""

    def cell(values: list[bool]) -> dict[str, Any]:
        return {"n": len(values), "correct": sum(values), "accuracy": sum(values) / len(values) if values else None}

    rows = list(results)
    by_type: dict[str, list[bool]] = defaultdict(list)
    by_topic: dict[str, list[bool]] = defaultdict(list)
    for qtype, topic, ok in rows:
        by_type[qtype].append(ok)
        by_topic[topic].append(ok)
    return {
        "overall": cell([ok for _, _, ok in rows]),
        "by_question_type": {k: cell(v) for k, v in sorted(by_type.items())},
        "by_topic": {k: cell(v) for k, v in sorted(by_topic.items())},
    }
