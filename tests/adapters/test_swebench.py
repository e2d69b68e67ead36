"""The SWE-bench adapter without Docker: rows, the arc's days, eval scripts, and
swebench's own grading (its real package, in its own environment) on made logs."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from adapters import ScenarioConfig, TaskContainer
from adapters.swebench import (
    GraderProcess,
    SWEBenchmark,
    SWEEnvironment,
    candidate_images,
    make_eval_script,
    patch_files,
    read_instances,
    working_slots,
)
from adapters.swebench._instances import parse_instance, pick
from sclated.errors import FailedPrecondition, InvalidArgument, NotFound

TEST_PATCH = """diff --git a/tests/test_calc.py b/tests/test_calc.py
--- a/tests/test_calc.py
+++ b/tests/test_calc.py
@@ -1,2 +1,4 @@
 def test_add():
     assert 1 + 1 == 2
+def test_mean():
+    assert 2 == 2
diff --git a/tests/test_new.py b/tests/test_new.py
new file mode 100644
--- /dev/null
+++ b/tests/test_new.py
@@ -0,0 +1,2 @@
+def test_pair():
+    assert True
"""


def row(iid: str = "acme__calc-1", repo: str = "acme/calc", created: str = "2026-03-02T10:00:00Z") -> dict[str, Any]:
    return {
        "instance_id": iid,
        "repo": repo,
        "base_commit": "a" * 40,
        "patch": "diff --git a/calc.py b/calc.py\n",
        "test_patch": TEST_PATCH,
        "problem_statement": "mean() is wrong",
        "hints_text": "",
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_mean"]),
        "PASS_TO_PASS": ["tests/test_calc.py::test_add"],
        "version": "0.1",
        "created_at": created,
        "environment_setup_commit": "a" * 40,
    }


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_rows_read_with_json_string_and_list_test_ids(tmp_path: Path) -> None:
    (inst,) = read_instances(write_jsonl(tmp_path / "d.jsonl", [row()]))
    assert inst.fail_to_pass == ("tests/test_calc.py::test_mean",)
    assert inst.pass_to_pass == ("tests/test_calc.py::test_add",)
    assert inst.created_at == dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)
    assert inst.repo_name == "calc"


@pytest.mark.parametrize(
    ("mutate", "names"),
    [
        (lambda r: r.pop("base_commit"), "missing field(s) base_commit"),
        (lambda r: r.update(FAIL_TO_PASS="not json"), "FAIL_TO_PASS is a string but not a JSON list"),
        (lambda r: r.update(PASS_TO_PASS=[1, 2]), "PASS_TO_PASS must be a list of test ids"),
        (lambda r: r.update(created_at="yesterday"), "created_at 'yesterday' is not an ISO date-time"),
        (lambda r: r.update(repo="calc"), "repo 'calc' is not owner/name"),
        (lambda r: r.update(test_patch="nope"), "test_patch is not a git diff"),
        (lambda r: r.update(image=3), "image must be a string"),
    ],
)
def test_a_bad_row_names_the_file_line_and_field(tmp_path: Path, mutate: Any, names: str) -> None:
    bad = row("acme__calc-2")
    mutate(bad)
    path = write_jsonl(tmp_path / "d.jsonl", [row(), bad])
    with pytest.raises(InvalidArgument) as err:
        read_instances(path)
    assert "d.jsonl line 2" in err.value.message and names in err.value.message


def test_bad_files_are_named(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_text('{"instance_id": 1\n')
    with pytest.raises(InvalidArgument, match=r"x\.jsonl line 1 is not valid JSON"):
        read_instances(tmp_path / "x.jsonl")
    (tmp_path / "y.json").write_text('{"a": 1}')
    with pytest.raises(InvalidArgument, match="must be a JSON list"):
        read_instances(tmp_path / "y.json")
    with pytest.raises(NotFound, match="does not exist"):
        read_instances(tmp_path / "none.json")
    write_jsonl(tmp_path / "dup.jsonl", [row(), row()])
    with pytest.raises(InvalidArgument, match="appears twice"):
        read_instances(tmp_path / "dup.jsonl")


def test_a_run_is_one_repository_oldest_first(tmp_path: Path) -> None:
    rows = [
        row("acme__calc-2", created="2026-03-09T10:00:00Z"),
        row("acme__calc-1", created="2026-03-02T10:00:00Z"),
        row("other__lib-1", repo="other/lib"),
    ]
    insts = read_instances(write_jsonl(tmp_path / "d.jsonl", rows))
    with pytest.raises(InvalidArgument, match=r"spans acme/calc \(2\), other/lib \(1\)"):
        pick(insts, (), None)
    assert [i.instance_id for i in pick(insts, (), "acme/calc")] == ["acme__calc-1", "acme__calc-2"]
    assert [i.instance_id for i in pick(insts, ("other__lib-1",), None)] == ["other__lib-1"]
    with pytest.raises(InvalidArgument, match="unknown instance ids"):
        pick(insts, ("nope",), None)
    with pytest.raises(InvalidArgument, match="no instance of repo"):
        pick(insts, (), "x/y")


def test_working_days_skip_weekends_a_few_per_day() -> None:
    friday = dt.date(2026, 3, 6)
    slots = working_slots(friday, 5, per_day=2, spacing_h=4)
    assert [s.strftime("%a %H:%M") for s in slots] == [
        "Fri 09:00", "Fri 13:00", "Mon 09:00", "Mon 13:00", "Tue 09:00",
    ]  # fmt: skip
    assert working_slots(dt.date(2026, 3, 7), 1, per_day=1, spacing_h=0)[0].date() == dt.date(2026, 3, 9)


def test_options_are_checked(tmp_path: Path) -> None:
    bench = SWEBenchmark("swebench")
    path = write_jsonl(tmp_path / "d.jsonl", [row()])
    with pytest.raises(InvalidArgument, match="unknown swebench option"):
        bench.load(ScenarioConfig(data_dir=path, options={"nope": 1}))
    with pytest.raises(InvalidArgument, match=r"per_day=0.0|per_day=0"):
        bench.load(ScenarioConfig(data_dir=path, options={"per_day": 0}))
    with pytest.raises(InvalidArgument, match="hints='maybe' is not true or false"):
        bench.load(ScenarioConfig(data_dir=path, options={"hints": "maybe"}))
    (tmp_path / "images.txt").write_text("[1]")
    with pytest.raises(InvalidArgument, match="instance id -> image"):
        bench.load(ScenarioConfig(data_dir=path, options={"images": str(tmp_path / "images.txt")}))
    with pytest.raises(NotFound, match="no swebench scenario 'x'"):
        bench.load(ScenarioConfig(scenario="x"))
    scenario = bench.load(ScenarioConfig(data_dir=tmp_path))
    assert [r.round_id for r in scenario.rounds] == ["acme__calc-1"]
    assert scenario.rounds[0].day == "2026-03-02"


def test_image_names_tried_are_upstreams() -> None:
    inst = parse_instance(row("Django__django-11099"), "t")
    assert candidate_images(inst) == [
        "sweb.eval.x86_64.django__django-11099:latest",
        "swebench/sweb.eval.x86_64.django_1776_django-11099:latest",
        "xingyaoww/sweb.eval.x86_64.django_s_django-11099:latest",
    ]


class NoImagesDouble:
    """A test double of TaskContainers: an engine with no images at all."""

    async def image_exists(self, ref: str) -> bool:
        return False

    async def image_label(self, ref: str, key: str) -> str | None:
        return None

    async def build_image(
        self, ref: str, dockerfile: str, *, base_recipe: str, labels: Mapping[str, str] | None = None
    ) -> None:
        raise AssertionError("nothing to build for an upstream instance")

    async def open(self, image: str, *, purpose: str) -> TaskContainer:
        raise AssertionError("no image, no container")


async def test_a_missing_environment_names_the_instance_and_what_to_provide(tmp_path: Path) -> None:
    env = SWEEnvironment([parse_instance(row(), "t")])
    with pytest.raises(FailedPrecondition) as err:
        await env.open(tmp_path, NoImagesDouble())
    msg = err.value.message
    assert "instance acme__calc-1 has no environment image" in msg
    assert "sweb.eval.x86_64.acme__calc-1:latest" in msg and "images=FILE" in msg
    mapped = SWEEnvironment([parse_instance(row(), "t")], image_map={"acme__calc-1": "mine:1"})
    with pytest.raises(FailedPrecondition, match="the image map names mine:1, which is not on this engine"):
        await mapped.open(tmp_path, NoImagesDouble())


def test_patch_files_tell_modified_from_created() -> None:
    assert patch_files(TEST_PATCH) == (["tests/test_calc.py"], ["tests/test_new.py"])


def test_the_made_eval_script_is_upstreams_shape_and_valid_bash(tmp_path: Path) -> None:
    inst = parse_instance(row(), "t")
    script = make_eval_script(inst, "pytest -rA")
    lines = script.splitlines()
    end = lines.index(": '>>>>> End Test Output'")
    # swebench records the exit code of the line just before the end marker.
    assert lines[end - 1] == "pytest -rA tests/test_calc.py tests/test_new.py"
    assert f"git checkout {'a' * 40} tests/test_calc.py" in lines
    assert "rm -f tests/test_new.py" in lines
    assert "Patch Apply Failed" in script
    (tmp_path / "eval.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "eval.sh")]).returncode == 0


LOG_OK = (
    "+ : '>>>>> Start Test Output'\n+ pytest -rA tests/test_calc.py\n"
    "PASSED tests/test_calc.py::test_add\nPASSED tests/test_calc.py::test_mean\n"
    "+ : '>>>>> End Test Output'\n>>>>> Test Exit Code: 0\n"
)


@pytest.fixture(scope="module")
def grader() -> GraderProcess:
    return GraderProcess()


def graded_row() -> dict[str, Any]:
    r = row()
    r.update(
        image="x:1",
        log_parser="parse_log_pytest",
        eval_type="pass_and_fail",
        eval_script=make_eval_script(parse_instance(row(), "t"), "pytest -rA"),
    )
    return r


async def test_swebench_makes_the_spec_and_grades_a_passing_log(grader: GraderProcess, tmp_path: Path) -> None:
    scripts, commands, version = await grader.specs([graded_row()])
    assert version == "5.0.2"
    assert commands[0] == "git apply --verbose" and commands[-1].startswith("patch --batch")
    assert "SWEBENCH_TEST_EXIT_CODE=$?" in scripts["acme__calc-1"]
    (tmp_path / "ok.txt").write_text(LOG_OK)
    report, _ = await grader.report(graded_row(), "diff --git a/x b/x\n", tmp_path / "ok.txt")
    assert report["resolved"] is True
    assert report["tests_status"]["FAIL_TO_PASS"]["success"] == ["tests/test_calc.py::test_mean"]


@pytest.mark.parametrize(
    ("log", "why"),
    [
        (LOG_OK.replace("PASSED tests/test_calc.py::test_mean", "FAILED tests/test_calc.py::test_mean"), "f2p fails"),
        (LOG_OK.replace("PASSED tests/test_calc.py::test_mean", "SKIPPED tests/test_calc.py::test_mean"), "skipped"),
        (LOG_OK.replace("Exit Code: 0", "Exit Code: 1"), "passes printed, tests failed"),
        (">>>>> Patch Apply Failed\n", "patch did not apply"),
        (LOG_OK.replace("+ : '>>>>> End Test Output'\n", ""), "no end marker"),
    ],
)
async def test_swebench_refuses_what_upstream_refuses(
    grader: GraderProcess, tmp_path: Path, log: str, why: str
) -> None:
    (tmp_path / "log.txt").write_text(log)
    report, _ = await grader.report(graded_row(), "diff --git a/x b/x\n", tmp_path / "log.txt")
    assert report["resolved"] is False, why


async def test_a_broken_grader_environment_is_named(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'No module named swebench' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(FailedPrecondition, match="swebench's grader failed on 'specs': No module named swebench"):
        await GraderProcess(fake).specs([graded_row()])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", r"d\.jsonl has no instances"),
        (
            b'{"instance_id": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
            r"d\.jsonl line 1 is not JSON this reader takes: .*nested",
        ),
        (b'{"created_at": ' + b"9" * 5000 + b"}\n", r"d\.jsonl line 1 is not JSON this reader takes: .*4300 digits"),
        (b"\xff\xfe{}", r"d\.jsonl is not UTF-8 text"),
    ],
    ids=["empty", "nested", "huge-integer", "utf16"],
)
def test_a_data_file_json_reading_refuses_is_named(tmp_path: Path, data: bytes, message: str) -> None:
    # Before: RecursionError and ValueError escaped; an empty file passed and the
    # run was refused later for "no instance of repo", naming no file.
    (tmp_path / "d.jsonl").write_bytes(data)
    with pytest.raises(InvalidArgument, match=message):
        read_instances(tmp_path / "d.jsonl")


def test_a_data_file_that_is_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").mkdir()
    with pytest.raises(InvalidArgument, match=r"d\.jsonl is a directory"):
        read_instances(tmp_path / "d.jsonl")


@pytest.mark.parametrize(
    ("mutate", "names"),
    [
        (lambda r: r.update(created_at=1e300), "created_at 1e+300 is not a time in epoch milliseconds"),
        (lambda r: r.update(FAIL_TO_PASS="[" * 100_000), "FAIL_TO_PASS is a string but not a JSON list"),
    ],
)
def test_values_past_what_python_reads_name_the_line_and_field(tmp_path: Path, mutate: Any, names: str) -> None:
    # Before: OverflowError and RecursionError.
    bad = row("acme__calc-2")
    mutate(bad)
    with pytest.raises(InvalidArgument) as err:
        read_instances(write_jsonl(tmp_path / "d.jsonl", [row(), bad]))
    assert "d.jsonl line 2" in err.value.message and names in err.value.message
