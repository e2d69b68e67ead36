"""The HTTP listener: read-only, bearer tokens, tenant isolation, /healthz, /metrics, config.

An in-process daemon with two tenants serves gRPC and HTTP on port 0; runs are
created through gRPC (the synthetic benchmark, the in-daemon scripted agent) and
read back over HTTP. The app alone is exercised with aiohttp's test client."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from aiohttp.test_utils import TestClient, TestServer
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.daemon import Daemon, DaemonConfig, build_parser, check_startup, load_config
from sclated.errors import ConfigError
from sclated.web import MetricsSource, build_app
from tests.api.conftest import TOKENS, synthetic_request
from tests.api.test_tls import _self_signed


@dataclass
class Served:
    daemon: Daemon
    stub: pb_grpc.SclateStub
    http: aiohttp.ClientSession
    base: str

    async def get(self, path: str, who: str | None = None, method: str = "GET") -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {TOKENS[who]}"} if who else {}
        async with self.http.request(method, self.base + path, headers=headers) as resp:
            text = await resp.text()
            try:
                return resp.status, json.loads(text) if text else None
            except json.JSONDecodeError:
                return resp.status, text

    async def create(self, who: str, **kw: Any) -> str:
        md = (("authorization", f"Bearer {TOKENS[who]}"),)
        run = await self.stub.CreateRun(synthetic_request(**kw), metadata=md)
        return str(run.name)

    async def finish(self, who: str, name: str) -> None:
        md = (("authorization", f"Bearer {TOKENS[who]}"),)
        async for _ in self.stub.WatchRun(pb.WatchRunRequest(name=name), metadata=md):
            pass


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{t} {tenant}\n" for tenant, t in TOKENS.items()))
    d = Daemon(
        DaemonConfig(
            state_dir=tmp_path / "state",
            listen="127.0.0.1:0",
            http_listen="127.0.0.1:0",
            tokens_file=tokens,
            metrics_readers=("alice",),
            ready_file=tmp_path / "ready.json",
            drain_grace_s=0.5,
        )
    )
    await d.start()
    assert d.http is not None and d.http.address is not None
    async with grpc.aio.insecure_channel(d.tcp_address or "") as ch, aiohttp.ClientSession() as http:
        yield Served(d, pb_grpc.SclateStub(ch), http, f"http://{d.http.address}")
    await d.stop()


async def test_only_get_and_head_and_refused_before_auth(served: Served) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, body = await served.get("/api/v1/runs", None, method)
        assert status == 405, (method, body)
        assert "read-only" in body["error"]
    async with served.http.head(
        served.base + "/api/v1/runs", headers={"Authorization": f"Bearer {TOKENS['bob']}"}
    ) as r:
        assert r.status == 200


async def test_reads_need_a_known_bearer_token(served: Served) -> None:
    assert (await served.get("/api/v1/runs"))[0] == 401
    async with served.http.get(
        served.base + "/api/v1/runs", headers={"Authorization": "Bearer not-a-token-at-all"}
    ) as r:
        assert r.status == 401 and "unknown bearer token" in (await r.json())["error"]
    async with served.http.get(served.base + "/api/v1/runs", headers={"Authorization": "Basic abc"}) as r:
        assert r.status == 401
    status, body = await served.get("/api/v1/whoami", "alice")
    assert (status, body) == (200, {"tenant": "alice"})


async def test_a_run_of_another_tenant_is_a_404_like_a_missing_one(served: Served) -> None:
    name = await served.create("alice", run_id="mine", days=2, events=3)
    await served.finish("alice", name)
    status, got = await served.get("/api/v1/runs/mine", "alice")
    assert status == 200 and got["run"]["state"] == "SUCCEEDED" and got["run"]["name"] == "runs/mine"
    for path in ("", "/events", "/events?follow=1", "/calls", "/trajectories"):
        theirs = await served.get(f"/api/v1/runs/mine{path}", "bob")
        missing = await served.get(f"/api/v1/runs/nope{path}", "bob")
        assert theirs[0] == missing[0] == 404, (path, theirs, missing)
        assert theirs[1]["error"] == "run 'runs/mine' not found", theirs
        assert missing[1]["error"] == "run 'runs/nope' not found", missing
    assert (await served.get("/api/v1/runs", "bob"))[1]["runs"] == []
    listed = (await served.get("/api/v1/runs?filter=state%3DSUCCEEDED", "alice"))[1]["runs"]
    assert [r["name"] for r in listed] == ["runs/mine"]
    bad = await served.get("/api/v1/runs?filter=colour%3Dred", "alice")
    assert bad[0] == 400 and bad[1]["field"] == "filter"


async def test_events_history_and_stream_match_the_run(served: Served) -> None:
    name = await served.create("alice", run_id="evs", days=2, events=3)
    # The stream starts while the run runs and ends with it.
    async with served.http.get(
        served.base + "/api/v1/runs/evs/events?follow=1", headers={"Authorization": f"Bearer {TOKENS['alice']}"}
    ) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("application/x-ndjson")
        lines = [json.loads(line) async for line in resp.content]
    assert lines[-1] == {"end": True}
    streamed = lines[:-1]
    assert [e["seq"] for e in streamed] == list(range(1, len(streamed) + 1))
    assert streamed[-1]["kind"] == "state" and streamed[-1]["payload"]["state"] == "SUCCEEDED"
    status, got = await served.get("/api/v1/runs/evs/events", "alice")
    assert status == 200 and got["events"] == streamed
    run = (await served.get("/api/v1/runs/evs", "alice"))[1]["run"]
    fires = [e for e in streamed if e["kind"] == "fire"]
    assert len(fires) == run["results"]["scheduler"]["events_fired"] > 0
    turns = [e for e in streamed if e["kind"] == "turn"]
    assert turns and all(t["payload"]["prompt"] for t in turns), turns
    later = (await served.get("/api/v1/runs/evs/events?after_seq=5", "alice"))[1]["events"]
    assert [e["seq"] for e in later] == [e["seq"] for e in streamed[5:]]
    assert name == "runs/evs"


async def test_captured_calls_are_read_through_the_runs_facade(served: Served) -> None:
    name = await served.create("alice", run_id="called", days=1, events=1)
    await served.finish("alice", name)
    record = {
        "call_id": "c1",
        "run": "runs/called",
        "role": "agent",
        "timings": {"start_ns": 5, "first_byte_ns": 7, "end_ns": 9},
        "completions": [{"index": 0, "token_ids": [1, 2], "logprobs": [-0.1, -2.0], "finish_reason": "stop"}],
    }
    assert await served.daemon.store.put_call("alice/called", "c1", "agent", record)
    status, got = await served.get("/api/v1/runs/called/calls", "alice")
    assert status == 200 and got["calls"] == [record]
    assert (await served.get("/api/v1/runs/called/calls", "bob"))[0] == 404


async def test_healthz_needs_no_token_and_says_503_while_stopping(served: Served, tmp_path: Path) -> None:
    assert (await served.get("/healthz"))[0] == 200
    ready = json.loads((tmp_path / "ready.json").read_text())
    assert served.daemon.http is not None and ready["http"] == served.daemon.http.address
    # A run that outlasts the drain keeps the listener up while the daemon stops.
    name = await served.create("alice", run_id="slow", days=3, events=4, turn_ms=400)
    md = (("authorization", f"Bearer {TOKENS['alice']}"),)
    async for ev in served.stub.WatchRun(pb.WatchRunRequest(name=name), metadata=md):
        if ev.WhichOneof("kind") == "turn":
            break
    stopping = asyncio.create_task(served.daemon.stop())
    await asyncio.sleep(0.1)
    status, body = await served.get("/healthz")
    assert status == 503 and "not serving" in body
    await stopping
    with pytest.raises(aiohttp.ClientConnectionError):
        await served.get("/healthz")


async def test_the_viewer_files_need_no_token(served: Served) -> None:
    async with served.http.get(served.base + "/") as resp:
        assert resp.status == 200 and resp.content_type == "text/html"
        assert "/static/viewer.js" in await resp.text()
    for name, kind in (("viewer.js", "text/javascript"), ("viewer.css", "text/css")):
        async with served.http.get(served.base + "/static/" + name) as resp:
            assert resp.status == 200 and resp.content_type == kind
    for bad in ("/static/..%2F_http.py", "/static/_http.py", "/static/missing.js", "/nowhere"):
        assert (await served.get(bad))[0] == 404, bad


class FixedMetrics:
    """A test double of the metrics source: fixed Prometheus text."""

    content_type = "text/plain; version=0.0.4; charset=utf-8"

    def render(self) -> bytes:
        return b"sclate_test_metric 1\n"


async def test_metrics_need_a_token_and_serve_the_source(served: Served) -> None:
    source: MetricsSource = FixedMetrics()
    app = build_app(served.daemon.manager, served.daemon.tokens, metrics=source)
    async with TestClient(TestServer(app, port=0)) as client:
        assert (await client.get("/metrics")).status == 401
        resp = await client.get("/metrics", headers={"Authorization": f"Bearer {TOKENS['bob']}"})
        assert resp.status == 200 and await resp.read() == b"sclate_test_metric 1\n"
        assert resp.headers["Content-Type"] == FixedMetrics.content_type
        assert (await client.post("/metrics")).status == 405
    # The daemon's own: its DaemonMetrics (what a run did moves them: tests/web/test_metrics.py).
    status, text = await served.get("/metrics", "alice")
    assert status == 200 and "sclate_api_requests_total" in text and "sclate_runs_executing 0.0" in text


async def test_only_metrics_readers_see_every_tenant_in_the_metrics(served: Served) -> None:
    # The daemon's metrics_readers is ("alice",): bob's token is valid but not an operator's.
    status, body = await served.get("/metrics", "bob")
    assert status == 403 and body["field"] == "metrics_readers" and "'bob'" in body["error"]
    app = build_app(served.daemon.manager, served.daemon.tokens, metrics=FixedMetrics(), metrics_readers=())
    async with TestClient(TestServer(app, port=0)) as client:
        for who in ("alice", "bob"):
            resp = await client.get("/metrics", headers={"Authorization": f"Bearer {TOKENS[who]}"})
            assert resp.status == 403
        # Runs stay readable: the restriction is the metrics' own.
        resp = await client.get("/api/v1/runs", headers={"Authorization": f"Bearer {TOKENS['bob']}"})
        assert resp.status == 200


async def test_the_listener_serves_https_with_the_daemons_certificate(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    d = Daemon(
        DaemonConfig(
            state_dir=tmp_path / "s", listen="localhost:0", http_listen="localhost:0", tls_cert=cert, tls_key=key
        )
    )
    await d.start()
    try:
        assert d.http is not None and d.http.address is not None
        port = d.http.address.rpartition(":")[2]
        trusted = ssl.create_default_context(cafile=str(cert))
        async with aiohttp.ClientSession() as http:
            async with http.get(f"https://localhost:{port}/api/v1/whoami", ssl=trusted) as resp:
                assert resp.status == 200 and (await resp.json())["tenant"] == "local"
            with pytest.raises(aiohttp.ClientError):
                async with http.get(f"http://localhost:{port}/healthz") as resp:
                    await resp.read()
    finally:
        await d.stop()


async def test_reads_wait_until_the_daemon_serves(served: Served) -> None:
    app = build_app(served.daemon.manager, served.daemon.tokens, serving=lambda: False)
    async with TestClient(TestServer(app, port=0)) as client:
        assert (await client.get("/healthz")).status == 503
        resp = await client.get("/api/v1/runs", headers={"Authorization": f"Bearer {TOKENS['bob']}"})
        assert resp.status == 503


# -- configuration -------------------------------------------------------------------------
def _config(tmp_path: Path, *flags: str) -> DaemonConfig:
    args: argparse.Namespace = build_parser().parse_args(["--state-dir", str(tmp_path / "s"), *flags])
    return load_config(args)


def test_http_listen_is_a_flag_and_off_by_default(tmp_path: Path) -> None:
    assert _config(tmp_path).http_listen == ""
    assert _config(tmp_path, "--http-listen", "127.0.0.1:0").http_listen == "127.0.0.1:0"


@pytest.mark.parametrize(
    ("value", "problem"),
    [("0.0.0.0:8080", "is not a loopback address"), ("localhost", "must be HOST:PORT"), ("h:99999", "HOST:PORT")],
)
def test_a_bad_http_listen_names_the_field(tmp_path: Path, value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, "--http-listen", value)
    assert info.value.field == "http_listen" and problem in info.value.message
    assert f"http_listen {value!r}" in info.value.message


def test_metrics_readers_are_a_repeatable_flag_of_tenant_names(tmp_path: Path) -> None:
    assert _config(tmp_path).metrics_readers == ()
    config = _config(tmp_path, "--metrics-reader", "ops", "--metrics-reader", "alice")
    assert config.metrics_readers == ("ops", "alice")
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, "--metrics-reader", "no such/tenant")
    assert info.value.field == "metrics_readers"
    path = tmp_path / "sclated.toml"
    path.write_text(f'state_dir = "{tmp_path / "s"}"\nmetrics_readers = "ops"\n')
    with pytest.raises(ConfigError) as info:
        load_config(build_parser().parse_args(["--config", str(path)]))
    assert info.value.field == "metrics_readers" and info.value.line == 2 and "list of strings" in info.value.message


def test_a_non_loopback_http_listen_is_allowed_with_tokens(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKENS['alice']} alice\n")
    config = _config(tmp_path, "--http-listen", "0.0.0.0:0", "--tokens-file", str(tokens))
    assert config.http_listen == "0.0.0.0:0"


def test_an_http_address_in_use_is_refused_at_startup(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = _config(tmp_path, "--http-listen", f"127.0.0.1:{port}", "--listen", "127.0.0.1:0")
        with pytest.raises(ConfigError) as info:
            check_startup(config)
    assert info.value.field == "http_listen" and "already in use" in info.value.message


def test_a_config_file_key_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "sclated.toml"
    path.write_text(f'state_dir = "{tmp_path / "s"}"\nhttp_listen = "10.0.0.1:80"\n')
    with pytest.raises(ConfigError) as info:
        load_config(build_parser().parse_args(["--config", str(path)]))
    assert info.value.field == "http_listen" and info.value.line == 2
