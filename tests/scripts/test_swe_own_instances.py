"""The project's own SWE-bench instances (adapters/swebench/own): regenerating them gives the
committed files, and every row is a well-formed SWE-bench Verified (5.x) row. Needs git, not
Docker or swebench; the gold/empty grading in images is tests/e2e/test_swebench.py's."""

from __future__ import annotations

import datetime as dt
import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
OWN = ROOT / "adapters" / "swebench" / "own"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("swe_own_instances", ROOT / "scripts" / "swe_own_instances.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("own")
    SCRIPT.generate(out, tmp_path_factory.mktemp("build"))
    return out


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (OWN / "instances.jsonl").read_text(encoding="utf-8").splitlines()]


def _when(iso: str) -> dt.datetime:
    return dt.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ")


def _files(patch: str) -> list[str]:
    files: list[str] = SCRIPT.patch_files(patch)
    return files


def test_regenerating_gives_the_committed_instances_and_commits(regenerated: Path) -> None:
    assert (regenerated / "instances.jsonl").read_bytes() == (OWN / "instances.jsonl").read_bytes()
    committed = sorted(p.name for p in (OWN / "repos").glob("*.bundle"))
    assert sorted(p.name for p in (regenerated / "repos").glob("*.bundle")) == committed
    for name in committed:
        # The commit ids; the pack's bytes may differ with another git or zlib.
        assert SCRIPT.bundle_heads(regenerated / "repos" / name) == SCRIPT.bundle_heads(OWN / "repos" / name)


def test_every_row_has_verifieds_columns_and_types(rows: list[dict[str, Any]]) -> None:
    assert len(rows) >= 6
    assert len({r["repo"] for r in rows}) >= 3
    assert rows == sorted(rows, key=lambda r: (r["repo"], r["created_at"]))
    assert len({r["instance_id"] for r in rows}) == len(rows)
    for row in rows:
        assert tuple(row) == SCRIPT.COLUMNS, row["instance_id"]
        assert all(isinstance(v, str) for v in row.values()), row["instance_id"]
        owner, name = row["repo"].split("/")
        assert owner == "sclate"
        assert (OWN / "repos" / f"{name}.bundle").is_file()
        assert row["instance_id"].startswith(f"sclate__{name}-")
        assert row["image"] == f"sweb.eval.x86_64.{row['instance_id'].lower()}:latest"
        assert row["log_parser"] == "parse_log_pytest"
        assert row["eval_type"] == "pass_and_fail"
        assert row["version"] == "0.1"
        assert row["difficulty"] in {"<15 min fix", "15 min - 1 hour", "1-4 hours", ">4 hours"}
        _when(row["created_at"])
        for key in ("base_commit", "environment_setup_commit"):
            assert len(row[key]) == 40 and int(row[key], 16) >= 0
        assert row["problem_statement"].strip()
        f2p, p2p = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
        assert len(f2p) >= 1 and len(p2p) >= 2, row["instance_id"]
        assert not set(f2p) & set(p2p)
        test_files = set(_files(row["test_patch"]))
        for test in f2p + p2p:
            assert isinstance(test, str) and " " not in test
            path, sep, _ = test.partition("::")
            assert sep and path in test_files, test


def test_gold_patches_touch_only_code_and_test_patches_only_tests(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        for key in ("patch", "test_patch"):
            assert row[key].startswith("diff --git a/"), row["instance_id"]
            assert "\nindex " not in row[key]  # as SWE-bench stores patches
        assert _files(row["patch"]) and not any(f.startswith("tests/") for f in _files(row["patch"]))
        assert _files(row["test_patch"]) and all(f.startswith("tests/") for f in _files(row["test_patch"]))


def test_eval_scripts_have_upstreams_shape_and_the_hardening(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        script, base, test_patch = row["eval_script"], row["base_commit"], row["test_patch"]
        lines = script.split("\n")
        assert lines[:7] == [
            "#!/bin/bash",
            "set -uxo pipefail",
            "cd /testbed",
            "git config --global --add safe.directory /testbed",
            "git status",
            "git show",
            f"git -c core.fileMode=false diff {base}",
        ]
        delimiter = SCRIPT.heredoc_delimiter(test_patch)
        apply = f"git apply -v - <<'{delimiter}' || {{ echo '>>>>> Patch Apply Failed'; exit 1; }}\n"
        assert apply + test_patch + "\n" + delimiter + "\n" in script
        end = lines.index(": '>>>>> End Test Output'")
        assert lines[end - 2] == ": '>>>>> Start Test Output'"
        assert lines[end - 1] == "python -m pytest -rA -p no:cacheprovider " + " ".join(_files(test_patch))
        modified, created = SCRIPT.modified_files(test_patch), SCRIPT.new_files(test_patch)
        assert sorted(modified + created) == sorted(_files(test_patch))
        reset = f"git checkout {base} {' '.join(modified)}"
        assert (lines.count(reset) == 2) if modified else (f"git checkout {base}" not in script)
        assert (f"rm -f {' '.join(created)}" in lines) == bool(created)
        assert script.endswith("\n")


def test_a_later_instance_starts_after_the_earlier_fixes(rows: list[dict[str, Any]], tmp_path: Path) -> None:
    for name in sorted({r["repo"] for r in rows}):
        arc = [r for r in rows if r["repo"] == name]
        clone = tmp_path / name.replace("/", "_")
        bundle = OWN / "repos" / f"{name.split('/')[1]}.bundle"
        subprocess.run(["git", "clone", "-q", str(bundle), str(clone)], check=True)
        for earlier, later in itertools.pairwise(arc):
            assert _when(earlier["created_at"]) < _when(later["created_at"])
            assert later["environment_setup_commit"] == earlier["environment_setup_commit"]
            subprocess.run(
                ["git", "merge-base", "--is-ancestor", earlier["base_commit"], later["base_commit"]],
                cwd=clone,
                check=True,
            )
            # The earlier gold fix is in the later base: it applies in reverse there.
            subprocess.run(["git", "checkout", "-q", later["base_commit"]], cwd=clone, check=True)
            subprocess.run(
                ["git", "apply", "--check", "--reverse", "-"], cwd=clone, input=earlier["patch"].encode(), check=True
            )
            between = subprocess.run(
                ["git", "rev-list", "--count", f"{earlier['base_commit']}..{later['base_commit']}"],
                cwd=clone,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert int(between) >= 2  # the fix and at least one other commit


def test_two_instances_of_one_repository_exactly_a_week_apart(rows: list[dict[str, Any]]) -> None:
    by_id = {r["instance_id"]: r for r in rows}
    first, second = by_id["sclate__ledger-1"], by_id["sclate__ledger-2"]
    assert _when(second["created_at"]) - _when(first["created_at"]) == dt.timedelta(days=7)
    # What carries over: the first fix's helpers, which the second fix reuses.
    assert "def _round_cents(" in first["patch"] and "def _decimal(" in first["patch"]
    assert "_round_cents(" in second["patch"] and "_decimal(" in second["patch"]
    assert "def _round_cents(" not in second["patch"]
