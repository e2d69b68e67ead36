"""The cluster the sandboxed tests share: a head and two nodes of one sandbox slot each,
one per test module (tests/cluster/test_ray_cluster.py declares its own, of three nodes)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from sclated.cluster import LocalCluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster(nodes=2, sandbox_slots=1)
    asyncio.run(c.start())
    try:
        yield c
    finally:
        asyncio.run(c.stop())
