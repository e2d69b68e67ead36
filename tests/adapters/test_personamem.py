"""PersonaMem adapter: the fixture, blocks on simulated days, questions at their cut,
upstream's answer rule, bad files named by file and field, options."""

from __future__ import annotations

import ast
import csv
import datetime as dt
import hashlib
import importlib.util
import io
import json
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from adapters._base import Capability, ScenarioConfig, Verdict
from adapters.personamem import (
    INSTRUCTIONS,
    QUESTION_TYPES,
    Ask,
    PersonaMemBenchmark,
    PersonaMemScenario,
    Turn,
    accuracy,
    check_answer,
    extract_options,
    question_prompt,
    read_context,
    read_questions,
    shared_context_id,
)
from sclated.errors import InvalidArgument, NotFound
from sclated.scheduler import DeliverPrompt, EventSpec, Grade, Snapshot, StopRun
from tests.adapters._doubles import DoubleGradeContext, drive

_NS = 1_000_000_000
ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "adapters" / "personamem" / "scenarios"
QUESTIONS = SCENARIOS / "questions_tiny.csv"
CONTEXTS = SCENARIOS / "shared_contexts_tiny.jsonl"
CTX_A = "85678287ee8455ca1ddb08ffee5d440f73eacb03c2861fea5ded9f721a7fc766"
CTX_B = "6e9f40373fbf0fea13d8f2389dc364912a306d26a34952f026ea12e4061c1dfc"
Q1, Q2, Q3, Q4, Q5 = (f"00000000-0000-4000-8000-00000000000{i}" for i in range(1, 6))
D0 = dt.date(2026, 1, 5)


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("personamem_fixture", ROOT / "scripts" / "personamem_fixture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(**options: Any) -> PersonaMemScenario:
    return PersonaMemBenchmark().load(ScenarioConfig(scenario="tiny", options=options))


def _at(day: int, hour: int = 9, minute: int = 0) -> dt.datetime:
    return dt.datetime.combine(D0 + dt.timedelta(days=day), dt.time(hour, minute), tzinfo=dt.UTC)


def _utc(ns: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ns / _NS, tz=dt.UTC)


# -- the fixture ---------------------------------------------------------------------


def test_committed_fixture_is_what_the_generator_writes(tmp_path: Path) -> None:
    files = _generator().files()
    assert sorted(files) == ["questions_tiny.csv", "shared_contexts_tiny.jsonl"]
    for name, text in files.items():
        assert (SCENARIOS / name).read_text(encoding="utf-8") == text, f"{name}: run scripts/personamem_fixture.py"


def test_fixture_has_the_release_schema_and_upstream_ids() -> None:
    with QUESTIONS.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == [
        "persona_id",
        "question_id",
        "question_type",
        "topic",
        "context_length_in_tokens",
        "context_length_in_letters",
        "distance_to_ref_in_blocks",
        "distance_to_ref_in_tokens",
        "num_irrelevant_tokens",
        "distance_to_ref_proportion_in_context",
        "user_question_or_message",
        "correct_answer",
        "all_options",
        "shared_context_id",
        "end_index_in_shared_context",
    ]
    contexts: dict[str, list[dict[str, str]]] = {}
    for line in CONTEXTS.read_text().splitlines():
        obj = json.loads(line)
        assert len(obj) == 1
        ((key, messages),) = obj.items()
        # Upstream's generate_shared_context_id, typed again here.
        assert key == hashlib.sha256(" ".join(str(m) for m in messages).encode()).hexdigest()
        assert key == shared_context_id(messages)
        assert all(set(m) == {"role", "content"} for m in messages)
        contexts[key] = messages
    assert sorted(contexts) == sorted([CTX_A, CTX_B])
    for row in rows:
        assert row["question_type"] in QUESTION_TYPES
        options = ast.literal_eval(row["all_options"])
        assert [o[:4] for o in options] == ["(a) ", "(b) ", "(c) ", "(d) "]
        context = contexts[row["shared_context_id"]]
        end = int(row["end_index_in_shared_context"])
        assert 1 <= end <= len(context)
        assert int(row["context_length_in_letters"]) == len("".join(m["content"] for m in context[:end]))
    # A preference that changes (spicy -> mild) and a question on the latest one, after it.
    q1 = next(r for r in rows if r["question_id"] == Q1)
    assert q1["question_type"] == "acknowledge_latest_preferences"
    visible = " ".join(m["content"] for m in contexts[CTX_A][: int(q1["end_index_in_shared_context"])])
    assert "very spicy Sichuan" in visible and "now I prefer mild" in visible
    assert "mild" in ast.literal_eval(q1["all_options"])[2] and q1["correct_answer"] == "(c)"


def test_reading_the_fixture() -> None:
    questions = read_questions(QUESTIONS)
    assert [q.question_id for q in questions] == [Q1, Q2, Q3, Q4, Q5]
    q1 = questions[0]
    assert q1.correct_answer == "(c)" and q1.correct_letter == "c" and q1.end_index == 12 and q1.row == 1
    assert q1.options[2].startswith("(c) Have fun!") and q1.all_options.startswith("['(a) Perfect")
    assert q1.extra["persona_id"] == "0" and q1.extra["distance_to_ref_in_blocks"] == "1"
    messages = read_context(CONTEXTS, CTX_A)
    assert len(messages) == 13 and [m.index for m in messages] == list(range(13))
    assert [m.role for m in messages if m.role == "system"] == ["system"] * 3
    with pytest.raises(NotFound, match=r"shared_contexts_tiny.jsonl has no shared context 0000"):
        read_context(CONTEXTS, "0000")


def test_question_ids_and_contexts() -> None:
    bench = PersonaMemBenchmark()
    tiny = ScenarioConfig(scenario="tiny")
    assert bench.question_ids(tiny) == [Q1, Q2, Q3, Q4, Q5]
    summary = bench.contexts(tiny)
    assert [(c.shared_context_id, c.persona_id, c.questions) for c in summary] == [(CTX_A, "0", 4), (CTX_B, "1", 1)]
    info = bench.info
    assert info.name == "personamem" and info.builtin_scenarios == ("tiny",)
    assert "questions_128k.csv" in info.data_format and "shared_contexts_128k.jsonl" in info.data_format


# -- choosing a context ----------------------------------------------------------------


def test_a_scenario_is_one_context_chosen_by_prefix_or_subset() -> None:
    bench = PersonaMemBenchmark()
    with pytest.raises(InvalidArgument, match="one shared context") as err:
        bench.load(ScenarioConfig(scenario="tiny"))
    assert "context=" in str(err.value) and "85678287ee84 (4 questions)" in str(err.value)
    a = _load(context="85678287ee")
    assert a.context_id == CTX_A and [r.round_id for r in a.rounds] == [Q5, Q1, Q2, Q3]
    assert _load(context="6E9F").context_id == CTX_B  # case does not matter
    # The CLI reads context=85678287 as a JSON number; the run's Struct makes it a float.
    assert _load(context=85678287.0).context_id == CTX_A
    sub = bench.load(ScenarioConfig(scenario="tiny", subset=(Q3, Q1)))
    assert sub.context_id == CTX_A and [r.round_id for r in sub.rounds] == [Q1, Q3]
    assert bench.load(ScenarioConfig(scenario="tiny", subset=(Q4,), options={"context": "6e9f"})).context_id == CTX_B
    with pytest.raises(InvalidArgument, match=r"on 2 \(") as err:
        bench.load(ScenarioConfig(scenario="tiny", subset=(Q1, Q4)))
    assert err.value.field == "subset"
    with pytest.raises(InvalidArgument, match="not on context 6e9f40373fbf"):
        bench.load(ScenarioConfig(scenario="tiny", subset=(Q1,), options={"context": "6e9f"}))
    with pytest.raises(InvalidArgument, match="nope"):
        bench.load(ScenarioConfig(scenario="tiny", subset=("nope",)))
    with pytest.raises(InvalidArgument, match="start of no shared_context_id") as err:
        _load(context="ffff")
    assert err.value.field == "options.context"
    with pytest.raises(NotFound, match="no PersonaMem scenario 'huge'"):
        bench.load(ScenarioConfig(scenario="huge"))


def test_options_are_checked() -> None:
    with pytest.raises(InvalidArgument, match=r"unknown personamem option.*contxt"):
        _load(contxt="8567")
    with pytest.raises(InvalidArgument, match="assistant_turns"):
        _load(context="8567", assistant_turns="keep")
    with pytest.raises(InvalidArgument, match="consolidate_at='2am'"):
        _load(context="8567", consolidate_at="2am")
    with pytest.raises(InvalidArgument, match="start_date='next monday'"):
        _load(context="8567", start_date="next monday")
    sc = _load(context="8567", start_date="2030-03-01", consolidate_at=None)
    assert sc.blocks[0].start == dt.datetime(2030, 3, 1, 9, 0, tzinfo=dt.UTC)
    assert sc.start_ns == int(dt.datetime(2030, 3, 1, 9, 0, tzinfo=dt.UTC).timestamp()) * _NS
    assert sc.requires == {}
    assert Capability.CONSOLIDATE in _load(context="8567").requires
    assert sc.world is None and sc.environment is None and sc.workspace_seed() is None


def test_upstream_file_names_in_a_data_dir(tmp_path: Path) -> None:
    shutil.copy(QUESTIONS, tmp_path / "questions_128k.csv")
    shutil.copy(CONTEXTS, tmp_path / "shared_contexts_128k.jsonl")
    bench = PersonaMemBenchmark()
    sc = bench.load(ScenarioConfig(data_dir=tmp_path, options={"context": "6e9f"}))
    assert [r.round_id for r in sc.rounds] == [Q4]
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(QUESTIONS, other / "q.csv")
    shutil.copy(CONTEXTS, other / "c.jsonl")
    config = ScenarioConfig(
        data_dir=other, subset=(Q4,), options={"questions_file": "q.csv", "contexts_file": "c.jsonl"}
    )
    assert bench.load(config).context_id == CTX_B
    with pytest.raises(NotFound, match=r"questions_128k.csv does not exist"):
        bench.question_ids(ScenarioConfig(data_dir=other))
    with pytest.raises(NotFound, match=r"shared_contexts_128k.jsonl does not exist"):
        bench.load(ScenarioConfig(data_dir=other, subset=(Q4,), options={"questions_file": "q.csv"}))


# -- the plan: blocks on days, questions at their cut ------------------------------------


def test_blocks_are_days_and_questions_sit_at_their_cut() -> None:
    sc = _load(context="8567")
    assert [(b.index, b.start, b.session) for b in sc.blocks] == [
        (0, _at(0), "personamem:85678287:b00"),
        (1, _at(1), "personamem:85678287:b01"),
        (2, _at(2), "personamem:85678287:b02"),
    ]
    shape = [[s.round_id if isinstance(s, Ask) else s.messages for s in b.steps] for b in sc.blocks]
    assert shape == [
        [(0, 1), (3,)],
        [(5, 6), (8,), Q5],  # q5: end_index 9, right after message 8 (the change), day 1
        [(10, 11), Q1, Q2, Q3],  # q1/q2: end_index 12 (after message 11); q3: 13 (message 12 dropped)
    ]
    # The persona opens the session as upstream folds a system message into the next one.
    first = sc.blocks[0].steps[0]
    assert isinstance(first, Turn)
    messages = read_context(CONTEXTS, CTX_A)
    assert first.text == f"[System]: {messages[0].content}\n{messages[1].content}"
    assert first.round_id == "85678287/b00/t0"
    # A question is upstream's user message: question, instruction, the raw options text.
    ask = sc.blocks[2].steps[1]
    assert isinstance(ask, Ask)
    q1 = read_questions(QUESTIONS)[0]
    assert ask.text == f"{q1.question}\n\n{INSTRUCTIONS}\n\n{q1.all_options}"
    assert ask.text == question_prompt(q1.question, q1.all_options)
    assert INSTRUCTIONS == (
        "Find the most appropriate model response and give your final answer (a), (b), (c), or (d) "
        "after the special token <final_answer>."
    )
    assert [(r.round_id, r.day, r.kind) for r in sc.rounds] == [
        (Q5, "2026-01-06", "revisit_reasons_behind_preference_updates"),
        (Q1, "2026-01-07", "acknowledge_latest_preferences"),
        (Q2, "2026-01-07", "track_full_preference_evolution"),
        (Q3, "2026-01-07", "recall_user_shared_facts"),
    ]


@pytest.mark.parametrize("mode", ["drop", "attach"])
def test_a_question_sees_exactly_the_history_before_its_end_index(mode: str) -> None:
    sc = _load(context="8567", assistant_turns=mode)
    messages = read_context(CONTEXTS, CTX_A)
    delivered: list[int] = []
    seen_at_question: dict[str, list[int]] = {}
    for block in sc.blocks:
        for step in block.steps:
            if isinstance(step, Turn):
                delivered += step.messages
            else:
                seen_at_question[step.round_id] = list(delivered)
    for q in read_questions(QUESTIONS):
        if q.shared_context_id != CTX_A:
            continue
        expected = [m.index for m in messages[: q.end_index] if m.role != "assistant" or mode == "attach"]
        assert seen_at_question[q.question_id] == expected, q.question_id
    if mode == "attach":
        # Message 9 (the recorded reply after q5's cut) comes after q5, as a turn of its own.
        after_q5 = sc.blocks[1].steps[3]
        assert isinstance(after_q5, Turn) and after_q5.messages == (9,)
        assert after_q5.text.startswith("[Recorded assistant reply in the original conversation]\nAssistant: Sorry")
    else:
        assert all("Recorded assistant reply" not in s.text for b in sc.blocks for s in b.steps)


async def test_the_run_delivers_blocks_on_their_days_and_grades_every_question(tmp_path: Path) -> None:
    sc = _load(context="8567")
    ctx = DoubleGradeContext(tmp_path / "ws")
    ctx.workspace.mkdir()
    answers = {Q5: "<final_answer>(b)", Q1: "I'd say (c).", Q2: "(a) or (b)"}  # Q3 left empty

    def agent(prompt: DeliverPrompt) -> str:
        assert prompt.round_id is not None
        return answers.get(prompt.round_id, "" if prompt.round_id == Q3 else "Noted!")

    sched, log = await drive(sc, ctx, agent)
    assert log.stopped and not sched.pending()
    assert any(isinstance(e, StopRun) for f in log.fires for e in f.effects)

    starts = [(_utc(ns), eid) for ns, c, eid in log.controls if c.action == "start"]
    assert starts == [
        (_at(0), "pm:85678287:b00:start"),
        (_at(1), "pm:85678287:b01:start"),
        (_at(2), "pm:85678287:b02:start"),
    ]
    assert [c.action for _, c, _ in log.controls] == [
        "start", "stop", "consolidate",
        "start", "stop", "consolidate",
        "start", "stop",
    ]  # fmt: skip
    nights = [_utc(ns) for ns, c, _ in log.controls if c.action == "consolidate"]
    assert nights == [_at(1, 2), _at(2, 2)]

    delivered = [(_utc(ns), p.session, p.round_id) for ns, p in log.prompts]
    turn = dt.timedelta(seconds=45)  # the double's turn length
    assert delivered == [
        (_at(0), "personamem:85678287:b00", "85678287/b00/t0"),
        (_at(0) + turn, "personamem:85678287:b00", "85678287/b00/t1"),
        (_at(1), "personamem:85678287:b01", "85678287/b01/t0"),
        (_at(1) + turn, "personamem:85678287:b01", "85678287/b01/t1"),
        (_at(1) + 2 * turn, "personamem:85678287:b01", Q5),
        (_at(2), "personamem:85678287:b02", "85678287/b02/t0"),
        (_at(2) + turn, "personamem:85678287:b02", Q1),
        (_at(2) + 2 * turn, "personamem:85678287:b02", Q2),
        (_at(2) + 3 * turn, "personamem:85678287:b02", Q3),
    ]
    v = log.verdicts
    assert sorted(v) == sorted([Q1, Q2, Q3, Q5]) and all(x.graded for x in v.values())
    assert (v[Q5].score, v[Q1].score, v[Q2].score, v[Q3].score) == (1.0, 1.0, 0.0, 0.0)
    assert v[Q5].reason == "predicted (b), correct (b)"
    assert v[Q2].reason == "predicted (a),(b), correct (a)" and v[Q2].details["predicted_options"] == ["(a)", "(b)"]
    assert "empty reply" in v[Q3].reason and "counted wrong" in v[Q3].reason
    assert v[Q3].details["answered"] is False
    d = v[Q1].details
    assert (d["question_type"], d["topic"], d["correct_answer"]) == (
        "acknowledge_latest_preferences",
        "foodRecommendation",
        "(c)",
    )
    assert (d["day"], d["block"], d["end_index"], d["persona_id"]) == ("2026-01-07", 2, 12, "0")
    summary = sc.accuracy(v)
    assert summary["overall"] == {"n": 4, "correct": 2, "accuracy": 0.5}
    assert summary["by_question_type"]["acknowledge_latest_preferences"]["accuracy"] == 1.0
    assert summary["by_question_type"]["recall_user_shared_facts"]["accuracy"] == 0.0
    assert summary["by_topic"] == {"foodRecommendation": {"n": 4, "correct": 2, "accuracy": 0.5}}


async def test_no_reply_is_wrong_and_an_unknown_check_is_refused(tmp_path: Path) -> None:
    sc = _load(context="6e9f", consolidate_at=None)
    ctx = DoubleGradeContext(tmp_path / "ws")
    ctx.workspace.mkdir()
    verdict = await sc.grade(Grade(Q4), ctx)
    assert verdict.graded and verdict.score == 0.0
    assert verdict.reason.startswith("the agent gave no reply") and "correct (d)" in verdict.reason
    ctx.replies[Q4] = "Hard bop it is: <final_answer>(D)</final_answer>"
    verdict = await sc.grade(Grade(Q4), ctx)
    assert verdict.score == 1.0 and verdict.details["matched_on"] == "final_answer"
    assert verdict.details["predicted_answer"] == "(D)"
    with pytest.raises(NotFound, match=Q1):
        await sc.grade(Grade(Q1), ctx)


async def test_a_long_context_keeps_few_conditions_pending(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """20 blocks of 30 messages and 40 questions (128k's shape): every event fires, in
    order, and the source proposes each step only once the one before it fired."""
    messages: list[dict[str, str]] = []
    for k in range(20):
        messages.append({"role": "system", "content": f"Current user persona: P{k}"})
        for j in range(29):
            role = "user" if j % 2 == 0 else "assistant"
            messages.append({"role": role, "content": f"{role.title()}: block {k} message {j}"})
    cid = shared_context_id(messages)
    (tmp_path / "shared_contexts_128k.jsonl").write_text(json.dumps({cid: messages}) + "\n")
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["question_id", "question_type", "topic", "user_question_or_message", "correct_answer",
                     "all_options", "shared_context_id", "end_index_in_shared_context"])  # fmt: skip
    options = str([f"({x}) option {x}" for x in "abcd"])
    for i in range(40):
        end = 15 + i * 14  # spread over every block
        writer.writerow([f"q{i}", "suggest_new_ideas", "t", f"question {i}", "(a)", options, cid, end])
    (tmp_path / "questions_128k.csv").write_text(buf.getvalue())
    sc = PersonaMemBenchmark().load(ScenarioConfig(data_dir=tmp_path, options={"consolidate_at": None}))
    assert len(sc.blocks) == 20 and len(sc.rounds) == 40
    (source,) = sc.sources()
    poll = source.poll
    proposed: list[str] = []
    most_pending = 0

    def counting_poll(snap: Snapshot) -> Iterable[EventSpec]:
        nonlocal most_pending
        out = list(poll(snap))
        proposed.extend(spec.id for spec in out)
        most_pending = max(most_pending, sum(1 for eid in proposed if snap.fired_at(eid) is None))
        return out

    monkeypatch.setattr(source, "poll", counting_poll)
    started = time.monotonic()
    _, log = await drive(sc, DoubleGradeContext(tmp_path / "ws"), lambda p: "(a)", turn_ns=_NS)
    assert time.monotonic() - started < 20
    assert log.stopped and len(log.verdicts) == 40 and all(v.score == 1.0 for v in log.verdicts.values())
    assert len(proposed) == len(log.fires) and most_pending <= 3
    # 15 user turns a block, 40 questions, and 2 persona-only turns: q14 and q29 cut right
    # after a block's system message (end_index 211 and 421), so the persona is sent alone.
    assert len(log.prompts) == 20 * 15 + 40 + 2
    alone = [p for _, p in log.prompts if p.text == "[System]: Current user persona: P7"]
    assert len(alone) == 1 and alone[0].round_id == f"{cid[:8]}/b07/t0"
    days = {_utc(ns).date() for ns, _ in log.prompts}
    assert days == {D0 + dt.timedelta(days=k) for k in range(20)}
    times = [ns for ns, _ in log.prompts]
    assert times == sorted(times)


# -- upstream's answer rule ------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "correct", "expected"),
    [
        # The notes' eight cases (docs/personamem-notes.md §3.2).
        ("<final_answer>(c)", "(c)", True),
        ("Let me think. (a) ignores the reflux. <final_answer>(c)</final_answer>", "(c)", True),
        ("(B)", "(b)", True),  # lowercased first
        ("The answer is b", "(b)", True),  # a bare letter
        ("(a) or (c)", "(c)", False),  # two letters named
        ("a. no, b is right", "(b)", False),  # the bare "a" counts as option (a)
        ("<final_answer>(d)", "(c)", False),
        ("", "(a)", False),
        # More.
        ("I pick (c).<final_answer> the mild one", "(c)", True),  # fallback to the whole reply
        ("Option D.", "(d)", True),
        ("It's a c", "(c)", False),  # the article "a" is an option too
        ("I'd go with c", "(c)", False),  # the "d" of "I'd" stands as a word too
        ("I would go with c", "(c)", True),
        ("(b) vs (c) <final_answer>(b), (c)", "(b)", False),
        ("(a) is tempting, but <final_answer> c", "(c)", True),  # the cut text has only "c"
        ("<final_answer>(a)</final_answer> (b)", "(a)", False),  # the cut text has (a) and (b)
        ("Answer: (c) (c)", "(C)", True),  # repeats are one letter; correct_answer normalised
        ("(e) none of these", "(a)", False),
        ("bad", "(b)", False),  # a letter inside a word is no answer
    ],
)
def test_upstream_answer_rule(reply: str, correct: str, expected: bool) -> None:
    assert check_answer(reply, correct).correct is expected


