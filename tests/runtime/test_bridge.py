"""ModelBridge: the host end of the model path, alone and from inside a sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sclated.errors import InvalidArgument, ModelUnavailable
from sclated.runtime import ModelBridge, SandboxManager
from sclated.runtime._bridge import Upstream

from .conftest import SIM_START_NS


async def _http_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    path = head.split(b" ")[1]
    body = b'{"echo": "' + path + b'"}'
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def upstream(ssl_ctx: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    server = await asyncio.start_server(_http_handler, "127.0.0.1", 0, ssl=ssl_ctx)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def _get(sock: Path, path: str) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(sock))
    writer.write(f"GET {path} HTTP/1.1\r\nHost: model\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


async def test_bridge_plain_tcp(short_dir: Path) -> None:
    async with upstream() as port:
        bridge = ModelBridge(short_dir / "model.sock", "127.0.0.1", port)
        async with bridge:
            assert (short_dir / "model.sock").stat().st_mode & 0o777 == 0o666
            replies = await asyncio.gather(*(_get(bridge.socket_path, f"/v1/{i}")
                                             for i in range(5)))  # fmt: skip
        for i, reply in enumerate(replies):
            assert reply.startswith(b"HTTP/1.1 200 OK")
            assert reply.endswith(b'{"echo": "/v1/%d"}' % i)
        assert bridge.stats.connections == 5 and bridge.stats.active == 0
        assert bridge.stats.bytes_down > 5 * 60
    assert not (short_dir / "model.sock").exists()


async def test_bridge_upstream_down_answers_502(short_dir: Path) -> None:
    async with upstream() as port:
        pass  # the port is now closed
    async with ModelBridge(short_dir / "model.sock", "127.0.0.1", port) as bridge:
        reply = await _get(bridge.socket_path, "/v1/chat/completions")
    assert reply.startswith(b"HTTP/1.1 502 Bad Gateway")
    assert f"tcp://127.0.0.1:{port} is unreachable".encode() in reply
    assert bridge.stats.failed == 1 and bridge.stats.failing_since is not None
    assert f"tcp://127.0.0.1:{port} is unreachable" in bridge.stats.last_error


def _self_signed(dir_: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = dir_ / "cert.pem", dir_ / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))  # fmt: skip
    return cert_path, key_path


async def test_bridge_tls_upstream(short_dir: Path) -> None:
    cert, key = _self_signed(short_dir)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    async with upstream(server_ctx) as port:
        async with ModelBridge(short_dir / "m.sock", "127.0.0.1", port, tls=client_ctx,
                               server_hostname="localhost") as bridge:  # fmt: skip
            reply = await _get(bridge.socket_path, "/secure")
        assert reply.startswith(b"HTTP/1.1 200 OK") and reply.endswith(b'"/secure"}')
        # Without trusting the certificate the bridge refuses, saying why.
        async with ModelBridge(short_dir / "n.sock", "127.0.0.1", port, tls=True,
                               server_hostname="localhost") as strict:  # fmt: skip
            reply = await _get(strict.socket_path, "/secure")
        assert reply.startswith(b"HTTP/1.1 502") and b"CERTIFICATE_VERIFY_FAILED" in reply


def test_bridge_rejects_overlong_socket_path(short_dir: Path) -> None:
    with pytest.raises(InvalidArgument, match="107 bytes"):
        ModelBridge(short_dir / ("x" * 120) / "model.sock", "127.0.0.1", 80)


@pytest.mark.docker
async def test_model_path_from_inside_a_sandbox(manager: SandboxManager, sandbox_image: str, short_dir: Path) -> None:
    """Sandbox (no network) -> 127.0.0.1:18080 (socat) -> model.sock -> bridge -> host."""
    spec = manager.spec_for(image=sandbox_image, run="model", tenant="acme", run_dir=short_dir)
    sb = await manager.create(spec, short_dir, sim_ns=SIM_START_NS, probe=False)
    fetch = (
        "import urllib.request\n"
        "print(urllib.request.urlopen('http://127.0.0.1:18080/v1/models', timeout=10)"
        ".read().decode())\n"
    )
    async with upstream() as port, ModelBridge(sb.paths.model_socket, "127.0.0.1", port) as bridge:
        result = await sb.exec(["python3", "-c", fetch], user="nobody", timeout_s=30)
    assert result.ok, result
    assert result.text.strip() == '{"echo": "/v1/models"}'
    assert bridge.stats.connections == 1


# -- upstream health, a resolver, and failures named in the 502 ------------------------------


def _error(reply: bytes) -> dict[str, str]:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 502 Bad Gateway"), reply
    error: dict[str, str] = json.loads(body)["error"]
    assert error["type"] == "sclate_model_unavailable"
    return error


@contextlib.asynccontextmanager
async def serving(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def test_bridge_resolver_error_answers_502_with_its_message(short_dir: Path) -> None:
    cause = "the embedded model server died (SIGSEGV, signal 11) 6 times in 12 s; giving up; see /x/model.log"

    async def gone() -> Upstream:
        raise ModelUnavailable(cause)

    async with ModelBridge(short_dir / "model.sock", resolve=gone) as bridge:
        reply = await _get(bridge.socket_path, "/v1/chat/completions")
    assert _error(reply)["message"] == f"sclate: {cause}"
    assert bridge.stats.failed == 1 and bridge.stats.last_error == cause
    assert bridge.stats.failing_since is not None and bridge.unreachable_for_s() >= 0


async def test_bridge_upstream_closing_without_answering_is_a_named_502(short_dir: Path) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")  # the request arrived; the server "dies"
        writer.close()

    async def why() -> str:
        return "the embedded model server (pid 4242) died: SIGSEGV, signal 11"

    async with serving(hang_up) as port:
        async with ModelBridge(short_dir / "a.sock", "127.0.0.1", port, explain_drop=why) as bridge:
            reply = await _get(bridge.socket_path, "/v1/chat/completions")
        message = _error(reply)["message"]
        assert message == (
            f"sclate: the model endpoint tcp://127.0.0.1:{port} closed the connection without answering "
            "(it may have crashed mid-call); the embedded model server (pid 4242) died: SIGSEGV, signal 11"
        )
        assert bridge.stats.dropped == 1 and bridge.stats.failed == 0
        assert bridge.stats.failing_since is None and bridge.unreachable_for_s() == 0  # it did connect
        # Without a hook the 502 still names the drop.
        async with ModelBridge(short_dir / "b.sock", "127.0.0.1", port) as plain:
            reply = await _get(plain.socket_path, "/v1/models")
        assert "closed the connection without answering" in _error(reply)["message"]


async def test_bridge_passes_a_truncated_response_as_it_is(short_dir: Path) -> None:
    partial = b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"choices": ['

    async def die_mid_response(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(partial)
        await writer.drain()
        writer.close()

    async with serving(die_mid_response) as port, ModelBridge(short_dir / "m.sock", "127.0.0.1", port) as bridge:
        reply = await _get(bridge.socket_path, "/v1/chat/completions")
    assert reply == partial
    assert bridge.stats.dropped == 0


async def test_bridge_client_that_sends_nothing_is_no_drop(short_dir: Path) -> None:
    async def read_all(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    async with serving(read_all) as port, ModelBridge(short_dir / "m.sock", "127.0.0.1", port) as bridge:
        reader, writer = await asyncio.open_unix_connection(str(bridge.socket_path))
        writer.write_eof()
        assert await reader.read() == b""
        writer.close()
    assert bridge.stats.dropped == 0 and bridge.stats.connections == 1


async def test_bridge_health_follows_an_upstream_that_goes_away_and_comes_back(short_dir: Path) -> None:
    where: list[int] = []

    async def resolve() -> Upstream:
        return "127.0.0.1", where[-1], False

    async with ModelBridge(short_dir / "model.sock", resolve=resolve) as bridge:
        assert bridge.unreachable_for_s() == 0 and bridge.stats.failing_since is None
        async with upstream() as port:
            where.append(port)
            assert (await _get(bridge.socket_path, "/one")).startswith(b"HTTP/1.1 200 OK")
            assert bridge.unreachable_for_s() == 0 and bridge.port == port
        # Gone: each call is answered 502, and the outage is timed from the first failure.
        assert "is unreachable" in _error(await _get(bridge.socket_path, "/two"))["message"]
        since = bridge.stats.failing_since
        assert since is not None
        assert bridge.unreachable_for_s(now=since + 30) == pytest.approx(30)
        assert not await bridge.probe()
        assert "is unreachable" in _error(await _get(bridge.socket_path, "/three"))["message"]
        assert bridge.stats.failing_since == since and bridge.stats.failed == 3
        assert f"tcp://127.0.0.1:{port} is unreachable" in bridge.stats.last_error
        # Back, elsewhere: the next connection finds it and the outage is over.
        async with upstream() as new_port:
            where.append(new_port)
            assert await bridge.probe()
            assert bridge.unreachable_for_s() == 0 and bridge.stats.failing_since is None
            reply = await _get(bridge.socket_path, "/four")
        assert reply.endswith(b'{"echo": "/four"}') and bridge.port == new_port
        assert bridge.upstream == f"tcp://127.0.0.1:{new_port}"
    assert bridge.stats.connections == 4 and bridge.stats.failed == 3


def test_bridge_takes_an_address_or_a_resolver(short_dir: Path) -> None:
    async def resolve() -> Upstream:
        return "127.0.0.1", 80, False

    with pytest.raises(InvalidArgument, match="host and port, or a resolver"):
        ModelBridge(short_dir / "m.sock")
    with pytest.raises(InvalidArgument, match="not both"):
        ModelBridge(short_dir / "m.sock", "127.0.0.1", 80, resolve=resolve)
    assert ModelBridge(short_dir / "m.sock", resolve=resolve).upstream == "the model endpoint (not resolved yet)"


async def test_bridge_close_ends_open_connections_quietly(short_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # holds the connection open, never answers
        writer.close()

    async with serving(silent) as port:
        bridge = ModelBridge(short_dir / "m.sock", "127.0.0.1", port)
        await bridge.start()
        _, writer = await asyncio.open_unix_connection(str(bridge.socket_path))
        writer.write(b"GET /stream HTTP/1.1\r\nHost: model\r\n\r\n")
        await writer.drain()
        for _ in range(600):
            if bridge.stats.bytes_up:
                break
            await asyncio.sleep(0.05)
        assert bridge.stats.active == 1
        await bridge.close()
        await asyncio.sleep(0)  # let the stream server's done-callbacks run
        writer.close()
    assert bridge.stats.active == 0
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
