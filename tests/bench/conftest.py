from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def bench_tmp() -> Iterator[Path]:
    """A TMPDIR for a benchmark subprocess; short, as Unix socket paths must be (~108 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="sbt-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
