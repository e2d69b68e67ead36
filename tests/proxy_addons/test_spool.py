"""Records on disk until acknowledged, in the layout sclate-capture-drain reads
at sandbox close: <spool>/<call_id>.json, <spool>/rejected/<call_id>.json."""

from __future__ import annotations

import os
import time
from pathlib import Path

from proxy_addons._spool import Spool


def test_write_is_whole_and_pending_oldest_first(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    assert spool.pending() == []  # no directory yet
    spool.write("b", '{"n": 1}')
    time.sleep(0.01)
    spool.write("a", '{"n": 2}')
    assert spool.pending() == [("b", '{"n": 1}'), ("a", '{"n": 2}')]
    assert sorted(os.listdir(tmp_path / "spool")) == ["a.json", "b.json"]  # no temporary left
    spool.write("b", '{"n": 3}')  # a rewrite replaces
    assert dict(spool.pending())["b"] == '{"n": 3}'


def test_remove_and_reject(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path))
    spool.write("ok", "{}")
    spool.write("bad", "{}")
    spool.remove("ok")
    spool.remove("ok")  # twice is fine
    spool.reject("bad")
    spool.reject("gone")  # nothing to move
    assert spool.pending() == []
    assert os.listdir(tmp_path / "rejected") == ["bad.json"]
    assert spool.path("x") == tmp_path / "x.json"


def test_the_drain_script_reads_this_layout() -> None:
    drain = (Path(__file__).resolve().parents[2] / "images" / "sandbox" / "sclate-capture-drain").read_text()
    assert 'spool.glob("*.json")' in drain and '(spool / "rejected").glob("*.json")' in drain
