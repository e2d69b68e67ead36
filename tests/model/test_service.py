"""The daemon's embedded-model child process, watched for its whole life.

Stand-in servers (small aiohttp scripts, not the model) die the ways llama.cpp
has been seen to: by SIGSEGV while loading, or mid-call after serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from sclated.errors import ModelUnavailable
from sclated.model import EmbeddedModel
from sclated.model._service import _pick_port
from sclated.runtime import ModelBridge

# Dies by SIGSEGV on its first N starts, counted in a file, then answers /health.
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

# Appends "pid port" to a file on every start, then by MODE:
#   serve              serve; GET /crash kills it by SIGSEGV mid-call
#   crash-after-health die by SIGSEGV just after answering its first /health
#   hang-on-restart    like serve on the first start; later starts never answer
#   setup-error        print an error and exit 1 (a missing model file, say)
STANDIN = r"""
import asyncio, os, signal, sys, time
from pathlib import Path
from aiohttp import web
starts, mode = Path(sys.argv[1]), sys.argv[2]
port = int(sys.argv[sys.argv.index("--port") + 1])
n = len(starts.read_text().splitlines()) if starts.exists() else 0
with starts.open("a") as f:
    f.write(f"{os.getpid()} {port}\n")
print(f"stand-in start {n + 1} on port {port}", flush=True)
if mode == "setup-error":
    print("error: no model file at /nowhere.gguf", flush=True)
    sys.exit(1)
if mode == "hang-on-restart" and n >= 1:
    time.sleep(3600)

def segfault():
    print("stand-in: segfaulting now", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)

async def health(request):
    if mode == "crash-after-health":
        asyncio.get_running_loop().call_later(0.05, segfault)
    return web.json_response({"ok": True})

async def crash(request):
    segfault()

