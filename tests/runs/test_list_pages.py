"""RunManager.list's page tokens: any token it did not issue is INVALID_ARGUMENT on page_token."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sclated.errors import InvalidArgument
from sclated.runs import RunManager, RunSpec
from sclated.runs._registry import Registry
from sclated.store import RunRow, Store

EMPTY_FILTER_HASH = "e3b0c44298fc1c14"


@pytest.fixture
async def manager(store: Store) -> AsyncIterator[RunManager]:
    spec = RunSpec.from_dict({"benchmark": {"name": "synthetic"}, "agent": {"harness": "scripted"}})
    for i in range(3):
        await store.insert_run(
            RunRow(name=f"alice/r{i}", tenant="alice", spec=spec.to_dict(), state="SUCCEEDED", create_ns=1, seq=i + 1)
        )
    # Not started: list only reads the store.
    yield RunManager(store, Registry())


def token(content: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(content).encode()).decode().rstrip("=")


async def test_issued_tokens_page_through(manager: RunManager) -> None:
    first, tok = await manager.list("alice", page_size=2)
    rest, end = await manager.list("alice", page_size=2, page_token=tok)
    assert [v.run_id for v in first + rest] == ["r0", "r1", "r2"] and end == ""


@pytest.mark.parametrize(
    "after",
    [
        2**70,  # past SQLite's integers: OverflowError, the call ended INTERNAL (found by bench fuzz)
        2**63,
        -1,
        1e308,
        "x",
        None,
    ],
)
async def test_a_forged_position_is_invalid_argument(manager: RunManager, after: Any) -> None:
    with pytest.raises(InvalidArgument) as info:
        await manager.list("alice", page_token=token({"after": after, "f": EMPTY_FILTER_HASH}))
    assert info.value.field == "page_token"


async def test_the_largest_position_is_an_empty_page(manager: RunManager) -> None:
    runs, tok = await manager.list("alice", page_token=token({"after": 2**63 - 1, "f": EMPTY_FILTER_HASH}))
    assert runs == [] and tok == ""
