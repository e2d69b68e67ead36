"""MetaClaw-Bench adapter: loading, the day-by-day event timeline, scoring, grading."""

from __future__ import annotations

import datetime as dt
import gc
import json
import re
import shutil
from pathlib import Path

import pytest

from adapters._base import Capability, ScenarioConfig, Verdict
from adapters.metaclaw import (
    MetaClawBenchmark,
    MetaClawScenario,
    extract_bbox,
    multi_choice_feedback,
    multi_choice_score,
    normalize_answer,
)
from sclated.errors import InvalidArgument, NotFound
from sclated.scheduler import AgentControl, DeliverPrompt, Grade, StopRun
from tests.adapters._doubles import METACLAW_SMALL, DoubleGradeContext, drive

needs_small = pytest.mark.skipif(
    not (METACLAW_SMALL / "all_tests.json").is_file(),
    reason=f"shared MetaClaw data not found at {METACLAW_SMALL} (../shared/data beside the repo)",
)

_NS = 1_000_000_000
_LEFT_OUT = (
    "api_routes.py",
    "prod_config.py",
    "log_handler.py",
    "legacy_config_loader.py",
    "constants.py",
)


def _load_small(**options: object) -> MetaClawScenario:
    return MetaClawBenchmark().load(ScenarioConfig(data_dir=METACLAW_SMALL, options=options))


def _utc(ns: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ns / _NS, tz=dt.UTC)


# -- scoring (upstream formulas on fixed strings) -------------------------------


def test_bbox_extraction_follows_upstream() -> None:
    assert extract_bbox(r"The answer is \bbox{A,C}.") == frozenset({"A", "C"})
    assert extract_bbox(r"\boxed{b}") == frozenset({"B"})
    assert extract_bbox(r"first \bbox{A} then \bbox{B,C}") == frozenset({"A"})  # first match only
    assert extract_bbox(r"\bbox{A and C}") == frozenset({"A", "N", "D", "C"})  # every letter counts
    assert extract_bbox("A and C") is None
    assert extract_bbox(r"\bbox{}") is None
    assert extract_bbox(r"\bbox{1,2}") is None
    assert normalize_answer(["A", "E"]) == frozenset({"A", "E"})
    assert normalize_answer("A, C") == frozenset({"A", "C"})


def test_multi_choice_score_is_one_minus_errors_over_options() -> None:
    correct = {"A", "C", "E"}
    assert multi_choice_score({"A", "C", "E"}, correct, 6) == 1.0
    assert multi_choice_score({"A", "C"}, correct, 6) == pytest.approx(1 - 1 / 6)  # one miss
    assert multi_choice_score({"A", "B", "C", "E"}, correct, 6) == pytest.approx(1 - 1 / 6)  # one extra
    assert multi_choice_score({"B", "D", "F"}, correct, 6) == 0.0
    assert multi_choice_score(None, correct, 6) == 0.0  # no \bbox{} at all
    # Upstream does not clamp: letters outside the options push it below zero.
    assert multi_choice_score({"B", "D", "F", "X", "Y"}, correct, 6) == pytest.approx(1 - 8 / 6)


def test_multi_choice_feedback_texts_match_upstream() -> None:
    fb = {
        "correct": "Right!",
        "options": {"A": "A is right.", "B": "B is wrong.", "C": "C is right."},
    }
    assert multi_choice_feedback({"A", "C"}, {"A", "C"}, fb) == "Right!"
    assert multi_choice_feedback({"A", "B"}, {"A", "C"}, fb) == (
        "You missed option C: C is right.\n"
        "You incorrectly selected option B: B is wrong.\n"
        "Keep this in mind as you continue with the next task."
    )
    assert multi_choice_feedback(set(), {"A"}, fb, format_valid=False).startswith(
        r"Note: your previous response did not include a \bbox{X} answer"
    )


# -- loading the shared small subset ---------------------------------------------------


