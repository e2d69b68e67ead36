"""The daemon's embedded model: a `sclate model serve` child process, started
when the first run needs it and stopped with the daemon.

A separate process keeps llama.cpp's compute off the daemon's event loop and
out of its memory; any OpenAI/Anthropic-compatible endpoint can replace it
per run (``run.agent.model.base_url``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from sclated.errors import ModelUnavailable

__all__ = ["EmbeddedModel", "chat_once"]

log = logging.getLogger("sclated.model")


_START_ATTEMPTS = 3


class _KilledAtStart(Exception):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class EmbeddedModel:
    def __init__(
        self,
        *,
        log_path: Path,
        gguf: Path | None = None,
        start_timeout_s: float = 120.0,
        server_argv: Sequence[str] | None = None,
    ) -> None:
        """``server_argv`` replaces ``python -m sclated.model`` (``--host/--port`` are appended)."""
        self._server_argv = list(server_argv) if server_argv else [sys.executable, "-m", "sclated.model"]
        self._log_path = log_path
        self._gguf = gguf
        self._timeout = start_timeout_s
        self._proc: asyncio.subprocess.Process | None = None
        self._url: str | None = None
        self._lock = asyncio.Lock()

    async def url(self) -> str:
        """The base URL (``http://127.0.0.1:PORT``), starting the server if needed."""
        async with self._lock:
            if self._proc is not None and self._proc.returncode is None and self._url:
                return self._url
            for attempt in range(1, _START_ATTEMPTS + 1):
                try:
                    return await self._start()
                except _KilledAtStart as exc:
                    # llama.cpp has been seen to die by a signal while loading (rarely,
                    # not reproducibly): a daemon restarts its child rather than fail a run.
                    log.warning("embedded model server killed while starting (attempt %d): %s", attempt, exc)
            raise ModelUnavailable(
                f"the embedded model server was killed by a signal {_START_ATTEMPTS} times while starting; "
                f"see {self._log_path}"
            )

    async def _start(self) -> str:
        port = _free_port()
        args = [*self._server_argv, "--host", "127.0.0.1", "--port", str(port)]
        if self._gguf is not None:
            args += ["--gguf", str(self._gguf)]
        await asyncio.to_thread(self._log_path.parent.mkdir, parents=True, exist_ok=True)
        logf = await asyncio.to_thread(open, self._log_path, "ab")
        try:
            self._proc = await asyncio.create_subprocess_exec(*args, stdout=logf, stderr=logf)
        finally:
            logf.close()
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + self._timeout
        async with aiohttp.ClientSession() as http:
            while True:
                if self._proc.returncode is not None and self._proc.returncode < 0:
                    raise _KilledAtStart(f"signal {-self._proc.returncode}")
                if self._proc.returncode is not None:
                    tail = await asyncio.to_thread(self._tail)
                    raise ModelUnavailable(
                        f"the embedded model server exited ({self._proc.returncode}); log {self._log_path}:\n{tail}"
                    )
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=2)) as resp:
                        if resp.status == 200:
                            break
                if time.monotonic() > deadline:
                    await self.close()
                    raise ModelUnavailable(f"the embedded model server did not answer within {self._timeout:.0f} s")
                await asyncio.sleep(0.2)
        self._url = url
        log.info("embedded model serving at %s", url)
        return url

    def _tail(self) -> str:
        try:
            return self._log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    async def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def chat_once(base_url: str, prompt: str, *, model: str = "", max_tokens: int = 16, api_key: str = "") -> str:
    """One non-streaming chat call (the LongMemEval judge); temperature 0."""
    body: dict[str, Any] = {
        "model": model or "default",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    url = base_url.rstrip("/")
    if not url.endswith("/v1"):
        url += "/v1"
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{url}/chat/completions", json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=300)
            ) as resp,
        ):
            data = await resp.json()
            if resp.status != 200:
                raise ModelUnavailable(f"judge endpoint answered {resp.status}: {str(data)[:300]}")
    except aiohttp.ClientError as exc:
        raise ModelUnavailable(f"judge endpoint {base_url} unreachable: {exc}") from exc
    return str(data["choices"][0]["message"].get("content") or "")
