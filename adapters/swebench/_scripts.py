"""Eval scripts for rows that carry none (SWE-Gym), in the shape swebench 4.x made them.

Verified's 5.x rows carry their own ``eval_script``; swebench's test spec uses it
as is. SWE-Gym's rows have none, and its repositories are in no swebench
registry, so the script is made here the way ``make_eval_script_list_py`` did:
reset the files the test patch touches, apply it, run the test command on those
test files between the output markers, reset again. Hardened as upstream's later
fix did: files the test patch creates are removed first, and a test patch that
does not apply marks the log so grading reports it instead of testing the agent's
own version of the file.
"""

from __future__ import annotations

import hashlib
import re

from adapters.swebench._instances import SWEInstance

__all__ = ["SWE_GYM_TEST_COMMANDS", "make_eval_script", "patch_files"]

START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"

SWE_GYM_TEST_COMMANDS: dict[str, str] = {"getmoto/moto": "pytest -n0 -rA"}
"""Per-repository test commands of SWE-Gym's fork of the harness (the rest: ``pytest -rA``)."""

_NON_TEST_EXTS = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")


def patch_files(patch: str) -> tuple[list[str], list[str]]:
    """(files the patch modifies, files it creates), from its ``diff --git`` headers."""
    modified: list[str] = []
    created: list[str] = []
    current: str | None = None
    for line in patch.splitlines():
        m = re.match(r"^diff --git a/(\S+) b/(\S+)", line)
        if m:
            current = m.group(2)
            modified.append(current)
        elif line.startswith("new file mode") and current is not None:
            modified.remove(current)
            created.append(current)
    return modified, created


def make_eval_script(instance: SWEInstance, test_cmd: str, repo_dir: str = "/testbed") -> str:
    base = instance.base_commit
    modified, created = patch_files(instance.test_patch)
    tests = [f for f in modified + created if not f.endswith(_NON_TEST_EXTS)]
    delimiter = "EOF_" + hashlib.sha256(instance.test_patch.encode()).hexdigest()[:12]
    reset = f"git checkout {base} {' '.join(modified)}" if modified else ": no test file to reset"
    lines = [
        "#!/bin/bash",
        "set -uxo pipefail",
        "if [ -f /opt/miniconda3/bin/activate ]; then source /opt/miniconda3/bin/activate; conda activate testbed; fi",
        f"cd {repo_dir}",
        f"git config --global --add safe.directory {repo_dir}",
        "git status",
        "git show",
        f"git -c core.fileMode=false diff {base}",
        reset,
        *([f"rm -f {' '.join(created)}"] if created else []),
        f"git apply -v - <<'{delimiter}' || {{ echo '{APPLY_PATCH_FAIL}'; exit 1; }}",
        f"{instance.test_patch}\n{delimiter}",
        f": '{START_TEST_OUTPUT}'",
        f"{test_cmd} {' '.join(tests)}",
        f": '{END_TEST_OUTPUT}'",
        reset,
    ]
    return "\n".join(lines) + "\n"
