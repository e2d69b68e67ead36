"""A long-lived process inside a container, spoken to line by line.

Used for harnesses that take requests on stdin and report on stdout (the
reference harness's ``agent.py serve``). stderr is kept in a bounded tail for
error messages; it never blocks stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError

from sclated.errors import InvalidArgument, Unavailable

__all__ = ["ExecStream", "open_exec_stream"]

_STDOUT, _STDERR = 1, 2


class ExecStream:
    def __init__(self, stream: Any, execution: Any = None) -> None:
        self._stream = stream
        self._execution = execution
        self._buffer = b""
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self.stderr_tail: deque[str] = deque(maxlen=50)
        self._reader = asyncio.get_running_loop().create_task(self._read())
        self._closed = False

    async def _read(self) -> None:
        err = b""
        try:
            while True:
                msg = await self._stream.read_out()
                if msg is None:
                    break
                if msg.stream == _STDERR:
                    err += msg.data
                    *done, err = err.split(b"\n")
                    self.stderr_tail.extend(d.decode(errors="replace") for d in done)
                    continue
                self._buffer += msg.data
                *done, self._buffer = self._buffer.split(b"\n")
                for line in done:
                    self._lines.put_nowait(line.decode(errors="replace"))
        except (DockerError, OSError, asyncio.CancelledError):
            pass
        finally:
            if self._buffer:
                self._lines.put_nowait(self._buffer.decode(errors="replace"))
            self._lines.put_nowait(None)

    async def send(self, line: str) -> None:
        if self._closed:
            raise Unavailable("the process in the sandbox has ended", reason="EXEC_CLOSED")
        try:
            await self._stream.write_in((line + "\n").encode())
        except (DockerError, OSError, ConnectionError) as exc:
            raise Unavailable(f"cannot write to the process in the sandbox: {exc}", reason="EXEC_CLOSED") from exc

    async def readline(self) -> str:
        """The next stdout line; "" once the process ended."""
        line = await self._lines.get()
        if line is None:
            self._lines.put_nowait(None)  # stay at end of stream for later readers
            return ""
        return line

    async def exit_code(self) -> int | None:
        """How the process ended (its exit code; 128 + N for a death by signal N), or
        None while it runs or when the engine cannot say."""
        if self._execution is None:
            return None
        try:
            info = await self._execution.inspect()
        except (DockerError, OSError):
            return None
        code = info.get("ExitCode")
        return None if info.get("Running") or not isinstance(code, int) else code

    async def close(self) -> None:
        self._closed = True
        with contextlib.suppress(Exception):
            await self._stream.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


async def open_exec_stream(
    docker: aiodocker.Docker,
    container_id: str,
    cmd: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    workdir: str | None = None,
    user: str | None = None,
) -> ExecStream:
    if not cmd:
        raise InvalidArgument("exec: empty command", field="cmd")
    container = docker.containers.container(container_id)
    kwargs: dict[str, Any] = {"stdin": True, "stdout": True, "stderr": True, "tty": False}
    if env:
        kwargs["environment"] = dict(env)
    if workdir:
        kwargs["workdir"] = workdir
    if user:
        kwargs["user"] = user
    execution = await container.exec(list(cmd), **kwargs)
    stream = execution.start(detach=False)
    await stream._init()  # connect now, so a failure surfaces here and not at the first read
    return ExecStream(stream, execution)