@needs_small
def test_small_subset_loads_12_weekdays_61_rounds() -> None:
    sc = _load_small()
    assert [d.day for d in sc.days] == [f"day{i:02d}" for i in range(1, 13)]
    kinds = [r.kind for r in sc.rounds]
    assert len(kinds) == 61
    assert kinds.count("file_check") == 36
    assert kinds.count("multi_choice") == 25
    dates = [d.date for d in sc.days]
    assert dates[0] == dt.date(2026, 3, 16)
    assert all(d.weekday() < 5 for d in dates)
    assert dates == sorted(set(dates))
    assert all(d.date_source == "session" for d in sc.days)
    assert _utc(sc.start_ns) == dt.datetime(2026, 3, 16, 9, 0, tzinfo=dt.UTC)


@needs_small
def test_rounds_with_left_out_inputs_are_ungradable() -> None:
    sc = _load_small()
    by_id = {r.round_id: r for r in sc.rounds}
    # Inputs of day 8 are among the files left out of the subset.
    for rid, name in (
        ("day08/r1", "prod_config.py"),
        ("day08/r2", "log_handler.py"),
        ("day08/r4", "log_handler.py"),
    ):
        assert not by_id[rid].gradable
        assert name in by_id[rid].why_ungradable
    # The checker scripts (eval/scripts/) are left out too, and most commands call them.
    assert "scripts/check_iso8601.py" in by_id["day01/r1"].why_ungradable
    # A command that needs nothing missing stays gradable; multi_choice rounds always are.
    assert by_id["day01/r5"].gradable
    assert all(r.gradable for r in sc.rounds if r.kind == "multi_choice")
    for r in sc.rounds:
        if not r.gradable:
            assert "scripts/" in r.why_ungradable or any(n in r.why_ungradable for n in _LEFT_OUT)