def test_extracting_options() -> None:
    assert extract_options("(A) and (b)") == {"a", "b"}
    assert extract_options("a and (b)") == {"b"}  # parenthesised letters win
    assert extract_options("no letters here") == set()
    check = check_answer("I pick (c).<final_answer> the mild one", "(c)")
    assert check.predicted_answer == "the mild one" and check.matched_on == "full_response"
    assert check.predicted_options == {"c"}
    wrong = check_answer("<final_answer>(d)</final_answer>", "(c)")
    assert wrong.predicted_answer == "(d)" and wrong.predicted_options == {"d"} and wrong.matched_on == ""


def test_accuracy_groups_by_type_and_topic() -> None:
    summary = accuracy([("t1", "food", True), ("t1", "music", False), ("t2", "food", True)])
    assert summary["overall"] == {"n": 3, "correct": 2, "accuracy": 2 / 3}
    assert summary["by_question_type"] == {
        "t1": {"n": 2, "correct": 1, "accuracy": 0.5},
        "t2": {"n": 1, "correct": 1, "accuracy": 1.0},
    }
    assert summary["by_topic"]["music"] == {"n": 1, "correct": 0, "accuracy": 0.0}
    assert accuracy([])["overall"] == {"n": 0, "correct": 0, "accuracy": None}
    # A question without a verdict, or an ungraded one, counts as wrong.
    sc = _load(context="8567")
    verdicts = {Q1: Verdict(Q1, 1.0, True), Q2: Verdict(Q2, None, False)}
    assert sc.accuracy(verdicts)["overall"] == {"n": 4, "correct": 1, "accuracy": 0.25}


