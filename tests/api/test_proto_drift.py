"""The committed Python stubs are exactly what protos/ generates."""

from __future__ import annotations

from pathlib import Path

from sclated.api.protogen import OUT_DIR, generate


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    fresh = generate(tmp_path)
    names = sorted(p.name for p in fresh)
    assert names == ["sclate_pb2.py", "sclate_pb2.pyi", "sclate_pb2_grpc.py"]
    committed = OUT_DIR / "sclate_api" / "v1"
    stale = [
        name
        for name in names
        if (tmp_path / "sclate_api" / "v1" / name).read_bytes() != (committed / name).read_bytes()
    ]
    assert not stale, f"{stale} differ from protos/; run `python -m sclated.api.protogen`"
