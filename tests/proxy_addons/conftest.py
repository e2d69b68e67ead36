from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from mitmproxy.test import taddons

from proxy_addons.capture import SclateCapture
from tests.capture.fake_daemon import FakeDaemon
from tests.proxy_addons.harness import REAL, RUN, SECRET, Harness


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Unix socket paths are limited to ~108 bytes; pytest's tmp_path is long.
    d = Path(tempfile.mkdtemp(prefix="scl", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
async def daemon(short_dir: Path) -> AsyncIterator[FakeDaemon]:
    d = FakeDaemon(short_dir / "s.sock", RUN)
    await d.start()
    yield d
    await d.stop()


@pytest.fixture
async def harness(daemon: FakeDaemon, short_dir: Path) -> AsyncIterator[Harness]:
    addon = SclateCapture()
    spool = short_dir / "spool"
    with taddons.context(addon) as tctx:  # type: ignore[no-untyped-call]
        tctx.configure(
            addon,
            sclate_roles="4001=agent,4002=memory,4003=aux",
            sclate_run_secret=SECRET,
            sclate_upstream_key=REAL,
            sclate_control_socket=str(daemon.path),
            sclate_spool=str(spool),
            sclate_retry_interval=0.05,
        )
        yield Harness(addon, tctx, spool)
        await addon.done()