# -- bad files -------------------------------------------------------------------------


def _rows() -> list[dict[str, str]]:
    with QUESTIONS.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _write(folder: Path, rows: list[dict[str, str]], columns: list[str] | None = None) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns or list(rows[0]), lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    (folder / "questions_128k.csv").write_text(buf.getvalue())
    if not (folder / "shared_contexts_128k.jsonl").exists():
        shutil.copy(CONTEXTS, folder / "shared_contexts_128k.jsonl")


def _bad_row(folder: Path, index: int, **changes: str) -> None:
    rows = _rows()
    rows[index].update(changes)
    _write(folder, rows)


@pytest.mark.parametrize(
    ("row", "changes", "message", "field"),
    [
        (
            2,
            {"all_options": "['(a) x', '(b) y', '(c) z']"},
            "row 3 .*: all_options is not a list of 4 options",
            "all_options",
        ),
        (0, {"all_options": "[(a) not python"}, "row 1 .*: all_options is not a list of 4 options", "all_options"),
        (1, {"all_options": "{'a': 1}"}, "row 2 .*: all_options is not a list", "all_options"),
        (
            1,
            {"all_options": "['(a) w', '(c) x', '(b) y', '(d) z']"},
            "row 2 .*item 2 does not start with '\\(b\\) '",
            "all_options",
        ),
        (0, {"correct_answer": "(e)"}, "row 1 .*: correct_answer '\\(e\\)' is not one of", "correct_answer"),
        (0, {"correct_answer": "(ab)"}, "row 1 .*: correct_answer", "correct_answer"),
        (
            3,
            {"end_index_in_shared_context": "six"},
            "row 4 .*: end_index_in_shared_context 'six' is not an integer",
            "end_index_in_shared_context",
        ),
        (
            3,
            {"end_index_in_shared_context": "0"},
            "row 4 .*: end_index_in_shared_context 0 is below 1",
            "end_index_in_shared_context",
        ),
        (0, {"question_id": ""}, "row 1: question_id is empty", "question_id"),
        (0, {"shared_context_id": " "}, "row 1 .*: shared_context_id is empty", "shared_context_id"),
        (1, {"question_id": Q1}, f"row 2: question_id {Q1} repeats row 1", "question_id"),
    ],
)
def test_a_bad_question_row_names_the_file_row_and_field(
    tmp_path: Path, row: int, changes: dict[str, str], message: str, field: str
) -> None:
    _bad_row(tmp_path, row, **changes)
    with pytest.raises(InvalidArgument, match=f"questions_128k.csv {message}") as err:
        PersonaMemBenchmark().question_ids(ScenarioConfig(data_dir=tmp_path))
    assert err.value.field == field


