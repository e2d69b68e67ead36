"""Reading benchmark data files: what Python's readers raise becomes an error of sclate's
that names the file and where in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters._data_files import parse_json, read_json, read_text, typed
from sclated.errors import InvalidArgument, NotFound


def test_a_file_that_is_missing_a_directory_or_not_utf8_is_named(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match=r"Data file .*missing.json does not exist"):
        read_text(tmp_path / "missing.json", "Data file")
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(InvalidArgument, match=r"dir.json is a directory"):
        read_text(tmp_path / "dir.json", "Data file")
    (tmp_path / "latin.json").write_bytes('{"a": "é"}'.encode("latin-1"))
    with pytest.raises(InvalidArgument, match=r"latin.json is not UTF-8 text \(byte 7"):
        read_json(tmp_path / "latin.json", "Data file")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": [1, 2', r"x.json is not valid JSON: Expecting .* \(line 1 column"),
        (
            '{"a": 1,\n "b": ' + "[" * 5000 + "]" * 5000 + "}",
            r"x.json is not JSON this reader takes: line 2 column \d+: nested too deeply",
        ),
        ('{"a": 1,\n "b": ' + "9" * 5000 + "}", r"line 2 column 7: an integer of more than 4300 digits"),
    ],
    ids=["cut", "nested", "huge-integer"],
)
def test_json_this_reader_refuses_is_located(text: str, message: str) -> None:
    # Before: the nested text raised RecursionError and the integer a bare ValueError,
    # neither naming the file (CreateRun answered INTERNAL).
    with pytest.raises(InvalidArgument, match=message):
        parse_json(text, "x.json")


def test_typed_names_the_field_and_what_it_got() -> None:
    obj = {"id": True, "name": "n", "n": None}
    with pytest.raises(InvalidArgument, match=r"f.json, item 0: id must be a string or an integer, got true") as bad:
        typed(obj, "id", (str, int), "f.json, item 0")
    assert bad.value.field == "id"
    with pytest.raises(InvalidArgument, match="rounds must be a list, got missing"):
        typed(obj, "rounds", list, "f.json")
    assert typed(obj, "n", str, "f.json", required=False) is None
    assert typed(obj, "name", str, "f.json") == "n"
