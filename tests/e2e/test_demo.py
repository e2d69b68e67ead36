"""`sclated demo` tells the truth: a broken model stops it at the start with what to do,
and a run without tokens or trajectories is a failure, not a report."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sclated.e2e import demo_problems

pytestmark = pytest.mark.e2e


def test_a_demo_whose_model_is_broken_exits_non_zero_saying_what_to_do(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    res = subprocess.run(
        [str(Path(sys.executable).with_name("sclated")), "demo", "--model-url", dead, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 1, res.stderr
    assert f"sclated demo failed: the model does not work: {dead}" in res.stderr
    assert "What to do:" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "state").exists()  # nothing was started


def _run(**kw: Any) -> dict[str, Any]:
    run: dict[str, Any] = {
        "state": "SUCCEEDED",
        "results": {"capture": {"calls": 11, "prompt_tokens": 900, "completion_tokens": 80}},
        "export_rows": {"skyrl": 9, "atif": 1},
    }
    run.update(kw)
    return run


def test_a_good_run_has_no_problem() -> None:
    assert demo_problems(_run()) == []


def test_no_tokens_no_trajectories_or_a_failed_run_are_problems() -> None:
    no_tokens = _run(results={"capture": {"calls": 11, "calls_failed": 11, "prompt_tokens": 0}})
    assert demo_problems(no_tokens) == ["the run captured no tokens (11 calls, 11 failed)"]
    assert demo_problems(_run(export_rows={"skyrl": 0, "atif": 0})) == ["no trajectory was exported (0 rows)"]
    failed = demo_problems(_run(state="FAILED", state_reason="the model endpoint stayed unreachable"))
    assert failed == ["the run ended FAILED: the model endpoint stayed unreachable"]
