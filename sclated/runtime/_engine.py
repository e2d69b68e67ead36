"""Connecting to the Docker engine and the few raw endpoints aiodocker does not stream.

aiodocker's own helpers read archives and build contexts into memory or read
file objects synchronously on the event loop; for multi-hundred-megabyte root
filesystems and state archives we stream through its request method instead,
with file I/O pushed to threads.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import aiodocker
import aiohttp
from aiodocker.exceptions import DockerError

from sclated.errors import InvalidArgument, NotFound, RuntimeUnavailable

__all__ = [
    "CHUNK",
    "connect",
    "docker_error",
    "file_chunks",
    "is_not_found",
    "json_lines",
    "raw_query",
]

CHUNK = 1 << 20

_ENGINE_HINT = (
    "start it with `make system` (or `sudo systemctl start docker`), or point DOCKER_HOST at a running engine"
)


def _engine_url() -> str | None:
    return os.environ.get("DOCKER_HOST") or None


async def connect(*, ping: bool = True) -> aiodocker.Docker:
    """A client for the local engine; raises RuntimeUnavailable if it does not answer."""
    try:
        docker = aiodocker.Docker(url=_engine_url())
    except (ValueError, OSError) as exc:
        raise RuntimeUnavailable(f"cannot set up a Docker client ({exc}); {_ENGINE_HINT}") from exc
    if ping:
        try:
            async with asyncio.timeout(10):
                await docker.version()
        except (DockerError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            await docker.close()
            raise RuntimeUnavailable(f"the Docker engine is not answering ({_describe(exc)}); {_ENGINE_HINT}") from exc
    return docker


def _describe(exc: BaseException) -> str:
    if isinstance(exc, DockerError):
        return f"{exc.status}: {exc.message}"
    return str(exc) or type(exc).__name__


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, DockerError) and exc.status == 404


def docker_error(exc: DockerError, what: str) -> Exception:
    """Map an engine error to the sclate error tree, keeping the engine's words."""
    if exc.status == 404:
        return NotFound(f"{what}: {exc.message}")
    if exc.status == 400:
        return InvalidArgument(f"{what}: the engine rejected it: {exc.message}")
    if exc.status == 900:  # aiodocker's code for "cannot connect"
        return RuntimeUnavailable(f"{what}: {exc.message}; {_ENGINE_HINT}")
    return RuntimeUnavailable(f"{what}: engine error {exc.status}: {exc.message}")


async def file_chunks(path: Path, chunk: int = CHUNK) -> AsyncIterator[bytes]:
    """Read a file in chunks without blocking the event loop."""
    fh = await asyncio.to_thread(open, path, "rb")
    try:
        while True:
            data = await asyncio.to_thread(fh.read, chunk)
            if not data:
                return
            yield data
    finally:
        await asyncio.to_thread(fh.close)


def raw_query(
    docker: aiodocker.Docker,
    path: str,
    method: str = "GET",
    *,
    params: Mapping[str, Any] | None = None,
    data: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Any:
    """aiodocker's request context manager with no total timeout (streams run long)."""
    return docker._query(
        path,
        method,
        params=dict(params) if params else None,
        data=data,
        headers=dict(headers) if headers else None,
        timeout=aiohttp.ClientTimeout(total=None, sock_read=None, connect=30),
    )


async def json_lines(response: aiohttp.ClientResponse, on_item: Callable[[dict[str, Any]], None]) -> None:
    """Feed each JSON object of a progress stream (build, import) to on_item."""
    buf = b""
    async for chunk in response.content.iter_any():
        buf += chunk
        while True:
            line, sep, rest = buf.partition(b"\n")
            if not sep:
                break
            buf = rest
            _feed(line, on_item)
    _feed(buf, on_item)


def _feed(line: bytes, on_item: Callable[[dict[str, Any]], None]) -> None:
    line = line.strip()
    if not line:
        return
    try:
        item = json.loads(line)
    except ValueError:
        item = {"stream": line.decode(errors="replace")}
    if isinstance(item, dict):
        on_item(item)
