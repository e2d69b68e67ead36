"""A real mitmdump process with the addon, in reverse mode with two role
listeners, in front of a real aiohttp upstream returning vLLM token fields;
records must reach a real Unix-socket control server."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.capture.fake_daemon import FakeDaemon

ROOT = Path(__file__).resolve().parents[2]
MITMDUMP = Path(sys.executable).parent / "mitmdump"
ADDON = ROOT / "proxy_addons" / "capture.py"
SECRET = "e2e-secret"
RUN = "run-e2e"
KEY = f"sk-sclate-{RUN}-{SECRET}"
REAL = "upstream-real-key"
RUN_MODEL = "the-runs-model"

pytestmark = pytest.mark.skipif(not MITMDUMP.exists(), reason="mitmdump not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Upstream:
    """vLLM-shaped chat completions; the stream waits on `gate` after its
    first chunk so the test can prove the proxy forwarded that chunk alone."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append((dict(request.headers), body))
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "model": body["model"],
                    "prompt_token_ids": [100, 101, 102],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "ok"},
                            "finish_reason": "stop",
                            "token_ids": [7, 8],
                            "logprobs": {"content": [{"logprob": -0.1}, {"logprob": -0.2}]},
                        }
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
                }
            )
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        first = {
            "id": "s1",
            "model": body["model"],
            "prompt_token_ids": [200, 201],
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": "he"},
                    "token_ids": [9],
                    "logprobs": {"content": [{"logprob": -0.3}]},
                }
            ],
        }
        await resp.write(f"data: {json.dumps(first)}\n\n".encode())
        await asyncio.wait_for(self.gate.wait(), 10)
        last = {
            "id": "s1",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "y"},
                    "token_ids": [10],
                    "logprobs": {"content": [{"logprob": -0.4}]},
                    "finish_reason": "stop",
                }
            ],
        }
        await resp.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        return resp


async def wait_port(port: int, proc: asyncio.subprocess.Process) -> None:
    for _ in range(300):
        if proc.returncode is not None:
            raise RuntimeError("mitmdump exited early")
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        w.close()
        return
    raise TimeoutError(f"mitmdump not listening on {port}")


@pytest.fixture(params=["checkout", "image-layout"])
async def stack(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Upstream, FakeDaemon, int, int, Path]]:
    d = Path(tempfile.mkdtemp(prefix="sce", dir="/tmp"))
    addon = ADDON
    if request.param == "image-layout":
        # As the sandbox image installs it: the package's files in a directory
        # of another name, the script beside its modules.
        installed = d / "opt" / "sclate" / "proxy"
        installed.mkdir(parents=True)
        for module in ADDON.parent.glob("*.py"):
            shutil.copy(module, installed / module.name)
        addon = installed / "capture.py"
    daemon = FakeDaemon(d / "s.sock", RUN)
    await daemon.start()
    upstream = Upstream()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", upstream.chat)
    runner = web.AppRunner(app)
    await runner.setup()
    up_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", up_port).start()
    agent_port, memory_port = free_port(), free_port()
    # As sclated gives them: the key in a file of the run's mount, the run's model by name.
    (d / "upstream.key").write_text(REAL + "\n")
    env = dict(
        os.environ,
        SCLATE_RUN_SECRET=SECRET,
        SCLATE_UPSTREAM_API_KEY_FILE=str(d / "upstream.key"),
        SCLATE_RUN_MODEL=RUN_MODEL,
    )
    # A file, not a pipe nobody reads: a full pipe would stall mitmdump.
    log = open(d / "mitmdump.log", "wb")  # noqa: SIM115 (tmpfs, before any I/O)
    proc = await asyncio.create_subprocess_exec(
        str(MITMDUMP),
        "-q",
        "-s",
        str(addon),
        "--set",
        f"confdir={d / 'mitm'}",
        "--mode",
        f"reverse:http://127.0.0.1:{up_port}@127.0.0.1:{agent_port}",
        "--mode",
        f"reverse:http://127.0.0.1:{up_port}@127.0.0.1:{memory_port}",
        "--set",
        f"sclate_roles={agent_port}=agent,{memory_port}=memory",
        "--set",
        f"sclate_control_socket={daemon.path}",
        "--set",
        f"sclate_spool={d / 'spool'}",
        env=env,
        stdout=log,
        stderr=log,
    )
    try:
        try:
            await wait_port(agent_port, proc)
            await wait_port(memory_port, proc)
        except (RuntimeError, TimeoutError) as e:
            raise AssertionError(f"{e}: {(d / 'mitmdump.log').read_text()}") from None
        yield upstream, daemon, agent_port, memory_port, d
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()
        await runner.cleanup()
        await daemon.stop()
        shutil.rmtree(d, ignore_errors=True)


