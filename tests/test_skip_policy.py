"""The suite's skip policy bites: a skip without a reason fails the run, and on CI
so does any skip whose reason is not on the allowed list."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).with_name("conftest.py")


def _run(tmp_path: Path, body: str, *, ci: bool) -> subprocess.CompletedProcess[str]:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text("import pytest\n\n" + body)
    env = {k: v for k, v in os.environ.items() if k != "SCLATE_CI"}
    if ci:
        env["SCLATE_CI"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )


def test_a_skip_with_a_reason_passes_locally(tmp_path: Path) -> None:
    res = _run(tmp_path, "@pytest.mark.skip(reason='needs a GPU')\ndef test_x():\n    pass\n", ci=False)
    assert res.returncode == 0, res.stdout
    assert "needs a GPU" in res.stdout


def test_a_skip_without_a_reason_fails(tmp_path: Path) -> None:
    res = _run(tmp_path, "@pytest.mark.skip\ndef test_x():\n    pass\n", ci=False)
    assert res.returncode != 0
    assert "without an accepted written reason" in res.stdout


def test_on_ci_only_listed_reasons_may_skip(tmp_path: Path) -> None:
    body = "@pytest.mark.skip(reason='needs a GPU')\ndef test_x():\n    pass\n"
    res = _run(tmp_path, body, ci=True)
    assert res.returncode != 0 and "test_x: needs a GPU" in res.stdout
    allowed = "@pytest.mark.skip(reason='the portable target is x86-64')\ndef test_y():\n    pass\n"
    assert _run(tmp_path, allowed, ci=True).returncode == 0
