"""ModelBridge: the host end of the model path, alone and from inside a sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sclated.errors import InvalidArgument
from sclated.runtime import ModelBridge, SandboxManager

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
    assert bridge.stats.failed == 1


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
async def test_model_path_from_inside_a_sandbox(
    manager: SandboxManager, sandbox_image: str, short_dir: Path
) -> None:
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
