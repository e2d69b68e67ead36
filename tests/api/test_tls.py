"""The daemon serves TLS when given a certificate and key."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sclate_api.v1 import sclate_pb2 as pb
from sclate_api.v1 import sclate_pb2_grpc as pb_grpc

from sclated.daemon import Daemon, DaemonConfig


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "tls.crt", tmp / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


async def test_tls_listener(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    d = Daemon(DaemonConfig(state_dir=tmp_path / "s", listen="localhost:0", tls_cert=cert, tls_key=key))
    await d.start()
    try:
        port = (d.tcp_address or "").rpartition(":")[2]
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        async with grpc.aio.secure_channel(f"localhost:{port}", creds) as ch:
            resp = await pb_grpc.SclateStub(ch).ListBenchmarks(pb.ListBenchmarksRequest())
            assert "synthetic" in [b.name for b in resp.benchmarks]
        async with grpc.aio.insecure_channel(f"localhost:{port}") as plain:
            try:
                await pb_grpc.SclateStub(plain).ListBenchmarks(pb.ListBenchmarksRequest(), timeout=5)
                raise AssertionError("a plaintext call to a TLS listener must fail")
            except grpc.aio.AioRpcError as exc:
                assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        await d.stop()
