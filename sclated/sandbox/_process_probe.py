"""Which clock a harness's own process reads, found out inside its sandbox.

libfaketime reaches a process through ``LD_PRELOAD``, which only the dynamic
loader honours: a dynamically linked executable sees simulated time, a static
one (Codex's musl binary) reads the wall clock. The probe reads the
executable's ELF program headers (a ``PT_INTERP`` entry means a dynamic
loader runs it); a script is judged by its interpreter (``#!/usr/bin/env
node`` -> node).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from sclated.errors import FailedPrecondition

__all__ = ["PROBE_SCRIPT", "ProcessProbe", "parse_probe"]

PROBE_SCRIPT = r"""
import json, os, shutil, struct, sys

def kind(path, depth=0):
    real = os.path.realpath(path)
    with open(real, "rb") as f:
        head = f.read(512)  # a shebang line can be long; an ELF header is 64 bytes
        if head[:2] == b"#!" and depth < 3:
            words = head[2:].split(b"\n")[0].decode(errors="replace").split()
            if words and os.path.basename(words[0]) == "env" and len(words) > 1:
                words = [shutil.which(words[1]) or words[1]]
            return kind(words[0], depth + 1) if words else (real, "unknown")
        if head[:4] != b"\x7fELF":
            return real, "unknown"
        e = "<" if head[5] == 1 else ">"
        if head[4] == 2:
            (phoff,) = struct.unpack(e + "Q", head[32:40]); phentsize, phnum = struct.unpack(e + "HH", head[54:58])
        else:
            (phoff,) = struct.unpack(e + "I", head[28:32]); phentsize, phnum = struct.unpack(e + "HH", head[42:46])
        f.seek(phoff)
        for _ in range(phnum):
            if struct.unpack(e + "I", f.read(phentsize)[:4])[0] == 3:  # PT_INTERP
                return real, "dynamic"
        return real, "static"

path = shutil.which(sys.argv[1]) or sys.argv[1]
try:
    real, linked = kind(path)
except OSError as exc:
    print(json.dumps({"executable": path, "error": str(exc)}))
else:
    print(json.dumps({"executable": real, "linked": linked}))
"""
"""Run as ``python3 -c PROBE_SCRIPT EXECUTABLE`` inside the sandbox; prints one JSON object."""


@dataclass(frozen=True, slots=True)
class ProcessProbe:
    executable: str
    linked: Literal["dynamic", "static", "unknown"]

    @property
    def clock(self) -> Literal["simulated", "wall", "unknown"]:
        return {"dynamic": "simulated", "static": "wall"}.get(self.linked, "unknown")  # type: ignore[return-value]

    def as_dict(self) -> dict[str, Any]:
        return {"executable": self.executable, "linked": self.linked, "clock": self.clock}


def parse_probe(output: str, executable: str) -> ProcessProbe:
    """The probe's answer; FailedPrecondition naming the executable when it could not be read."""
    try:
        answer = json.loads(output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise FailedPrecondition(
            f"the process-clock probe of {executable} printed no answer: {output[-300:]!r}"
        ) from None
    if not isinstance(answer, dict) or answer.get("error"):
        why = answer.get("error") if isinstance(answer, dict) else answer
        raise FailedPrecondition(f"the harness executable {executable} cannot be read in its sandbox: {why}")
    found = answer.get("linked")
    linked: Literal["dynamic", "static", "unknown"] = (
        "dynamic" if found == "dynamic" else "static" if found == "static" else "unknown"
    )
    return ProcessProbe(str(answer.get("executable") or executable), linked)