app = web.Application()
app.router.add_get("/health", health)
app.router.add_get("/crash", crash)
web.run_app(app, host="127.0.0.1", port=port, print=None)
"""


def _standin(tmp: Path, mode: str, **kwargs: float) -> tuple[EmbeddedModel, Path]:
    script = tmp / "standin.py"
    script.write_text(STANDIN)
    starts = tmp / "starts"
    kwargs.setdefault("start_timeout_s", 30)
    kwargs.setdefault("backoff_s", 0.05)
    model = EmbeddedModel(
        log_path=tmp / "model.log",
        server_argv=[sys.executable, str(script), str(starts), mode],
        **kwargs,  # type: ignore[arg-type]
    )
    return model, starts


def _starts(starts: Path) -> list[tuple[int, int]]:
    return [(int(pid), int(port)) for pid, port in (line.split() for line in starts.read_text().splitlines())]


def _gone(pid: int) -> bool:
    # Reaped: no /proc entry (a zombie would still have one).
    return not Path(f"/proc/{pid}").exists()


async def _until(cond: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _status(url: str, path: str = "/health") -> int:
    async with aiohttp.ClientSession() as http, http.get(f"{url}{path}") as resp:
        return resp.status


def _crash_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "sclated.model" and r.levelno >= logging.WARNING and "died" in r.getMessage()
    ]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="sc-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_a_server_killed_while_starting_is_started_again(tmp_path: Path) -> None:
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    counter = tmp_path / "starts"
    model = EmbeddedModel(
        log_path=tmp_path / "log",
        server_argv=[sys.executable, str(script), str(counter), "2"],
        start_timeout_s=30,
        backoff_s=0.05,
    )
    try:
        url = await model.url()
        assert await _status(url) == 200
        assert counter.read_text() == "3"
        assert model.status.restarts == 2 and model.status.last_exit == "SIGSEGV, signal 11"
    finally:
        await model.close()


async def test_a_server_that_keeps_dying_while_starting_is_reported(tmp_path: Path) -> None:
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    log_path = tmp_path / "log"
    model = EmbeddedModel(
        log_path=log_path,
        server_argv=[sys.executable, str(script), str(tmp_path / "n"), "99"],
        start_timeout_s=30,
        max_restarts=2,
        backoff_s=0.05,
    )
    with pytest.raises(ModelUnavailable) as err:
        await model.url()
    assert "the embedded model server died (SIGSEGV, signal 11) 3 times in " in err.value.message
    assert f"giving up; see {log_path}" in err.value.message
    assert "sclated doctor" in err.value.message
    failed = model.status
    assert failed.state == "failed" and failed.error == err.value.message
    await model.close()
    assert model.status.state == "stopped"


async def test_a_server_that_dies_while_serving_is_restarted_on_the_same_port(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model, starts = _standin(tmp_path, "serve")
    try:
        url = await model.url()
        first = model.status
        assert first.state == "serving" and first.url == url and first.restarts == 0 and first.last_exit is None
        with pytest.raises(aiohttp.ClientError):
            await _status(url, "/crash")  # the server dies mid-call
        await _until(lambda: model.status.last_exit is not None, "the watcher to see the death")
        # url() waits for the restart (or finds it done) and hands out the same address.
        assert await model.url() == url
        assert await _status(url) == 200
        now = model.status
        assert now.state == "serving" and now.restarts == 1 and now.last_exit == "SIGSEGV, signal 11"
        assert now.pid is not None and now.pid != first.pid and _gone(first.pid or 0)
        assert [port for _, port in _starts(starts)] == [int(url.rsplit(":", 1)[1])] * 2
        (crash,) = _crash_records(caplog)[:1]
        text = crash.getMessage()
        assert "died while serving: SIGSEGV, signal 11" in text
        assert str(tmp_path / "model.log") in text
        assert "stand-in: segfaulting now" in text  # the log's last lines
    finally:
        await model.close()


async def test_a_server_that_keeps_dying_while_serving_is_given_up(tmp_path: Path) -> None:
    log_path = tmp_path / "model.log"
    model, starts = _standin(tmp_path, "crash-after-health", max_restarts=2)
    try:
        with contextlib.suppress(ModelUnavailable):
            await model.url()  # it may still be serving, for a moment
        await _until(lambda: model.status.state == "failed", "the watcher to give up")
        with pytest.raises(ModelUnavailable) as err:
            await model.url()
        message = err.value.message
        assert "the embedded model server died (SIGSEGV, signal 11) 3 times in " in message
        assert f"giving up; see {log_path}" in message
        assert "rm -rf ~/.cache/sclate/wheels/llama-*" in message
        status = model.status
        assert status.restarts == 2 and status.pid is None and status.url is None and status.error == message
        assert all(_gone(pid) for pid, _ in _starts(starts))
    finally:
        await model.close()


async def test_a_setup_error_fails_at_once_with_the_log(tmp_path: Path) -> None:
    model, starts = _standin(tmp_path, "setup-error")
    with pytest.raises(ModelUnavailable, match=r"exited \(exit code 1\) while starting") as err:
        await model.url()
    assert "error: no model file at /nowhere.gguf" in err.value.message
    assert len(_starts(starts)) == 1 and model.status.restarts == 0
    # A later call tries again (the problem may have been fixed meanwhile).
    with pytest.raises(ModelUnavailable):
        await model.url()
    assert len(_starts(starts)) == 2
    await model.close()


async def test_close_during_a_restart_leaves_no_process(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model, starts = _standin(tmp_path, "hang-on-restart")
    try:
        url = await model.url()
        with pytest.raises(aiohttp.ClientError):
            await _status(url, "/crash")
        # The second start is running and will never answer: the watcher waits for it.
        await _until(lambda: starts.exists() and len(_starts(starts)) == 2, "the restart")
        restarting = model.status
        assert restarting.state == "restarting" and restarting.restarts == 1
    finally:
        await model.close()
    pids = [pid for pid, _ in _starts(starts)]
    assert all(_gone(pid) for pid in pids), pids
    stopped = model.status
    assert stopped.state == "stopped" and stopped.pid is None
    assert len(_crash_records(caplog)) == 1  # the SIGSEGV; closing is no crash


async def test_an_intended_close_is_no_crash(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model, starts = _standin(tmp_path, "serve")
    url = await model.url()
    assert await _status(url) == 200
    await model.close()
    ((pid, _),) = _starts(starts)
    assert _gone(pid)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert model.status.state == "stopped" and model.status.last_exit is None
    assert await model.explain_drop() is None


def test_the_old_port_is_kept_unless_taken() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert _pick_port(port) == port
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        other = _pick_port(port)
    assert other != port and 0 < other < 65536
    assert _pick_port(None) > 0


# -- through a ModelBridge that resolves the model per connection ---------------------------


async def _get(sock: Path, path: str) -> tuple[bytes, bytes]:
    reader, writer = await asyncio.open_unix_connection(str(sock))
    writer.write(f"GET {path} HTTP/1.1\r\nHost: model\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], body


async def test_a_bridge_follows_the_model_through_a_crash(tmp_path: Path, short_dir: Path) -> None:
    model, _ = _standin(tmp_path, "serve")
    bridge = ModelBridge(short_dir / "model.sock", resolve=model.endpoint, explain_drop=model.explain_drop)
    try:
        async with bridge:
            status, _ = await _get(bridge.socket_path, "/health")
            assert status == b"HTTP/1.1 200 OK"
            status, body = await _get(bridge.socket_path, "/crash")
            assert status == b"HTTP/1.1 502 Bad Gateway"
            message = json.loads(body)["error"]["message"]
            assert "closed the connection without answering" in message
            assert "died: SIGSEGV, signal 11" in message
            # The next call waits for the restart and goes through.
            status, _ = await _get(bridge.socket_path, "/health")
            assert status == b"HTTP/1.1 200 OK"
        assert bridge.stats.dropped == 1 and bridge.stats.failed == 0 and bridge.unreachable_for_s() == 0
        assert model.status.restarts == 1
    finally:
        await model.close()


async def test_a_bridge_says_why_the_model_is_gone(tmp_path: Path, short_dir: Path) -> None:
    model, _ = _standin(tmp_path, "crash-after-health", max_restarts=1)
    try:
        with contextlib.suppress(ModelUnavailable):
            await model.url()  # it may still be serving, for a moment
        await _until(lambda: model.status.state == "failed", "the watcher to give up")
        async with ModelBridge(short_dir / "model.sock", resolve=model.endpoint) as bridge:
            status, body = await _get(bridge.socket_path, "/v1/chat/completions")
        assert status == b"HTTP/1.1 502 Bad Gateway"
        error = json.loads(body)["error"]
        assert error["type"] == "sclate_model_unavailable"
        assert error["message"].startswith("sclate: the embedded model server died (SIGSEGV, signal 11) 2 times in ")
        assert "giving up" in error["message"] and "sclated doctor" in error["message"]
        assert bridge.stats.failed == 1 and bridge.stats.failing_since is not None
        assert "giving up" in bridge.stats.last_error
    finally:
        await model.close()


async def test_the_context_size_reaches_the_child(tmp_path: Path) -> None:
    script = tmp_path / "argv.py"
    # Writes its argv, then serves /health like the model server would.
    script.write_text(
        "import sys, json\nfrom pathlib import Path\nfrom aiohttp import web\n"
        "Path(sys.argv[1]).write_text(json.dumps(sys.argv[2:]))\n"
        "port = int(sys.argv[sys.argv.index('--port') + 1])\n"
        "app = web.Application()\napp.router.add_get('/health', lambda r: web.json_response({'ok': True}))\n"
        "web.run_app(app, host='127.0.0.1', port=port, print=None)\n"
    )
    argv_file = tmp_path / "argv.json"
    model = EmbeddedModel(
        log_path=tmp_path / "model.log", server_argv=[sys.executable, str(script), str(argv_file)], n_ctx=32768
    )
    try:
        await model.url()
        argv = json.loads(argv_file.read_text())
        assert argv[argv.index("--n-ctx") + 1] == "32768"
        assert argv[argv.index("--parent-pid") + 1] == str(os.getpid())  # it dies with us
    finally:
        await model.close()
