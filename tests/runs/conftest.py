"""A real SQLite store in the test's own directory, for the runs room's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sclated.store import Store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(tmp_path / "state.db")
    await s.open()
    yield s
    await s.close()
