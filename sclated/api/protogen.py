"""Generates the Python stubs of sclate.v1 from protos/ into the client package.

The stubs are committed (so `pip install .` needs no code generation) and a
test regenerates them into a temporary folder to catch drift.
Run: `python -m sclated.api.protogen` (or `make proto`).
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "protos"
OUT_DIR = ROOT / "clients" / "python"
PROTOS = ["sclate/v1/sclate.proto"]


def generate(out_dir: Path = OUT_DIR) -> list[Path]:
    from grpc_tools import protoc

    include = str(resources.files("grpc_tools") / "_proto")
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(PROTO_DIR / p) for p in PROTOS),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed: " + " ".join(args))
    return sorted((out_dir / "sclate" / "v1").glob("*_pb2*.py*"))


def main() -> int:
    for path in generate():
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
