"""LongMemEval adapter: fixture loading, sessions on their dates, upstream judge prompts."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest

from adapters._base import ScenarioConfig
from adapters.longmemeval import (
    QUESTION_TYPES,
    LongMemEvalBenchmark,
    LongMemEvalScenario,
    anscheck_prompt,
    contains_match,
    exact_match,
    judge_label,
    parse_date,
)
from sclated.errors import InvalidArgument
from sclated.scheduler import DeliverPrompt, Grade
from tests.adapters._doubles import DoubleGradeContext, drive

_NS = 1_000_000_000
FIXTURE = Path(__file__).resolve().parents[2] / "adapters" / "longmemeval" / "scenarios" / "tiny.json"

# Upstream src/evaluation/evaluate_qa.py, get_anscheck_prompt, copied by hand.
UPSTREAM_BASIC = (
    "I will give you a question, a correct answer, and a response from a model. "
    "Please answer yes if the response contains the correct answer. Otherwise, answer no. "
    "If the response is equivalent to the correct answer or contains all the intermediate "
    "steps to get the correct answer, you should also answer yes. If the response only "
    "contains a subset of the information required by the answer, answer no. "
    "\n\nQuestion: Q\n\nCorrect Answer: A\n\nModel Response: R\n\n"
    "Is the model response correct? Answer yes or no only."
)
UPSTREAM_ABSTENTION = (
    "I will give you an unanswerable question, an explanation, and a response from a model. "
    "Please answer yes if the model correctly identifies the question as unanswerable. "
    "The model could say that the information is incomplete, or some other information is "
    "given but the asked information is not.\n\nQuestion: Q\n\nExplanation: A\n\n"
    "Model Response: R\n\nDoes the model correctly identify the question as unanswerable? "
    "Answer yes or no only."
)


def _load(qid: str, **options: object) -> LongMemEvalScenario:
    return LongMemEvalBenchmark().load(ScenarioConfig(scenario="tiny", subset=(qid,), options=options))


def _utc(ns: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ns / _NS, tz=dt.UTC)


def test_fixture_has_the_upstream_schema() -> None:
    items = json.loads(FIXTURE.read_text())
    fields = {
        "question_id",
        "question_type",
        "question",
        "answer",
        "question_date",
        "haystack_session_ids",
        "haystack_dates",
        "haystack_sessions",
        "answer_session_ids",
    }
    assert len(items) == 3
    for item in items:
        assert set(item) == fields
        assert item["question_type"] in QUESTION_TYPES
        assert len(item["haystack_session_ids"]) == len(item["haystack_dates"]) == len(item["haystack_sessions"])
        for session in item["haystack_sessions"]:
            for turn in session:
                assert set(turn) <= {"role", "content", "has_answer"} and turn["role"] in (
                    "user",
                    "assistant",
                )
        # The date text's weekday must agree with the date itself.
        for raw in [*item["haystack_dates"], item["question_date"]]:
            assert parse_date(raw).strftime("%Y/%m/%d (%a) %H:%M") == raw
    assert parse_date("2023/05/20 (Sat) 02:21") == dt.datetime(2023, 5, 20, 2, 21, tzinfo=dt.UTC)
    with pytest.raises(InvalidArgument):
        parse_date("2023-05-20 02:21")


def test_one_question_per_scenario() -> None:
    bench = LongMemEvalBenchmark()
    assert bench.question_ids(ScenarioConfig(scenario="tiny")) == [
        "lme_tiny_ssu_1",
        "lme_tiny_ku_2",
        "lme_tiny_tr_3_abs",
    ]
    with pytest.raises(InvalidArgument, match="one question"):
        bench.load(ScenarioConfig(scenario="tiny"))
    with pytest.raises(InvalidArgument, match="nope"):
        bench.load(ScenarioConfig(scenario="tiny", subset=("nope",)))
    sc = bench.load(ScenarioConfig(data_dir=FIXTURE, subset=("lme_tiny_ku_2",)))
    assert [r.round_id for r in sc.rounds] == ["lme_tiny_ku_2"]


def test_judge_prompts_match_upstream_per_type() -> None:
    for qtype in ("single-session-user", "single-session-assistant", "multi-session"):
        assert anscheck_prompt(qtype, "Q", "A", "R") == UPSTREAM_BASIC
    for qtype in QUESTION_TYPES:
        assert anscheck_prompt(qtype, "Q", "A", "R", abstention=True) == UPSTREAM_ABSTENTION
    temporal = anscheck_prompt("temporal-reasoning", "Q", "A", "R")
    assert temporal.startswith(UPSTREAM_BASIC.split(" \n\n")[0] + " In addition, do not penalize off-by-one")
    assert "(e.g., predicting 19 days when the answer is 18), the model's response is still correct. \n\n" in temporal
    update = anscheck_prompt("knowledge-update", "Q", "A", "R")
    assert "as long as the updated answer is the required answer.\n\nQuestion: Q\n\nCorrect Answer: A" in update
    pref = anscheck_prompt("single-session-preference", "Q", "A", "R")
    assert "\n\nQuestion: Q\n\nRubric: A\n\nModel Response: R\n\n" in pref
    with pytest.raises(InvalidArgument, match="no-such-type"):
        anscheck_prompt("no-such-type", "Q", "A", "R")
    # Upstream reads any "yes" in the judge's reply as a pass.
    assert judge_label("Yes.") and judge_label("yes, it is") and not judge_label("No")


def test_exact_and_contains_matches() -> None:
    assert exact_match("Biscuit", "biscuit.")
    assert not exact_match("Biscuit", "Her name is Biscuit.")
    assert contains_match("Biscuit", "Her name is Biscuit.")
    assert contains_match(3, "You have 3 cats")
    assert not contains_match("Porto", "You live in Lisbon.")


async def test_sessions_land_on_their_dates_and_question_is_judged(tmp_path: Path) -> None:
    sc = _load("lme_tiny_ssu_1")
    ctx = DoubleGradeContext(tmp_path / "ws", judge_answers=["Yes."])
    ctx.workspace.mkdir()

    def agent(prompt: DeliverPrompt) -> str:
        return "Your cat is called Biscuit."

    sched, log = await drive(sc, ctx, agent)
    assert log.stopped and not sched.pending()

    starts = [(ns, eid) for ns, c, eid in log.controls if c.action == "start"]
    assert [_utc(ns) for ns, _ in starts] == [
        dt.datetime(2023, 5, 20, 2, 21, tzinfo=dt.UTC),
        dt.datetime(2023, 5, 22, 14, 3, tzinfo=dt.UTC),
        dt.datetime(2023, 5, 25, 9, 40, tzinfo=dt.UTC),
        dt.datetime(2023, 5, 30, 18, 5, tzinfo=dt.UTC),
    ]
    # Stopped after each session, restarted before the next; nights between dates consolidate.
    actions = [c.action for _, c, _ in log.controls]
    assert actions == [
        "start", "stop", "consolidate",
        "start", "stop", "consolidate",
        "start", "stop", "consolidate",
        "start", "stop",
    ]  # fmt: skip
    nights = [_utc(ns) for ns, c, _ in log.controls if c.action == "consolidate"]
    assert nights[0] == dt.datetime(2023, 5, 21, 2, 0, tzinfo=dt.UTC)

    # User turns in order, each in its own session on its date; then the question.
    delivered = [(p.session, p.round_id, p.text) for _, p in log.prompts]
    assert delivered == [
        ("tiny_s1_garden", "lme_tiny_ssu_1/s0/t0", "Which herbs grow well on a sunny balcony?"),
        (
            "tiny_s1_cat",
            "lme_tiny_ssu_1/s1/t0",
            "I adopted a grey cat named Biscuit from the shelter yesterday. What should I feed her?",
        ),
        ("tiny_s1_cat", "lme_tiny_ssu_1/s1/t1", "How often should she see a vet?"),
        ("tiny_s1_recipe", "lme_tiny_ssu_1/s2/t0", "Give me a quick recipe for lentil soup."),
        ("lme_tiny_ssu_1:question", "lme_tiny_ssu_1", "What is the name of the cat I adopted?"),
    ]
    # The second turn of a session waits for the first turn's end.
    (t0_ns, _), (t1_ns, _) = log.prompts[1], log.prompts[2]
    assert t1_ns - t0_ns == 45 * _NS

    verdict = log.verdicts["lme_tiny_ssu_1"]
    assert verdict.graded and verdict.score == 1.0
    assert verdict.details["judge"] == "yes"
    assert verdict.details["contains_answer"] is True and verdict.details["exact_match"] is False
    assert ctx.judge_prompts == [
        anscheck_prompt(
            "single-session-user",
            "What is the name of the cat I adopted?",
            "Biscuit",
            "Your cat is called Biscuit.",
        )
    ]


async def test_abstention_item_uses_the_abstention_prompt(tmp_path: Path) -> None:
    sc = _load("lme_tiny_tr_3_abs", consolidate_at=None)
    ctx = DoubleGradeContext(tmp_path / "ws", judge_answers=["no"])
    ctx.workspace.mkdir()
    ctx.replies["lme_tiny_tr_3_abs"] = "12 days."
    verdict = await sc.grade(Grade("lme_tiny_tr_3_abs"), ctx)
    assert verdict.score == 0.0 and verdict.details["abstention"] is True
    assert ctx.judge_prompts[0].startswith("I will give you an unanswerable question")
    # No answer at all is a zero without asking the judge.
    ctx.replies.clear()
    assert (await sc.grade(Grade("lme_tiny_tr_3_abs"), ctx)).score == 0.0
    assert len(ctx.judge_prompts) == 1


def test_attach_mode_carries_the_recorded_assistant_reply() -> None:
    sc = _load("lme_tiny_ku_2", assistant_turns="attach")
    first = sc.item.sessions[0].turns[0]
    assert first == (
        "I live in Lisbon and want a weekend hike nearby. Any ideas?\n\n"
        "[Recorded assistant reply in the original conversation]\n"
        "Sintra's trails are close to Lisbon and very scenic."
    )
    plain = _load("lme_tiny_ku_2")
    assert plain.item.sessions[0].turns == ("I live in Lisbon and want a weekend hike nearby. Any ideas?",)


# -- corrupted data: an error naming the file and the field, never a traceback ------------

_TINY_FILE = Path(__file__).resolve().parents[2] / "adapters" / "longmemeval" / "scenarios" / "tiny.json"


@pytest.mark.parametrize(
    ("edit", "message", "field"),
    [
        (lambda items: items.__setitem__(0, "an item"), r"longmemeval_s.json, item 0: must be an object", None),
        (
            lambda items: items[1].pop("question_id"),
            r"longmemeval_s.json, item 1: question_id must be a string or an integer, got missing",
            "question_id",
        ),
        (
            lambda items: items[1].__setitem__("question_date", "-1"),
            r"item 1 \(lme_tiny_ku_2\), question_date '-1' is not in the upstream format",
            None,
        ),
        (
            lambda items: items[1].__setitem__("question_date", 7),
            r"item 1 \(lme_tiny_ku_2\): question_date must be a string, got an integer",
            "question_date",
        ),
        (
            lambda items: items[1].__setitem__("haystack_sessions", "none"),
            r"haystack_sessions must be a list",
            "haystack_sessions",
        ),
        (
            lambda items: items[1]["haystack_sessions"].__setitem__(0, [1, 2]),
            r"haystack_sessions\[0\] must be a list of turns",
            "haystack_sessions",
        ),
        (
            lambda items: items[1]["haystack_dates"].__setitem__(0, 20230520),
            r"haystack_dates\[0\] must be a string",
            "haystack_dates",
        ),
        (
            lambda items: items[1]["haystack_dates"].__setitem__(0, "May 20"),
            r"longmemeval_s.json, item 1 \(lme_tiny_ku_2\), haystack_dates\[0\] 'May 20'",
            None,
        ),
        (lambda items: items[1]["haystack_session_ids"].pop(), r"differ in length", "haystack_sessions"),
        (
            lambda items: items[1].__setitem__("question_id", "renamed"),
            r"subset names question_ids not in .*longmemeval_s.json",
            "subset",
        ),
    ],
)
def test_corrupted_items_name_the_file_and_the_field(
    tmp_path: Path, edit: object, message: str, field: str | None
) -> None:
    # Before: AttributeError ('str' object has no attribute 'get'), TypeError, or an
    # InvalidArgument that named no file (a bad date, missing fields, an unknown id).
    items = json.loads(_TINY_FILE.read_text())
    assert callable(edit)
    edit(items)
    (tmp_path / "longmemeval_s.json").write_text(json.dumps(items))
    with pytest.raises(InvalidArgument) as bad:
        LongMemEvalBenchmark().load(ScenarioConfig(data_dir=tmp_path, subset=("lme_tiny_ku_2",)))
    assert re.search(message, bad.value.message), bad.value.message
    assert field is None or bad.value.field == field


@pytest.mark.parametrize(
    "data",
    [b"[" * 100_000 + b"]" * 100_000, b"[" + b"9" * 5000 + b"]", b"\xff\xfe[]"],
    ids=["nested", "integer", "utf16"],
)
def test_a_data_file_json_reading_refuses_is_named(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "longmemeval_s.json").write_bytes(data)
    with pytest.raises(InvalidArgument, match=r"longmemeval_s\.json"):
        LongMemEvalBenchmark().load(ScenarioConfig(data_dir=tmp_path, subset=("q",)))
