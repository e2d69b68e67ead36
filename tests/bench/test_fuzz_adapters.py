"""The adapters part of `sclated bench fuzz`: corrupted data files refused as CreateRun
refuses them, with the file and the field named; and the figures come out bad against a
loader that lets Python's errors through."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from sclated.bench import _fuzz_adapters as fz
from sclated.errors import InvalidArgument, NotFound

SHARED_SMALL = fz.SHARED_DATA / "metaclaw-bench-small" / "all_tests.json"


async def test_every_corrupted_file_is_refused_naming_it_or_loads() -> None:
    out = await fz.run(argparse.Namespace(), seed=1)
    for count in ("crashes", "internal_errors", "state_changed_on_error", "cross_tenant_leaks"):
        assert out[count] == 0, out["findings"]
    # What only ARE checks (when a run starts) it refuses naming the file and its own
    # reason (an app it cannot find, a type name it does not know), not our field.
    assert len(out["findings"]) == out["errors_without_field"] <= 10
    assert all("Gaia2 world open:" in f for f in out["findings"]), out["findings"]
    assert out["accepted"] + out["refused"] == out["cases"] > 500
    names = {"metaclaw-tiny", "longmemeval-tiny", "personamem-tiny", "swebench-own", "swegym-own", "gaia2-own"}
    if SHARED_SMALL.is_file():
        names.add("metaclaw-bench-small")
    assert set(out["datasets"]) == names
    # The corrupted Gaia2 files that pass went through ARE too, when its environment is built.
    assert (out["gaia2_world_cases"] > 0) == fz._World.available()


async def test_a_loader_that_lets_python_s_errors_through_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    import adapters.longmemeval as lme

    def as_before(path: Path, what: str) -> Any:  # what LongMemEval read files with before
        return json.loads(path.read_text(encoding="utf-8"))

    monkeypatch.setattr(lme, "read_json", as_before)
    out = await fz.run(argparse.Namespace(), seed=1, only=("longmemeval-tiny",))
    assert out["datasets"] == {"longmemeval-tiny": out["cases"]}
    assert out["internal_errors"] > 0
    assert any("UnicodeDecodeError" in f or "RecursionError" in f for f in out["findings"])


def _corruption(field: str | None) -> fz.Corruption:
    return fz.Corruption("c", lambda p: None, field)


def test_the_judge_wants_sclate_s_errors_naming_the_file_and_the_field(tmp_path: Path) -> None:
    f = tmp_path / "all_tests.json"
    assert fz.judge(None, f, _corruption("id")) is None
    assert fz.judge(KeyError("id"), f, _corruption("id")) == ("internal_errors", "KeyError: 'id'")
    kind, why = fz.judge(InvalidArgument("day 1 has no id"), f, _corruption("id")) or ("", "")
    assert kind == "internal_errors" and "without the file's name" in why
    no_field = fz.judge(InvalidArgument(f"{f}: a day is wrong"), f, _corruption("id"))
    assert no_field is not None and no_field[0] == "errors_without_field"
    assert fz.judge(InvalidArgument(f"{f}: wrong", field="id"), f, _corruption("id")) is None
    assert fz.judge(NotFound(f"{f} does not exist"), f, _corruption(None)) is None


def test_corruptions_cover_bytes_fields_and_cells(tmp_path: Path) -> None:
    import random

    doc = tmp_path / "d.json"
    doc.write_text(json.dumps({"test": [{"id": "day01", "eval": {"command": "true"}}]}))
    names = [c.name for c in fz.corruptions(doc, random.Random(1))]
    assert {"empty", "deleted", "a directory", "UTF-16", "nested past the recursion limit"} <= set(names)
    assert any(n.startswith("test.0.id ") for n in names) and any(n.startswith("truncated at") for n in names)
    table = tmp_path / "q.csv"
    table.write_text("a,b\n1,2\n")
    assert "column a removed" in [c.name for c in fz.corruptions(table, random.Random(1))]