def test_bad_question_files(tmp_path: Path) -> None:
    bench = PersonaMemBenchmark()
    config = ScenarioConfig(data_dir=tmp_path, options={"context": "8567"})
    rows = _rows()
    columns = [c for c in rows[0] if c != "all_options"]
    _write(tmp_path, rows, columns)
    with pytest.raises(InvalidArgument, match=r"questions_128k.csv lacks the columns \['all_options'\]") as err:
        bench.load(config)
    assert err.value.field == "all_options"
    # Extra columns are fine, and so is any order.
    _write(tmp_path, [{**r, "stereotypical": "No"} for r in rows], ["stereotypical", *reversed(list(rows[0]))])
    assert len(bench.load(config).rounds) == 4
    (tmp_path / "questions_128k.csv").write_text("")
    with pytest.raises(InvalidArgument, match=r"questions_128k.csv is empty"):
        bench.load(config)
    (tmp_path / "questions_128k.csv").write_text(",".join(rows[0]) + "\n")
    with pytest.raises(InvalidArgument, match=r"questions_128k.csv has no question rows"):
        bench.load(config)
    (tmp_path / "questions_128k.csv").write_bytes(b"question_id,\xff\xfe\n")
    with pytest.raises(InvalidArgument, match=r"questions_128k.csv is not UTF-8"):
        bench.load(config)
    _bad_row(tmp_path, 0, end_index_in_shared_context="14")
    with pytest.raises(InvalidArgument, match=r"row 1 .*end_index_in_shared_context 14 is past the end of its context"):
        bench.load(config)
    _write(tmp_path, [rows[0], {**rows[1], "persona_id": "0,extra"}])
    text = (tmp_path / "questions_128k.csv").read_text().replace('"0,extra"', "0,extra")
    (tmp_path / "questions_128k.csv").write_text(text)
    with pytest.raises(InvalidArgument, match="row 2: more cells than the header"):
        bench.load(config)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "line 1 is not valid JSON"),
        (json.dumps({CTX_A: [], "b": []}), "line 1: not an object with one key"),
        ("[1, 2]", "line 1: not an object with one key"),
        (json.dumps({CTX_A: "hello"}), "line 1: the context is not a non-empty list of messages"),
        (
            json.dumps({CTX_A: [{"role": "system", "content": "x"}, {"role": "narrator", "content": "y"}]}),
            "line 1: message 1 has role 'narrator'",
        ),
        (json.dumps({CTX_A: [{"role": "user", "content": ["x"]}]}), "line 1: message 0 has no text content"),
        (json.dumps({CTX_A: [["user", "x"]]}), "line 1: message 0 is not an object"),
    ],
)
def test_a_bad_context_line_names_the_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    shutil.copy(QUESTIONS, tmp_path / "questions_128k.csv")
    (tmp_path / "shared_contexts_128k.jsonl").write_text(line + "\n")
    with pytest.raises(InvalidArgument, match=f"shared_contexts_128k.jsonl {message}"):
        PersonaMemBenchmark().load(ScenarioConfig(data_dir=tmp_path, options={"context": "8567"}))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (f'{{"{CTX_A}": ' + "[" * 100_000 + "]" * 100_000 + "}", "line 1 is not JSON this reader takes: .*nested"),
        (f'{{"{CTX_A}": ' + "9" * 5000 + "}", "line 1 is not JSON this reader takes: .*4300 digits"),
    ],
    ids=["nested", "huge-integer"],
)
def test_a_context_line_json_reading_refuses_is_named(tmp_path: Path, line: str, message: str) -> None:
    # Before: RecursionError and ValueError escaped CreateRun.
    shutil.copy(QUESTIONS, tmp_path / "questions_128k.csv")
    (tmp_path / "shared_contexts_128k.jsonl").write_text(line + "\n")
    with pytest.raises(InvalidArgument, match=f"shared_contexts_128k.jsonl {message}"):
        PersonaMemBenchmark().load(ScenarioConfig(data_dir=tmp_path, options={"context": "8567"}))


