"""Generates the Python stubs of sclate.v1 from protos/ into the client distribution.

The stubs live in the neutral package ``sclate_api`` (``from sclate_api.v1
import sclate_pb2, sclate_pb2_grpc``), shipped by the client distribution
(clients/python) and imported by both the CLI and the daemon. The proto keeps
its own path (``sclate/v1/sclate.proto``, package ``sclate.v1``: what gRPC
reflection and other languages see); only the Python modules are placed under
``sclate_api``, by rewriting protoc's few references to their module path.

The stubs are committed (so `pip install` needs no code generation) and a
test regenerates them into a temporary folder to catch drift.
Run: `python -m sclated.api.protogen` (or `make proto`).
"""

from __future__ import annotations

import sys
import tempfile
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "protos"
OUT_DIR = ROOT / "clients" / "python"
PACKAGE = "sclate_api"
PROTOS = ["sclate/v1/sclate.proto"]

# protoc names the modules after the proto's path (sclate/v1 -> sclate.v1);
# each of these must occur, so a protoc that writes them otherwise fails here
# instead of generating stubs that import the wrong package.
_REWRITES: dict[str, list[tuple[str, str]]] = {
    "sclate_pb2.py": [("'sclate.v1.sclate_pb2'", f"'{PACKAGE}.v1.sclate_pb2'")],
    "sclate_pb2_grpc.py": [
        ("from sclate.v1 import sclate_pb2 ", f"from {PACKAGE}.v1 import sclate_pb2 "),
        ("generated code in sclate/v1/sclate_pb2_grpc.py", f"generated code in {PACKAGE}/v1/sclate_pb2_grpc.py"),
    ],
    "sclate_pb2.pyi": [],
}


def generate(out_dir: Path = OUT_DIR) -> list[Path]:
    """Write the stubs to ``out_dir/sclate_api/v1``; returns their paths."""
    from grpc_tools import protoc

    include = str(resources.files("grpc_tools") / "_proto")
    dest = out_dir / PACKAGE / "v1"
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sclate-protogen-") as tmp:
        args = [
            "protoc",
            f"-I{PROTO_DIR}",
            f"-I{include}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *(str(PROTO_DIR / p) for p in PROTOS),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed: " + " ".join(args))
        generated = sorted((Path(tmp) / "sclate" / "v1").glob("*_pb2*.py*"))
        if sorted(p.name for p in generated) != sorted(_REWRITES):
            raise RuntimeError(f"protoc wrote {[p.name for p in generated]}, expected {sorted(_REWRITES)}")
        for path in generated:
            text = path.read_text()
            for old, new in _REWRITES[path.name]:
                if old not in text:
                    raise RuntimeError(f"{path.name}: {old!r} not found; protoc's output changed")
                text = text.replace(old, new)
            (dest / path.name).write_text(text)
    return sorted(dest / name for name in _REWRITES)


def main() -> int:
    for path in generate():
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