async def wait_records(daemon: FakeDaemon, n: int) -> list[Any]:
    for _ in range(200):
        recs = await daemon.records()
        if len(recs) >= n:
            return recs
        await asyncio.sleep(0.05)
    raise AssertionError(f"only {len(await daemon.records())} records arrived")


async def test_real_mitmdump_records_streamed_and_plain_calls(
    stack: tuple[Upstream, FakeDaemon, int, int, Path],
) -> None:
    upstream, daemon, agent_port, memory_port, d = stack
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": f"Bearer {KEY}"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{agent_port}/v1/chat/completions", json=body, headers=headers) as r:
            assert r.status == 200
            plain = await r.json()
        # What the agent gets is the server's response (extra vLLM fields and all).
        assert plain["choices"][0]["message"]["content"] == "ok"

        async with http.post(
            f"http://127.0.0.1:{memory_port}/v1/chat/completions",
            json=dict(body, stream=True),
            headers=headers,
        ) as r:
            assert r.status == 200
            # The first event arrives while the upstream is still holding the
            # rest back: the proxy streams, it does not buffer.
            first = await asyncio.wait_for(r.content.readuntil(b"\n\n"), 10)
            assert b'"prompt_token_ids": [200, 201]' in first
            upstream.gate.set()
            rest = await r.content.read()
        assert rest.endswith(b"data: [DONE]\n\n")

        async with http.post(
            f"http://127.0.0.1:{agent_port}/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer sk-sclate-{RUN}-wrong"},
        ) as r:
            assert r.status == 401

    # Upstream saw the real key and the token flags, never the sandbox key.
    assert len(upstream.requests) == 2
    for h, b in upstream.requests:
        assert h["Authorization"] == f"Bearer {REAL}"
        assert b["return_token_ids"] is True and b["logprobs"] is True

    recs = {r.role: r for r in await wait_records(daemon, 2)}
    assert set(recs) == {"agent", "memory"}
    a, m = recs["agent"], recs["memory"]
    assert a.run == m.run == RUN
    assert a.prompt_token_ids == (100, 101, 102) and a.completion_token_ids == (7, 8)
    assert a.completion_logprobs == (-0.1, -0.2) and not a.stream
    assert m.stream and len(m.chunks) >= 2
    assert m.prompt_token_ids == (200, 201) and m.completion_token_ids == (9, 10)
    assert m.completion_logprobs == (-0.3, -0.4)
    assert m.response["choices"][0]["message"]["content"] == "hey"
    assert m.complete and m.finish_reason == "stop"
    assert m.chunks[-1].t_ns - m.chunks[0].t_ns > 0
    starts = {x["call_id"] for x in daemon.of_type("call_start")}
    ends = {x["call_id"] for x in daemon.of_type("call_end")}
    assert starts == ends == {a.call_id, m.call_id}
    assert daemon.leases.held == set()
    # The addon deletes a spooled record after the daemon's reply reaches it,
    # which can be a moment after the daemon stored it: wait for that, bounded.
    left: list[str] = []
    for _ in range(100):
        try:
            left = [p for p in os.listdir(d / "spool") if p.endswith(".json")]
        except FileNotFoundError:
            left = []
        if not left:
            break
        await asyncio.sleep(0.05)
    assert left == []


async def test_a_role_model_is_that_roles_call_asking_for_the_runs_model(
    stack: tuple[Upstream, FakeDaemon, int, int, Path],
) -> None:
    upstream, daemon, agent_port, _, _ = stack
    body = {"model": "sclate-role-memory", "messages": [{"role": "user", "content": "summarize"}]}
    async with aiohttp.ClientSession() as http, http.post(
        f"http://127.0.0.1:{agent_port}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"}
    ) as r:
        assert r.status == 200
    ((headers, sent),) = upstream.requests
    assert sent["model"] == RUN_MODEL and headers["Authorization"] == f"Bearer {REAL}"
    (rec,) = await wait_records(daemon, 1)
    # Arrived on the agent listener, attributed to the role its model names.
    assert rec.role == "memory" and rec.model == RUN_MODEL and "model" in rec.injected
