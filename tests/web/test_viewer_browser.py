"""The run viewer in a real headless Chromium (Debian's) against a real `sclated` process.

The daemon serves gRPC and HTTP on port 0 with two tenants; alice has a finished
run and a running one, bob a finished one. Chromium is driven over the DevTools
protocol (a websocket, through aiohttp: no other dependency). Screenshots go to
out/test-artefacts/web/."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.bench import start_daemon_process
from sclated.daemon import Daemon, DaemonConfig
from tests.api.conftest import TOKENS, synthetic_request
from tests.runs.capture_records import scenario

pytestmark = pytest.mark.e2e
ARTEFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artefacts" / "web"
SHOWS_NO_OBJECT = "!document.body.innerText.includes('[object ')"
"""No value on the page was turned into text by mistake (an element or a list in a text node)."""


class Page:
    """One browser tab over the DevTools protocol: commands, and the events kept."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[ident] = future
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        reply = await asyncio.wait_for(future, 30)
        assert "error" not in reply, (method, reply)
        result: dict[str, Any] = reply["result"]
        return result

    async def js(self, expression: str) -> Any:
        got = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in got, got
        return got["result"].get("value")

    async def until(self, expression: str, timeout_s: float = 30.0) -> Any:
        """Polls ``expression`` until it is truthy; its value."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            value = await self.js(expression)
            if value:
                return value
            if asyncio.get_running_loop().time() > deadline:
                text = await self.js("document.getElementById('main').innerText.slice(0, 800)")
                raise AssertionError(f"timed out waiting for {expression}; the page shows:\n{text}")
            await asyncio.sleep(0.1)

    async def screenshot(self, name: str) -> Path:
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTEFACTS / name
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def problems(self, *, allow_network_404: bool = False) -> list[dict[str, Any]]:
        """Console errors, uncaught exceptions and error log entries so far."""
        out = []
        for ev in self.events:
            method, params = ev["method"], ev.get("params", {})
            console_error = method == "Runtime.consoleAPICalled" and params.get("type") in (
                "error",
                "assert",
                "warning",
            )
            if method == "Runtime.exceptionThrown" or console_error:
                out.append(params)
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                entry = params["entry"]
                if allow_network_404 and entry.get("source") == "network" and "404" in entry.get("text", ""):
                    continue
                out.append(entry)
        return out


@contextlib.asynccontextmanager
async def chromium(profile: Path) -> AsyncIterator[Page]:
    exe = shutil.which("chromium")
    assert exe, "Debian's chromium is installed by scripts/setup-system.sh (make test)"
    proc = subprocess.Popen(
        [
            exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--remote-debugging-port=0", f"--user-data-dir={profile}",
            "--window-size=1400,1000", "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        port_file = profile / "DevToolsActivePort"
        for _ in range(300):
            if port_file.exists() and port_file.read_text().count("\n") >= 1:
                break
            assert proc.poll() is None, f"chromium exited with {proc.returncode}"
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
                targets = await resp.json()
            url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with http.ws_connect(url, max_msg_size=64 * 1024 * 1024) as ws:
                page = Page(ws)
                for domain in ("Page", "Runtime", "Log"):
                    await page.send(f"{domain}.enable")
                try:
                    yield page
                finally:
                    page.reader.cancel()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _api(base: str, path: str, who: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(base + path, headers={"Authorization": f"Bearer {TOKENS[who]}"}) as resp,
    ):
        return resp.status, await resp.json()


async def test_the_viewer_in_chromium(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{t} {tenant}\n" for tenant, t in TOKENS.items()))
    proc, ready = await start_daemon_process(
        tmp_path / "state", "--http-listen", "127.0.0.1:0", "--tokens-file", str(tokens)
    )
    base = f"http://{ready['http']}"
    alice = (("authorization", f"Bearer {TOKENS['alice']}"),)
    bob = (("authorization", f"Bearer {TOKENS['bob']}"),)
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            for run_id, md in (("done", alice), ("bobs", bob)):
                req = synthetic_request(days=2, events=3, turn_ms=5, run_id=run_id)
                req.run.labels["who"] = run_id
                run = await stub.CreateRun(req, metadata=md)
                async for _ in stub.WatchRun(pb.WatchRunRequest(name=run.name), metadata=md):
                    pass
            status, done = await _api(base, "/api/v1/runs/done", "alice")
            assert status == 200 and done["run"]["state"] == "SUCCEEDED"
            _, events = await _api(base, "/api/v1/runs/done/events", "alice")
            fires = sum(1 for e in events["events"] if e["kind"] == "fire")
            assert fires == done["run"]["results"]["scheduler"]["events_fired"] > 0

            async with chromium(tmp_path / "profile") as page:
                # The runs list: the token from the fragment, alice's runs only.
                await page.send("Page.navigate", url=f"{base}/#token={TOKENS['alice']}")
                await page.until("document.querySelectorAll('tr.run-row').length === 1")
                assert await page.js("location.hash") == "#/runs", "the token leaves the address bar"
                assert await page.js("document.getElementById('tenant').textContent") == "tenant alice"
                assert await page.js(SHOWS_NO_OBJECT), "a value rendered as [object ...]"
                await page.screenshot("runs.png")

                # A finished run: every fire on the timeline, its rounds, its measurements.
                await page.js("location.hash = '#/runs/done'")
                await page.until("document.querySelector('#run-state [data-state=SUCCEEDED]') !== null")
                await page.until(f"document.querySelector('#timeline').getAttribute('data-fires') === '{fires}'")
                assert await page.js("document.querySelectorAll('#timeline circle.fire').length") == fires
                rounds = done["run"]["results"]["rounds"]
                assert await page.js("document.querySelectorAll('#rounds tr.round-row').length") == rounds
                turns = sum(1 for e in events["events"] if e["kind"] == "turn")
                assert await page.js("document.querySelectorAll('.turnbox').length") == turns
                assert await page.js("document.querySelector('#scheduler') !== null")
                # Hover: a fire's tooltip; wheel: the timeline zooms.
                tip = await page.js(
                    """(() => { const c = document.querySelector('#timeline circle.fire');
                    const r = c.getBoundingClientRect();
                    c.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: r.x + 2, clientY: r.y + 2}));
                    const t = document.getElementById('tooltip'); return t.hidden ? '' : t.textContent; })()"""
                )
                assert tip.startswith("fire "), tip
                await page.screenshot("run-finished.png")
                moved = await page.js(
                    """(() => { const s = document.getElementById('timeline');
                    const last = () => [...s.querySelectorAll('circle.fire')].map(c => c.getAttribute('cx')).join();
                    const before = last(); const r = s.getBoundingClientRect();
                    s.dispatchEvent(new WheelEvent('wheel', {bubbles: true, cancelable: true, deltaY: -300,
                      clientX: r.x + r.width / 2, clientY: r.y + r.height / 2}));
                    return before !== last(); })()"""
                )
                assert moved, "a wheel over the timeline zooms it"
                await page.screenshot("run-finished-zoomed.png")
                assert await page.js(SHOWS_NO_OBJECT), "a value rendered as [object ...]"
                assert page.problems() == []

                # Another tenant's run: 404 from the API, "not found" on the page.
                status, body = await _api(base, "/api/v1/runs/bobs", "alice")
                assert status == 404 and body["error"] == "run 'runs/bobs' not found"
                await page.js("location.hash = '#/runs/bobs'")
                shown = await page.until("document.getElementById('notfound')?.textContent")
                assert shown == "Run runs/bobs not found."
                assert "who=bobs" not in await page.js("document.body.innerText")
                await page.screenshot("run-other-tenant.png")
                assert page.problems(allow_network_404=True) == []

                # A running run: its page follows it live to its end, no reload.
                slow = synthetic_request(days=3, events=4, turn_ms=600, run_id="live")
                await stub.CreateRun(slow, metadata=alice)
                await page.js("location.hash = '#/runs/live'")
                await page.until("document.querySelector('#run-state [data-state=RUNNING]') !== null")
                seen = int(await page.until("document.getElementById('main').dataset.events"))
                await page.until(f"Number(document.getElementById('main').dataset.events) > {seen}")
                await page.screenshot("run-live.png")
                navigations = sum(1 for e in page.events if e["method"] == "Page.frameNavigated")
                await page.until("document.querySelector('#run-state [data-state=SUCCEEDED]') !== null", 90)
                assert sum(1 for e in page.events if e["method"] == "Page.frameNavigated") == navigations
                _, live_events = await _api(base, "/api/v1/runs/live/events", "alice")
                live_fires = sum(1 for e in live_events["events"] if e["kind"] == "fire")
                await page.until(f"document.querySelector('#timeline').getAttribute('data-fires') === '{live_fires}'")
                await page.screenshot("run-live-ended.png")
                assert await page.js(SHOWS_NO_OBJECT), "a value rendered as [object ...]"

                # The list shows states live too: a run seen RUNNING turns SUCCEEDED in place.
                await stub.CreateRun(synthetic_request(days=2, events=3, turn_ms=600, run_id="live2"), metadata=alice)
                await page.js("location.hash = '#/runs'")
                row = "document.querySelector('tr.run-row[data-run=\"runs/live2\"] [data-state=%s]') !== null"
                await page.until(row % "RUNNING")
                await page.until(row % "SUCCEEDED", 90)
                assert sum(1 for e in page.events if e["method"] == "Page.frameNavigated") == navigations
                await page.js("location.hash = '#/runs?state=SUCCEEDED&harness=scripted'")
                await page.until("document.querySelectorAll('tr.run-row').length === 3")
                await page.js("location.hash = '#/runs?label=who%3Ddone'")
                await page.until("document.querySelectorAll('tr.run-row').length === 1")
                assert await page.js("document.querySelector('tr.run-row').dataset.run") == "runs/done"
                assert page.problems(allow_network_404=True) == []
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0


async def test_captured_calls_and_trajectories_in_chromium(tmp_path: Path) -> None:
    """A run's captured calls (a tool call, a failed call and its retry, a memory call, a
    sub-agent's) seeded in a real store as the proxy records them: the calls view shows
    each with its tokens shaded and masked, the graph one node per call of the samples."""
    daemon = Daemon(DaemonConfig(state_dir=tmp_path / "state", listen="127.0.0.1:0", http_listen="127.0.0.1:0"))
    await daemon.start()
    try:
        async with grpc.aio.insecure_channel(daemon.tcp_address or "") as ch:
            stub = pb_grpc.SclateStub(ch)
            run = await stub.CreateRun(synthetic_request(run_id="called"))
            async for _ in stub.WatchRun(pb.WatchRunRequest(name=run.name)):
                pass
        records = scenario("runs/called").records
        first = records[0]
        pieces = ["I", " will", " list", " files"]
        logprobs = first["completions"][0]["logprobs"]
        first["response"]["choices"][0]["logprobs"] = {
            "content": [{"token": t, "logprob": lp} for t, lp in zip(pieces, logprobs, strict=True)]
        }
        for r in records:
            assert await daemon.store.put_call("local/called", r["call_id"], r["role"], r)
        assert daemon.http is not None
        base = f"http://{daemon.http.address}"
        async with aiohttp.ClientSession() as http, http.get(base + "/api/v1/runs/called/trajectories") as resp:
            samples = (await resp.json())["samples"]
        assert samples, "the seeded calls make trajectories"
        nodes = {c for s in samples for c in s["call_ids"]}

        async with chromium(tmp_path / "profile") as page:
            await page.send("Page.navigate", url=f"{base}/#/runs/called")
            await page.until("document.getElementById('main')?.dataset.stream === 'ended'")
            assert await page.js("document.querySelectorAll('details.call').length") == len(records)
            await page.js("document.querySelectorAll('details.call').forEach(d => d.open = true)")
            row = await page.js(
                "[...document.querySelector('details.call[data-call=\"call-a1\"]').querySelectorAll('.tokens')]"
                ".map(r => [...r.children].map(s => s.textContent))"
            )
            assert row == [[str(t) for t in first["prompt_token_ids"]], pieces], row
            shaded = await page.js(
                "document.querySelectorAll('details.call[data-call=\"call-a1\"] .tokens span[style*=background]')"
                ".length"
            )
            assert shaded == len(pieces), "each sampled token is shaded by its probability"
            assert await page.js("document.querySelectorAll('.tokens span.trained').length") > 0
            # The tool call the model asked for, in the turn whose time it fell in.
            tool = await page.js("[...document.querySelectorAll('.turnbox .tool')].map(p => p.innerText)")
            assert tool == ['tool call ls\n{"path": "/data"}'], tool
            assert await page.js("document.querySelectorAll('#trajgraph rect.node').length") == len(nodes)
            assert await page.js(SHOWS_NO_OBJECT), "a value rendered as [object ...]"
            await page.js("document.getElementById('sec-calls').scrollIntoView()")
            await page.screenshot("run-calls.png")
            assert page.problems() == []
    finally:
        await daemon.stop()


@pytest.mark.docker
@pytest.mark.model
async def test_a_tiny_metaclaw_run_in_chromium(tmp_path: Path) -> None:
    """MetaClaw's tiny scenario (its first day) with the reference harness in a Docker
    sandbox and the embedded model: the page shows every fire, every captured call with
    its sampled tokens, and the trajectories, with no console error."""
    proc, ready = await start_daemon_process(tmp_path / "state", "--http-listen", "127.0.0.1:0")
    base = f"http://{ready['http']}"
    try:
        async with grpc.aio.insecure_channel(ready["tcp"]) as ch:
            stub = pb_grpc.SclateStub(ch)
            run = pb.Run(
                benchmark=pb.BenchmarkSpec(name="metaclaw", scenario="tiny", subset=["day01"]),
                agent=pb.AgentSpec(harness="reference"),
            )
            run.agent.options.update({"max_tokens": 24, "max_steps": 2})
            created = await stub.CreateRun(pb.CreateRunRequest(run=run, run_id="tiny"))
            async for _ in stub.WatchRun(pb.WatchRunRequest(name=created.name)):
                pass
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/api/v1/runs/tiny") as resp:
                got = (await resp.json())["run"]
            async with http.get(base + "/api/v1/runs/tiny/events") as resp:
                events = (await resp.json())["events"]
            async with http.get(base + "/api/v1/runs/tiny/calls") as resp:
                calls = (await resp.json())["calls"]
        assert got["state"] == "SUCCEEDED", got["reason"]
        fires = sum(1 for e in events if e["kind"] == "fire")
        sampled = [c for c in calls if any(cp.get("token_ids") for cp in c.get("completions", []))]
        assert fires > 0 and sampled, (fires, len(calls))

        async with chromium(tmp_path / "profile") as page:
            await page.send("Page.navigate", url=f"{base}/#/runs/tiny")
            await page.until("document.getElementById('main')?.dataset.stream === 'ended'", 60)
            assert await page.js("document.querySelectorAll('#timeline circle.fire').length") == fires
            assert await page.js("document.querySelectorAll('details.call').length") == len(calls)
            rounds = got["results"]["rounds"]
            assert await page.js("document.querySelectorAll('#rounds tr.round-row').length") == rounds
            first = sampled[0]
            await page.js(f"document.querySelector('details.call[data-call=\"{first['call_id']}\"]').open = true")
            shown = await page.js(
                f"document.querySelector('details.call[data-call=\"{first['call_id']}\"] .tokens:last-of-type')"
                ".children.length"
            )
            assert shown == len(first["completions"][-1]["token_ids"])
            assert await page.js("document.querySelectorAll('#trajgraph rect.node').length") > 0
            assert await page.js(SHOWS_NO_OBJECT), "a value rendered as [object ...]"
            await page.screenshot("run-metaclaw-tiny.png")
            assert page.problems() == []
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
