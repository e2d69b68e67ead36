"""Which clock a harness process reads: the ELF probe, run here on the host's own files."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from sclated.errors import FailedPrecondition
from sclated.sandbox._process_probe import PROBE_SCRIPT, parse_probe


def _probe(executable: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE_SCRIPT, executable], capture_output=True, text=True, check=True)
    return done.stdout


def _static_elf(path: Path) -> None:
    """A 64-bit little-endian ELF header with one PT_LOAD program header and no PT_INTERP."""
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[4], header[5] = 2, 1  # 64-bit, little-endian
    struct.pack_into("<Q", header, 32, 64)  # e_phoff
    struct.pack_into("<HH", header, 54, 56, 1)  # e_phentsize, e_phnum
    program = bytearray(56)
    struct.pack_into("<I", program, 0, 1)  # PT_LOAD
    path.write_bytes(bytes(header + program))


def test_a_dynamic_executable_reads_simulated_time() -> None:
    probe = parse_probe(_probe("python3"), "python3")
    assert probe.linked == "dynamic" and probe.clock == "simulated"
    assert os.path.isabs(probe.executable)


def test_a_static_executable_reads_the_wall_clock(tmp_path: Path) -> None:
    _static_elf(tmp_path / "codex")
    probe = parse_probe(_probe(str(tmp_path / "codex")), "codex")
    assert (probe.linked, probe.clock) == ("static", "wall")
    assert probe.as_dict() == {"executable": str(tmp_path / "codex"), "linked": "static", "clock": "wall"}


def test_a_script_is_judged_by_its_interpreter(tmp_path: Path) -> None:
    _static_elf(tmp_path / "static-node")
    (tmp_path / "by-env").write_text("#!/usr/bin/env python3\nprint(1)\n")
    (tmp_path / "by-path").write_text(f"#!{tmp_path / 'static-node'}\n")
    assert parse_probe(_probe(str(tmp_path / "by-env")), "by-env").clock == "simulated"
    assert parse_probe(_probe(str(tmp_path / "by-path")), "by-path").clock == "wall"
    (tmp_path / "text").write_text("not a program")
    assert parse_probe(_probe(str(tmp_path / "text")), "text").clock == "unknown"


def test_a_missing_executable_is_an_error_naming_it() -> None:
    with pytest.raises(FailedPrecondition, match="no-such-harness cannot be read in its sandbox"):
        parse_probe(_probe("no-such-harness"), "no-such-harness")
    with pytest.raises(FailedPrecondition, match="printed no answer"):
        parse_probe("", "claude")


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a shell")
def test_the_shell_is_dynamic_here() -> None:
    # The sandbox images are Debian: its programs are dynamically linked.
    assert parse_probe(_probe("sh"), "sh").clock == "simulated"
