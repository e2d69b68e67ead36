"""systemd's notify protocol: a receiver that does not read never blocks the sender
(notify is called from the event loop: the watchdog pings)."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sclated.daemon._sdnotify import notify


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="sn-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_notify_never_blocks_on_a_receiver_that_does_not_read(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(str(short_dir / "notify.sock"))
        monkeypatch.setenv("NOTIFY_SOCKET", str(short_dir / "notify.sock"))
        sent = [notify("WATCHDOG=1") for _ in range(5000)]  # far more than a datagram queue holds
        assert sent[0] and not all(sent)
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert notify("READY=1") is False  # not under systemd
