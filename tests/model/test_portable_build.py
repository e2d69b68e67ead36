"""The embedded model's compiled code runs on any x86-64-v3 machine: no AMX, no AVX-512."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from sclated.model._isa import llama_libraries, scan_library

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the portable target is x86-64")


def test_installed_llama_libraries_have_no_amx_or_avx512() -> None:
    libs = llama_libraries()
    assert any("ggml-cpu" in p.name for p in libs), f"no ggml CPU backend among {libs}"
    dirty = {str(r.path): (r.counts, r.examples) for r in map(scan_library, libs) if not r.clean}
    assert not dirty, f"non-portable instructions (rebuild with `make venv` after removing the wheel cache): {dirty}"


def test_the_scan_finds_amx_and_avx512_when_they_are_there(tmp_path: Path) -> None:
    """The check bites: a library that does contain AMX and AVX-512 code is reported."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to build the deliberately non-portable library")
    src = tmp_path / "bad.c"
    src.write_text(
        'void amx(void *cfg) { __asm__ volatile("ldtilecfg (%0)" :: "r"(cfg)); }\n'
        'void wide(void) { __asm__ volatile("vpxorq %zmm1, %zmm1, %zmm1"); }\n'
    )
    lib = tmp_path / "libbad.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    report = scan_library(lib)
    assert not report.clean
    assert report.counts["amx"] == 1 and report.counts["avx512"] == 1, report
