"""The daemon's embedded-model child process: restarted when killed while starting."""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp
import pytest

from sclated.errors import ModelUnavailable
from sclated.runs._model_service import EmbeddedModel

# A stand-in server (a test double, not the model): it dies by SIGSEGV on its
# first N starts, counted in a file, then answers /health.
FLAKY = r"""
import os, signal, sys
from pathlib import Path
from aiohttp import web
counter, crashes = Path(sys.argv[1]), int(sys.argv[2])
port = int(sys.argv[sys.argv.index("--port") + 1])
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
if n < crashes:
    os.kill(os.getpid(), signal.SIGSEGV)
app = web.Application()
app.router.add_get("/health", lambda r: web.json_response({"ok": True}))
web.run_app(app, host="127.0.0.1", port=port, print=None)
"""


async def test_a_server_killed_while_starting_is_started_again(tmp_path: Path) -> None:
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    counter = tmp_path / "starts"
    model = EmbeddedModel(
        log_path=tmp_path / "log", server_argv=[sys.executable, str(script), str(counter), "2"], start_timeout_s=30
    )
    try:
        url = await model.url()
        async with aiohttp.ClientSession() as http, http.get(f"{url}/health") as resp:
            assert resp.status == 200
        assert counter.read_text() == "3"
    finally:
        await model.close()


async def test_a_server_that_keeps_dying_is_reported(tmp_path: Path) -> None:
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    model = EmbeddedModel(
        log_path=tmp_path / "log",
        server_argv=[sys.executable, str(script), str(tmp_path / "n"), "99"],
        start_timeout_s=30,
    )
    with pytest.raises(ModelUnavailable, match="killed by a signal 3 times"):
        await model.url()
    await model.close()