@needs_small
def test_upstream_checker_scripts_make_rounds_gradable(tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name in (
        "check_backup.py",
        "check_done_log.py",
        "check_filename.py",
        "check_iso8601.py",
        "check_metadata.py",
    ):
        (scripts / name).write_text("import sys\nsys.exit(0)\n")
    sc = _load_small(scripts_dir=str(scripts), seed_dir=str(tmp_path / "seed"))
    ungradable = sorted(r.round_id for r in sc.rounds if not r.gradable)
    assert ungradable == ["day08/r1", "day08/r2", "day08/r4"]
    # Upstream copies eval/scripts into the workspace as scripts/.
    seed = sc.workspace_seed()
    assert seed is not None
    assert (seed / "scripts" / "check_iso8601.py").is_file()


@needs_small
def test_workspace_seeds_follow_upstream_layering(tmp_path: Path) -> None:
    sc = _load_small(seed_dir=str(tmp_path / "seed"))
    seed = sc.workspace_seed()
    assert seed is not None
    names = sorted(p.name for p in seed.iterdir())
    assert names == ["AGENTS.md", "IDENTITY.md", "SOUL.md", "TOOLS.md", "USER.md"]
    day3 = sc.day_workspace("day03")
    assert day3 is not None
    assert [p.name for p in day3.iterdir()] == ["day03"]  # only that day's folder
    assert (day3 / "day03" / "review_raw_notes.txt").is_file()


# -- the timeline on a real scheduler ---------------------------------------------------------


@needs_small
async def test_events_fire_day_by_day_with_rounds_in_order(tmp_path: Path) -> None:
    sc = _load_small(seed_dir=str(tmp_path / "seed"))
    ctx = DoubleGradeContext(tmp_path / "ws")
    ctx.workspace.mkdir()
    sched, log = await drive(sc, ctx, lambda p: r"\bbox{A}")
    assert log.stopped
    assert not sched.pending()

    # Fired in (time, priority, rank, arrival) order, times never decreasing.
    times = [f.fired_ns for f in log.fires]
    assert times == sorted(times)

    # Graded rounds were delivered in upstream order, day by day.
    round_prompts = [p.round_id for _, p in log.prompts if p.round_id and re.match(r"day\d+/r\d+$", p.round_id)]
    assert round_prompts == [r.round_id for r in sc.rounds]

    # Each day: start, opening, rounds, feedback, stop -- then the nightly consolidation.
    controls = [(c.action, eid) for _, c, eid in log.controls]
    expected: list[tuple[str, str]] = []
    for i, day in enumerate(sc.days):
        expected += [("start", f"metaclaw:{day.day}:start"), ("stop", f"metaclaw:{day.day}:stop")]
        if i < len(sc.days) - 1:
            expected.append(("consolidate", f"metaclaw:{day.day}:consolidate"))
    assert controls == expected
    assert all(c.target == "memory" for _, c, _ in log.controls if c.action == "consolidate")

    # Starts at 09:00 UTC on each transcript's date; consolidation at 02:00 the night after.
    starts = {eid: ns for ns, c, eid in log.controls if c.action == "start"}
    for day in sc.days:
        assert _utc(starts[f"metaclaw:{day.day}:start"]) == dt.datetime.combine(day.date, dt.time(9, 0), tzinfo=dt.UTC)
    nights = [ns for ns, c, _ in log.controls if c.action == "consolidate"]
    assert [_utc(n).time() for n in nights] == [dt.time(2, 0)] * 11

    # Every prompt falls inside its own day's session and names the session.
    day_of = {d.day: d for d in sc.days}
    for ns, prompt in log.prompts:
        assert prompt.round_id is not None
        day = day_of[prompt.round_id.split("/")[0]]
        assert _utc(ns).date() == day.date
        assert prompt.session == day.session

    # The first prompt of a day is the transcript's seeded message, 2 minutes after start.
    first = log.prompts[0]
    assert first[1].round_id == "day01/opening1"
    assert first[1].text.startswith("Good morning! Today is Monday, March 16, 2026.")
    assert first[0] - starts["metaclaw:day01:start"] == 120 * _NS

    # A grade follows each round's turn end; StopRun comes last.
    grade_fires = [f for f in log.fires if any(isinstance(e, Grade) for e in f.effects)]
    assert [f.data["round_id"] for f in grade_fires] == [r.round_id for r in sc.rounds]
    assert isinstance(log.fires[-1].effects[0], StopRun)
    assert set(log.verdicts) == {r.round_id for r in sc.rounds}


@needs_small
async def test_feedback_of_previous_round_is_prefixed(tmp_path: Path) -> None:
    sc = MetaClawBenchmark().load(
        ScenarioConfig(data_dir=METACLAW_SMALL, subset=("day01",), options={"seed_dir": str(tmp_path / "seed")})
    )
    ctx = DoubleGradeContext(tmp_path / "ws")
    ctx.workspace.mkdir()
    answers = {"day01/r2": r"\bbox{A,B}", "day01/r4": "I think A and C."}
    _, log = await drive(sc, ctx, lambda p: answers.get(p.round_id or "", "done"))
    texts = {p.round_id: p.text for _, p in log.prompts}
    q = {r.upstream_id: r for r in sc.days[0].rounds}

    # r1 is ungradable (missing checker script): no feedback can be given after it.
    assert texts["day01/r2"] == q["r2"].question
    # After r2 (A,B selected; A,E correct): upstream's per-option lines, then the question.
    opts = q["r2"].feedback["options"]
    assert texts["day01/r3"] == (
        f"[Previous Feedback] You missed option E: {opts['E']}\n"
        f"You incorrectly selected option B: {opts['B']}\n"
        "Keep this in mind as you continue with the next task.\n\n" + q["r3"].question
    )
    # After r4 without a \bbox{}: the format error.
    assert texts["day01/r5"].startswith(r"[Previous Feedback] Note: your previous response did not include a \bbox{X}")
    assert texts["day01/r5"].endswith("\n\n" + q["r5"].question)
    # r5 is the last round: its feedback is sent on its own before the day stops.
    assert texts["day01/feedback"].startswith("[Previous Feedback] ")
    assert q["r5"].feedback["incorrect"] in texts["day01/feedback"]
    assert [c.action for _, c, _ in log.controls] == ["start", "stop"]


@needs_small
async def test_file_check_runs_upstream_command_in_workspace(tmp_path: Path) -> None:
    sc = MetaClawBenchmark().load(
        ScenarioConfig(data_dir=METACLAW_SMALL, subset=("day01",), options={"seed_dir": str(tmp_path / "seed")})
    )
    ws = tmp_path / "ws"
    (ws / "day01").mkdir(parents=True)
    ctx = DoubleGradeContext(ws)
    grade = Grade("day01/r5")

    # Nothing written yet: the upstream command fails, score 0.
    missing = await sc.grade(grade, ctx)
    assert missing.graded and missing.score == 0.0 and missing.details["exit_code"] != 0

    # The stub with every example corrected as the task asks: the command passes.
    spec = json.loads((METACLAW_SMALL / "workspaces/shared/day01/api_spec_stub.json").read_text())
    for param in spec["paths"]["/projects"]["get"]["parameters"]:
        param["example"] = "2026-03-01T00:00:00+08:00"
    example = spec["paths"]["/projects"]["post"]["requestBody"]["content"]["application/json"]["example"]
    example["start_date"] = "2026-03-16T09:00:00+08:00"
    example["deadline"] = "2026-06-30T18:00:00+08:00"
    (ws / "day01" / "api_spec_v2.3.json").write_text(json.dumps(spec))
    passed = await sc.grade(grade, ctx)
    assert passed.graded and passed.score == 1.0 and passed.details["passed"] is True
    assert ctx.commands[-1] == sc.round("day01/r5").eval["command"]

    # An example without the +08:00 offset fails again.
    example["deadline"] = "2026-06-30T18:00:00Z"
    (ws / "day01" / "api_spec_v2.3.json").write_text(json.dumps(spec))
    assert (await sc.grade(grade, ctx)).score == 0.0

    # Ungradable rounds are reported, never run.
    before = len(ctx.commands)
    verdict = await sc.grade(Grade("day01/r1"), ctx)
    assert verdict == Verdict("day01/r1", None, False, reason=sc.round("day01/r1").why_ungradable)
    assert len(ctx.commands) == before


@needs_small
def test_unknown_subset_day_is_rejected() -> None:
    with pytest.raises(InvalidArgument, match="day99"):
        MetaClawBenchmark().load(ScenarioConfig(data_dir=METACLAW_SMALL, subset=("day99",)))


@needs_small
async def test_subset_keeps_upstream_dates(tmp_path: Path) -> None:
    sc = MetaClawBenchmark().load(
        ScenarioConfig(data_dir=METACLAW_SMALL, subset=("day03", "day05"), options={"seed_dir": str(tmp_path)})
    )
    assert [d.date for d in sc.days] == [dt.date(2026, 3, 23), dt.date(2026, 3, 30)]
    assert len(sc.rounds) == 10


# -- the project's own tiny scenario ----------------------------------------------------------


async def test_tiny_scenario_scores_a_harness_that_writes_files(tmp_path: Path) -> None:
    bench = MetaClawBenchmark()
    assert "tiny" in bench.info.builtin_scenarios
    sc = bench.load(ScenarioConfig(scenario="tiny", options={"seed_dir": str(tmp_path / "seed")}))
    assert [d.date.strftime("%a") for d in sc.days] == ["Thu", "Fri", "Mon"]
    assert [r.kind for r in sc.rounds].count("file_check") == 3
    assert all(r.gradable for r in sc.rounds)

    ws = tmp_path / "ws"
    ws.mkdir()
    seed = sc.workspace_seed()
    assert seed is not None
    shutil.copytree(seed, ws, dirs_exist_ok=True)
    ctx = DoubleGradeContext(ws)

    def agent(prompt: DeliverPrompt) -> str:
        # A fake harness: copies each day's seed in when asked about it and writes what is asked.
        rid = prompt.round_id or ""
        day = rid.split("/")[0]
        seed_day = sc.day_workspace(day)
        if seed_day is not None:
            shutil.copytree(seed_day, ws, dirs_exist_ok=True)
        if rid == "day01/r1":
            (ws / "notes").mkdir(exist_ok=True)
            (ws / "notes" / "todo.md").write_text("- buy milk\n")
        if rid == "day03/r1":
            (ws / "notes" / "status.md").write_text("all good\n")  # wrong word: fails
        return {"day01/r2": r"\bbox{A,C}", "day02/r2": r"\bbox{A}", "day03/r2": r"\bbox{A}"}.get(rid, "ok")

    _, log = await drive(sc, ctx, agent)
    scores = {rid: v.score for rid, v in log.verdicts.items()}
    assert scores == {
        "day01/r1": 1.0,
        "day01/r2": 1.0,
        "day02/r1": 0.0,
        "day02/r2": pytest.approx(0.75),
        "day03/r1": 0.0,
        "day03/r2": 1.0,
    }
    # The start event tells the executor which folder to copy in that morning.
    starts = [f for f in log.fires if f.event_id.endswith(":start")]
    assert [Path(f.data["workspace_seed"]).name for f in starts] == ["day01", "day02", "day03"]
    assert all(f.data["workspace_dest"] == "/workspace" for f in starts)
    assert isinstance(starts[0].effects[0], AgentControl)


def test_seeds_laid_out_in_a_temporary_directory_go_with_the_scenario(tmp_path: Path) -> None:
    sc = MetaClawBenchmark().load(ScenarioConfig(scenario="tiny"))
    seed = sc.workspace_seed()
    assert seed is not None and (seed / "AGENTS.md").is_file()
    root = seed.parent
    del sc, seed
    gc.collect()
    assert not root.exists()
    # A seed_dir the caller gave is the caller's: kept.
    given = tmp_path / "seed"
    kept = MetaClawBenchmark().load(ScenarioConfig(scenario="tiny", options={"seed_dir": str(given)}))
    assert kept.workspace_seed() is not None
    del kept
    gc.collect()
    assert (given / "common" / "AGENTS.md").is_file()


# -- upstream's protocol (an agent that takes seeded sessions: OpenClaw) ---------------------


def test_protocol_follows_what_the_agent_declares() -> None:
    bench = MetaClawBenchmark()
    seeded = frozenset({Capability.SEEDED_SESSIONS, Capability.WORKSPACE})
    assert bench.load(ScenarioConfig(scenario="tiny")).timeline.protocol == "continual"
    up = bench.load(ScenarioConfig(scenario="tiny", agent_capabilities=seeded))
    assert up.timeline.protocol == "upstream" and not up.timeline.openings
    assert up.timeline.consolidate_at is None  # upstream has no nightly consolidation
    assert Capability.SEEDED_SESSIONS in up.requires
    # Asked for explicitly, either way.
    forced = bench.load(ScenarioConfig(scenario="tiny", options={"protocol": "continual"}, agent_capabilities=seeded))
    assert forced.timeline.protocol == "continual" and forced.timeline.openings
    with pytest.raises(InvalidArgument, match="protocol"):
        bench.load(ScenarioConfig(scenario="tiny", options={"protocol": "exact"}))
    with pytest.raises(InvalidArgument, match="openings"):
        bench.load(ScenarioConfig(scenario="tiny", options={"protocol": "upstream", "openings": True}))


async def test_upstream_days_seed_their_session_and_start_from_a_fresh_workspace(tmp_path: Path) -> None:
    sc = MetaClawBenchmark().load(
        ScenarioConfig(scenario="tiny", options={"protocol": "upstream", "seed_dir": str(tmp_path / "seed")})
    )
    ctx = DoubleGradeContext(tmp_path / "ws")
    ctx.workspace.mkdir()
    _, log = await drive(sc, ctx, lambda p: r"\bbox{A}")
    assert log.stopped
    # No seeded message is delivered as a turn: it is the session's history.
    assert not [p for _, p in log.prompts if p.round_id and "opening" in p.round_id]
    starts = [f for f in log.fires if any(isinstance(e, AgentControl) and e.action == "start" for e in f.effects)]
    assert [f.data["day"] for f in starts] == ["day01", "day02", "day03"]
    assert not [
        f for f in log.fires if any(isinstance(e, AgentControl) and e.action == "consolidate" for e in f.effects)
    ]
    for fire, day in zip(starts, sc.days, strict=True):
        assert fire.data["workspace_fresh"] is True
        seed = fire.data["session_seed"]
        assert seed["session_id"] == day.session and seed["agent"] == "tiny_agent"
        assert Path(seed["transcript"]).is_file() and Path(seed["transcript"]).name == f"{day.session}.jsonl"
        assert Path(seed["harness_config"]).name == "openclaw.json"
        # The fresh workspace of a day: the persona files and that day's folder only.
        fresh = Path(fire.data["workspace_seed"])
        names = sorted(p.name for p in fresh.iterdir())
        assert day.day in names and not [n for n in names if n.startswith("day") and n != day.day]
        assert "AGENTS.md" in names
    # Prompts still name the day's (seeded) session.
    assert {p.session for _, p in log.prompts} == {d.session for d in sc.days}


def test_the_first_round_waits_for_the_agents_session_to_be_ready() -> None:
    """A seeded session takes a harness tens of seconds to set up: the day's first
    prompt fires once the run records ``session_started``, not when the start fires."""
    from sclated.scheduler import Scheduler

    sc = MetaClawBenchmark().load(ScenarioConfig(scenario="tiny", subset=("day01",), options={"protocol": "upstream"}))
    sched = Scheduler(start_ns=sc.start_ns, sources=sc.sources())
    start = sched.pop_due(sc.start_ns)
    assert start is not None and start.event_id == "metaclaw:day01:start"
    sched.advance(sc.start_ns + 30 * _NS)
    assert sched.pop_due(sched.now_ns) is None  # started, session not ready: nothing to deliver
    sched.apply_action("agent", "session_started", {"event_id": "metaclaw:day01:start"})
    first = sched.pop_due(sched.now_ns)
    assert first is not None and first.event_id == "metaclaw:day01:r1:prompt"


# -- corrupted data: an error naming the file and the field, never a traceback ------------

_TINY = Path(__file__).resolve().parents[2] / "adapters" / "metaclaw" / "scenarios" / "tiny"
_TRANSCRIPT = "openclaw_state/agents/tiny_agent/sessions/day01_5d0c1a52-3f0e-4c1e-9f5a-0b6f2a9e7c01.jsonl"


def _corrupt(tmp_path: Path, rel: str, edit: object) -> Path:
    root = tmp_path / "data"
    shutil.copytree(_TINY, root)
    path = root / rel
    if callable(edit):
        doc = json.loads(path.read_text())
        edit(doc)
        path.write_text(json.dumps(doc))
    else:
        assert isinstance(edit, bytes)
        path.write_bytes(edit)
    return root


@pytest.mark.parametrize(
    ("rel", "edit", "message", "field"),
    [
        (
            "all_tests.json",
            lambda d: d["test"].__setitem__(1, "day02"),
            r"all_tests.json, test\[1\] must be an object",
            "test",
        ),
        ("all_tests.json", lambda d: d["test"][0].pop("id"), r"all_tests.json, test\[0\]: id must be", "id"),
        (
            "all_tests.json",
            lambda d: d["test"][0].__setitem__("session", "x" * 300),
            r"test\[0\]: session 'x+' is not a file name",
            "session",
        ),
        (
            "all_tests.json",
            lambda d: d["test"][0].__setitem__("agent", {"a": 1}),
            r"test\[0\]: agent must be a string, got an object",
            "agent",
        ),
        (
            "all_tests.json",
            lambda d: d["test"][1].__setitem__("eval", "day09"),
            r"test\[1\] \(day02\): eval 'day09' has no .*day09/questions.json",
            "eval",
        ),
        (
            "all_tests.json",
            lambda d: d.__setitem__("eval_dir", ["eval"]),
            r"all_tests.json: eval_dir must be a string, got a list",
            "eval_dir",
        ),
        (
            "all_tests.json",
            lambda d: d["test"][0].__setitem__("session", "nope"),
            r"all_tests.json, test\[0\] \(day01\): no session transcript .*nope.jsonl",
            "session",
        ),
        (
            "eval/day01/questions.json",
            lambda d: d["rounds"].__setitem__(1, 7),
            r"questions.json, rounds\[1\] must be an object",
            "rounds",
        ),
        (
            "eval/day01/questions.json",
            lambda d: d["rounds"][0].pop("question"),
            r"questions.json, rounds\[0\]: question must be a string, got missing",
            "question",
        ),
        (
            "eval/day01/questions.json",
            lambda d: d["rounds"][0].__setitem__("eval", [1]),
            r"rounds\[0\]: eval must be an object, got a list",
            "eval",
        ),
        (
            "eval/day02/questions.json",
            lambda d: d.__setitem__("rounds", "r1"),
            r"day02/questions.json: rounds must be a list",
            "rounds",
        ),
        ("eval/day01/questions.json", b"\xff\xfe{}", r"day01/questions.json is not UTF-8 text", None),
        (
            "eval/day01/questions.json",
            b"[" * 100_000 + b"]" * 100_000,
            r"day01/questions.json is not JSON this reader takes: line 1",
            None,
        ),
        (
            "eval/day01/questions.json",
            b'{"rounds": [{"id": ' + b"9" * 5000 + b"}]}",
            r"an integer of more than 4300 digits",
            None,
        ),
        (_TRANSCRIPT, b'{"type": "session"}\n{not json\n', r"day01_.*\.jsonl line 2 is not valid JSON", None),
        (
            _TRANSCRIPT,
            b'{"type": "session"}\n[1, 2]\n',
            r"day01_.*\.jsonl line 2: a transcript line must be a JSON object",
            None,
        ),
        (
            _TRANSCRIPT,
            b'{"type": "message", "timestamp": "2026-03-16T09:00:00Z", "message": {"role": "user", "content": 5}}\n',
            r"line 1: message.content must be text or a list",
            "content",
        ),
        (_TRANSCRIPT, b"\x00\xff", r"day01_.*\.jsonl is not UTF-8 text", None),
    ],
)
def test_corrupted_data_names_the_file_and_the_field(
    tmp_path: Path, rel: str, edit: object, message: str, field: str | None
) -> None:
    # Before: KeyError, AttributeError, TypeError, RecursionError, ValueError,
    # JSONDecodeError, UnicodeDecodeError or OSError (a session name too long for a
    # path) escaped CreateRun as an internal error, or the message named no file.
    root = _corrupt(tmp_path, rel, edit)
    with pytest.raises((InvalidArgument, NotFound)) as bad:
        MetaClawBenchmark().load(ScenarioConfig(data_dir=root))
    assert re.search(message, bad.value.message), bad.value.message
    assert field is None or bad.value.field == field


def test_an_eval_dir_too_long_to_be_a_path_is_not_there(tmp_path: Path) -> None:
    root = _corrupt(tmp_path, "all_tests.json", lambda d: d.__setitem__("eval_dir", "x" * 100_000))
    assert len(MetaClawBenchmark().load(ScenarioConfig(data_dir=root)).rounds) == len(
        MetaClawBenchmark().load(ScenarioConfig(scenario="tiny")).rounds
    )