def test_data_files_that_are_directories_or_too_wide_are_named(tmp_path: Path) -> None:
    # Before: IsADirectoryError escaped; a cell past the CSV field limit said no line.
    config = ScenarioConfig(data_dir=tmp_path, options={"context": "8567"})
    (tmp_path / "questions_128k.csv").mkdir()
    with pytest.raises(InvalidArgument, match=r"questions_128k.csv cannot be read"):
        PersonaMemBenchmark().load(config)
    (tmp_path / "questions_128k.csv").rmdir()
    shutil.copy(QUESTIONS, tmp_path / "questions_128k.csv")
    (tmp_path / "shared_contexts_128k.jsonl").mkdir()
    with pytest.raises(InvalidArgument, match=r"shared_contexts_128k.jsonl cannot be read"):
        PersonaMemBenchmark().load(config)
    lines = QUESTIONS.read_text().splitlines()
    (tmp_path / "questions_128k.csv").write_text("\n".join([*lines[:2], "x" * 200_000, *lines[2:]]) + "\n")
    with pytest.raises(InvalidArgument, match=r"questions_128k.csv is not valid CSV at line \d+: field larger"):
        PersonaMemBenchmark().load(config)


def test_a_context_missing_from_the_jsonl_is_not_found(tmp_path: Path) -> None:
    shutil.copy(QUESTIONS, tmp_path / "questions_128k.csv")
    only_b = [line for line in CONTEXTS.read_text().splitlines() if line.startswith(f'{{"{CTX_B}"')]
    (tmp_path / "shared_contexts_128k.jsonl").write_text("\n".join(only_b) + "\n")
    bench = PersonaMemBenchmark()
    with pytest.raises(NotFound, match=f"shared_contexts_128k.jsonl has no shared context {CTX_A}"):
        bench.load(ScenarioConfig(data_dir=tmp_path, options={"context": "8567"}))
    assert bench.load(ScenarioConfig(data_dir=tmp_path, options={"context": "6e9f"})).context_id == CTX_B
