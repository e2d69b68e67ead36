"""Fixtures for the runtime tests. Docker tests use the real engine and images
built once per session (a no-op when the content-hashed tags already exist)."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from sclated.runtime import DockerRuntime, SandboxManager, build_all, image_ref

SIM_START_NS = 1_924_992_000 * 1_000_000_000  # 2031-01-01T00:00:00Z


@pytest.fixture(scope="session")
def sandbox_image() -> str:
    """The sclate-sandbox image ref, built if missing (idempotent)."""
    lines: list[str] = []
    # Only what these tests use: other packages may register heavier images.
    asyncio.run(build_all(lines.append, names=["sclate-sandbox"]))
    return asyncio.run(image_ref("sclate-sandbox"))


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="sc-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def runtime(sandbox_image: str) -> AsyncIterator[DockerRuntime]:
    """A runtime with a fresh daemon id; everything it labelled is reaped afterwards."""
    rt = await DockerRuntime.connect(f"test-{secrets.token_hex(4)}")
    try:
        yield rt
    finally:
        await rt.reap(rt.daemon_id, keep=set())
        await rt.close()


@pytest.fixture
def manager(runtime: DockerRuntime) -> SandboxManager:
    return SandboxManager(runtime)
