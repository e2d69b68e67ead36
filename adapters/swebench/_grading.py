"""Grading one SWE-bench instance as upstream grades it.

The agent's change is the diff of its copy of the repository against the commit
it was given (taken on the host: the agent's sandbox need not have git). In a
fresh container of the instance's environment image the diff is applied with
swebench's own commands, in its order, the tree reset between attempts (an empty
diff is not applied: the tests then run on the untouched tree, as swebench's
``skip_patch`` mode does); then the test spec's eval script runs with its output
(stdout and stderr as one stream, as swebench reads it) kept as the log, and
swebench's ``get_eval_report`` grades the log: resolved iff every FAIL_TO_PASS and
PASS_TO_PASS test passes. swebench runs in its own environment (``grader.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters import TaskContainer
from sclated.errors import FailedPrecondition, SclateError

__all__ = ["SWEBENCH_PYTHON_ENV", "ApplyResult", "GraderProcess", "apply_patch", "git", "run_eval", "swebench_python"]

SWEBENCH_PYTHON_ENV = "SCLATE_SWEBENCH_PYTHON"
"""Names the interpreter of swebench's environment (default: ``.venv-swebench`` beside the tree)."""

_GRADER = Path(__file__).with_name("grader.py")
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
APPLY_PATCH_PASS = ">>>>> Applied Patch"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"
PATCH_PATH = "/tmp/patch.diff"
EVAL_PATH = "/eval.sh"
WORKDIR = "/testbed"


def swebench_python() -> Path:
    configured = os.environ.get(SWEBENCH_PYTHON_ENV)
    default = Path(__file__).resolve().parents[2] / ".venv-swebench" / "bin" / "python"
    path = Path(configured) if configured else default
    if not path.exists():
        raise FailedPrecondition(
            f"SWE-bench grading needs swebench's own Python environment and {path} does not exist: "
            f"run `make venv` in the source tree, or set {SWEBENCH_PYTHON_ENV} to an interpreter with "
            "swebench==5.0.2 installed",
            reason="SWEBENCH_MISSING",
        )
    return path


class GraderProcess:
    """swebench's functions, one process per request (``grader.py``), off the event loop."""

    def __init__(self, python: Path | None = None, *, timeout_s: float = 300.0) -> None:
        self._python = python
        self._timeout_s = timeout_s

    async def _request(self, request: Mapping[str, Any]) -> dict[str, Any]:
        python = self._python or swebench_python()
        with tempfile.TemporaryDirectory(prefix="sclate-swe-grader-") as cwd:
            # swebench's harness reads a .env in its working directory: give it an empty one.
            proc = await asyncio.create_subprocess_exec(
                str(python),
                str(_GRADER),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
            )
            try:
                async with asyncio.timeout(self._timeout_s):
                    out, err = await proc.communicate(json.dumps(request).encode())
            except TimeoutError:
                proc.kill()
                await proc.wait()
                raise FailedPrecondition(
                    f"swebench's grader did not answer {request.get('op')!r} in {self._timeout_s:.0f} s"
                ) from None
        try:
            reply = json.loads(out.decode() or "{}")
        except json.JSONDecodeError:
            reply = {}
        if proc.returncode != 0 or not isinstance(reply, dict) or "error" in reply:
            detail = reply.get("error") if isinstance(reply, dict) and reply.get("error") else err.decode()[-800:]
            raise FailedPrecondition(f"swebench's grader failed on {request.get('op')!r}: {detail}")
        return reply

    async def specs(self, rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, str], list[str], str]:
        """(eval script per instance id, swebench's patch commands, swebench's version)."""
        reply = await self._request({"op": "specs", "instances": [dict(r) for r in rows]})
        return dict(reply["eval_scripts"]), list(reply["apply_cmds"]), str(reply["swebench"])

    async def report(self, row: Mapping[str, Any], patch: str, log_path: Path) -> tuple[dict[str, Any], str]:
        reply = await self._request({"op": "report", "instance": dict(row), "patch": patch, "log_path": str(log_path)})
        return dict(reply["report"]), str(reply["swebench"])


async def git(repo: Path, *args: str, timeout_s: float = 300.0) -> str:
    """Host git on a repository copied out of a container (owned by whoever copied it)."""
    proc = await asyncio.create_subprocess_exec(
        "git",
        "-c",
        "safe.directory=*",
        "-c",
        "core.fileMode=false",
        "-C",
        str(repo),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo)},
    )
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise FailedPrecondition(f"git {' '.join(args)} in {repo} took over {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        raise FailedPrecondition(f"git {' '.join(args)} in {repo} failed: {err.decode(errors='replace')[-400:]}")
    return out.decode("utf-8", "surrogateescape")


@dataclass(frozen=True, slots=True)
class ApplyResult:
    applied: bool
    command: str
    """The command that applied it ("" when nothing was applied)."""
    log: str


async def apply_patch(container: TaskContainer, patch: str, commands: Sequence[str]) -> ApplyResult:
    """swebench's harness order: each command in turn, the tree reset before a retry;
    if all fail, a patch that is already applied (reverse check) counts as applied."""
    await container.put_file(PATCH_PATH, patch.encode("utf-8", "surrogateescape"))
    log: list[str] = []
    last = ""
    for attempt, command in enumerate(commands):
        if attempt:
            await container.exec(["/bin/bash", "-c", f"cd {WORKDIR} && git checkout -- . ; git clean -fd"])
        out = await container.exec(["/bin/bash", "-c", f"cd {WORKDIR} && {command} {PATCH_PATH}"], timeout_s=300)
        last = out.output
        if out.exit_code == 0:
            log.append(f"{APPLY_PATCH_PASS}:\n{out.output}")
            return ApplyResult(True, command, "\n".join(log))
        log.append(f"Failed to apply patch to container: {command}")
    check = await container.exec(["/bin/bash", "-c", f"cd {WORKDIR} && git apply --check --reverse {PATCH_PATH}"])
    if check.exit_code == 0:
        log.append(f"{APPLY_PATCH_PASS}: verified already applied")
        return ApplyResult(True, "git apply --check --reverse", "\n".join(log))
    log.append(f"{APPLY_PATCH_FAIL}:\n{last}")
    return ApplyResult(False, "", "\n".join(log))


async def run_eval(container: TaskContainer, eval_script: str, *, timeout_s: float) -> tuple[str, bool]:
    """Run the eval script; (its merged output, whether it timed out)."""
    await container.put_file(EVAL_PATH, eval_script.encode(), mode=0o755)
    # One descriptor for both streams keeps their order (the markers come through
    # bash's xtrace on stderr, the test results on stdout).
    out = await container.exec(
        ["/bin/bash", "-c", f"/bin/bash {EVAL_PATH} > /tmp/test_output.txt 2>&1"], timeout_s=timeout_s
    )
    timed_out = out.exit_code == 124
    log = await container.exec(["cat", "/tmp/test_output.txt"], timeout_s=120)
    if log.exit_code != 0:
        raise FailedPrecondition(f"the eval script left no output: {log.output[-300:]}")
    text = log.output
    if timed_out:
        text += f"\n\nTimeout error: {timeout_s:.0f} seconds exceeded.\n{TESTS_TIMEOUT}\n"
    return text, timed_out


def quote_all(paths: Sequence[str]) -> str:
    return " ".join(shlex.quote(p) for p in paths)


def describe(error: BaseException) -> str:
    return error.message if isinstance(error, SclateError) else f"{type(error).__name__}: {error}"
