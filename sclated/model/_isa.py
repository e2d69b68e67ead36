"""Which instruction-set extensions the compiled llama.cpp libraries use.

The embedded model must run on any x86-64 machine of the usual kind. A build
compiled with the build machine's native flags can contain AMX (``ldtilecfg``,
``tileloadd``, ``tdpb*``) or AVX-512 (``zmm`` registers) code, and some VMs
advertise AMX in ``/proc/cpuinfo`` without granting its register state: the
first matrix multiply then dies with a general protection fault. This scan
reads the disassembly (binutils' ``objdump``) so a test can prove that the
installed libraries contain none of it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FORBIDDEN_PATTERNS", "IsaReport", "llama_libraries", "scan_library"]

FORBIDDEN_PATTERNS: dict[str, re.Pattern[str]] = {
    "amx": re.compile(r"\b(ldtilecfg|sttilecfg|tileloadd\w*|tilestored|tilerelease|tilezero|tdpb\w+|tdpfp16ps)\b"),
    "avx512": re.compile(r"%zmm\d+|%k[1-7]\b"),
}
"""Extensions outside the portable x86-64-v3 target (AVX2, FMA, F16C, BMI2)."""


@dataclass(frozen=True, slots=True)
class IsaReport:
    path: Path
    counts: dict[str, int]
    """Instructions found per forbidden extension (0 when clean)."""
    examples: dict[str, list[str]]

    @property
    def clean(self) -> bool:
        return not any(self.counts.values())


def llama_libraries() -> list[Path]:
    """The shared libraries of the installed llama-cpp-python package (ggml, llama)."""
    import llama_cpp

    root = Path(llama_cpp.__file__).resolve().parent
    return sorted(p for p in root.rglob("*.so*") if p.is_file() and not p.is_symlink())


def scan_library(path: Path) -> IsaReport:
    """Count forbidden instructions in ``path``'s code sections (needs ``objdump``)."""
    objdump = shutil.which("objdump")
    if objdump is None:
        raise FileNotFoundError("objdump (binutils) is needed to read the libraries' instructions")
    out = subprocess.run(
        [objdump, "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True, check=True
    ).stdout
    counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = {name: [] for name in FORBIDDEN_PATTERNS}
    for line in out.splitlines():
        if "\t" not in line:
            continue
        for name, pattern in FORBIDDEN_PATTERNS.items():
            if pattern.search(line):
                counts[name] += 1
                if len(examples[name]) < 3:
                    examples[name].append(line.strip())
    return IsaReport(path, {name: counts[name] for name in FORBIDDEN_PATTERNS}, examples)
