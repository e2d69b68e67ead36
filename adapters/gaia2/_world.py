"""The host side of a Gaia2 world: ARE's own interpreter, one process per run.

ARE (``meta-agents-research-environments``) pins exact versions of numpy,
pandas and pydantic that the daemon's environment cannot share, so it lives in
its own virtual environment (``make venv`` builds ``.venv-are`` from
``adapters/gaia2/requirements-are.txt``) and the world runs there as a child
process speaking JSON lines (see ``world_server.py``). Nothing here blocks the
event loop: the process is driven through asyncio pipes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sclated.errors import FailedPrecondition, InvalidArgument, SclateError

__all__ = ["ARE_PYTHON_ENV", "WorldProcess", "are_python"]

ARE_PYTHON_ENV = "SCLATE_ARE_PYTHON"
"""Names the interpreter of ARE's environment (default: ``.venv-are`` beside the tree)."""

_SERVER = Path(__file__).with_name("world_server.py")
_STREAM_LIMIT = 1 << 30
"""An ``are_oracle`` answer carries every executed event: megabytes for 10,000 events."""


def are_python() -> Path:
    """The interpreter that has ARE installed, or a FailedPrecondition saying how to get one."""
    configured = os.environ.get(ARE_PYTHON_ENV)
    default = Path(__file__).resolve().parents[2] / ".venv-are" / "bin" / "python"
    path = Path(configured) if configured else default
    if not path.exists():
        raise FailedPrecondition(
            f"Gaia2 needs ARE's own Python environment and {path} does not exist: "
            f"run `make venv` in the source tree, or set {ARE_PYTHON_ENV} to an interpreter "
            "with meta-agents-research-environments==1.2.0 installed",
            reason="ARE_MISSING",
        )
    return path


class WorldProcess:
    """One ARE world process: ``start``, ``request`` (one at a time), ``close``."""

    def __init__(
        self,
        *,
        python: Path | None = None,
        cwd: Path | None = None,
        judge: Callable[[list[dict[str, Any]]], Awaitable[str]] | None = None,
    ) -> None:
        """``judge``: answers ARE's judge when the world asks (its messages, the reply's text)."""
        self._python = python
        self._cwd = cwd
        self._judge = judge
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._stderr: deque[str] = deque(maxlen=40)
        self._stderr_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        python = self._python or are_python()
        env = dict(os.environ)
        # ARE seeds each app's RNG with hash(f"{seed}_{name}"): fixed string hashing keeps
        # prices and ids the same in a run, its replay and ARE's own oracle run.
        env["PYTHONHASHSEED"] = "0"
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        env.pop("PYTHONPATH", None)
        cwd = self._cwd
        if cwd is not None:
            # ARE's config module reads `.env` from the working directory and makes a
            # temporary directory on import: both stay inside the run's own folder.
            await asyncio.to_thread(cwd.mkdir, parents=True, exist_ok=True)
            env["TMPDIR"] = str(cwd)
        self._proc = await asyncio.create_subprocess_exec(
            str(python),
            "-u",
            str(_SERVER),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(cwd) if cwd is not None else None,
            env=env,
            limit=_STREAM_LIMIT,
        )
        self._stderr_task = asyncio.get_running_loop().create_task(self._read_stderr())

    async def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        while line := await self._proc.stderr.readline():
            self._stderr.append(line.decode(errors="replace").rstrip())

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """One operation; ARE's own refusals come back as InvalidArgument naming the field."""
        async with self._lock:
            proc = self._proc
            if proc is None or proc.stdin is None or proc.stdout is None:
                raise FailedPrecondition("the Gaia2 world process is not running", reason="WORLD_DOWN")
            try:
                proc.stdin.write((json.dumps({"op": op, **fields}) + "\n").encode())
                await proc.stdin.drain()
                line = await proc.stdout.readline()
                while line and line.startswith(b'{"judge":'):
                    # ARE's judge asks, in the middle of this operation; the answer goes back.
                    proc.stdin.write((json.dumps(await self._answer_judge(line)) + "\n").encode())
                    await proc.stdin.drain()
                    line = await proc.stdout.readline()
            except (BrokenPipeError, ConnectionResetError):
                line = b""
            if not line:
                code = await proc.wait()
                tail = " | ".join(list(self._stderr)[-5:])
                raise FailedPrecondition(
                    f"the Gaia2 world process exited (code {code}) during {op!r}: {tail}", reason="WORLD_DOWN"
                )
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            err = answer.get("error") or {}
            message = f"Gaia2 world {op}: {err.get('message', 'failed')}"
            if err.get("type") == "WorldError":
                raise InvalidArgument(message, field=f"gaia2.{err.get('field') or op}")
            raise SclateError(message)
        return answer

    async def _answer_judge(self, line: bytes) -> dict[str, Any]:
        if self._judge is None:
            return {"judge_error": "this run has no judge model"}
        try:
            messages = json.loads(line)["judge"]["messages"]
            return {"judge_reply": {"text": await self._judge(messages)}}
        except SclateError as exc:
            return {"judge_error": exc.message}

    async def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        if self._stderr_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._stderr_task, 5)

    def stderr_tail(self) -> list[str]:
        return list(self._stderr)
