"""The daemon's embedded model: a `sclated model serve` child process, started
when the first run needs it, watched for its whole life, and stopped with the
daemon.

A separate process keeps llama.cpp's compute off the daemon's event loop and
out of its memory; any OpenAI/Anthropic-compatible endpoint can replace it
per run (``run.agent.model.base_url``).

A natively compiled llama.cpp has been seen to die by SIGSEGV (a general
protection fault) on its first token, long after it answered ``/health``. So a
supervisor task owns the child from its first start to ``close()``: it waits
for the child's exit at any time, logs how it died (signal name, exit code,
log path, the log's last lines) and starts it again, with exponential backoff
and at most ``max_restarts`` deaths in a sliding ``restart_window_s``, on the
same port when it is free (so a bridge or a URL handed out earlier keeps
working). When it gives up, :meth:`EmbeddedModel.url` raises
:class:`ModelUnavailable` naming the cause and what to do.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import aiohttp

from sclated.errors import ModelUnavailable

__all__ = ["EmbeddedModel", "ModelState", "ModelStatus"]

log = logging.getLogger("sclated.model")

_HOST = "127.0.0.1"
_TAIL_LINES = 20
_TAIL_BYTES = 8192
# Signals by which a crashing native library dies (as opposed to being stopped).
_CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT})
_REBUILD_HINT = (
    "the llama.cpp build may not suit this CPU: run `sclated doctor`, or rebuild it with "
    "`.venv/bin/pip uninstall -y llama-cpp-python; rm -rf ~/.cache/sclate/wheels/llama-*; make venv`"
)

ModelState = Literal["stopped", "starting", "serving", "restarting", "failed"]


@dataclass(frozen=True)
class ModelStatus:
    """A read-only view of the embedded model server, for the doctor and runs.

    ``state``: ``stopped`` (never started, or closed), ``starting`` (first
    start), ``serving``, ``restarting`` (it died; waiting or starting again),
    ``failed`` (gave up; ``error`` says why). ``last_exit`` describes its last
    unintended exit (``"SIGSEGV, signal 11"``, ``"exit code 1"``), if any.
    """

    state: ModelState
    pid: int | None
    url: str | None
    restarts: int
    last_exit: str | None
    error: str | None
    log_path: str


class _Died(Exception):
    def __init__(self, returncode: int) -> None:
        super().__init__(_describe_exit(returncode))
        self.returncode = returncode


class _NoAnswer(Exception):
    pass


def _describe_exit(returncode: int) -> str:
    """``SIGSEGV, signal 11`` for a signal death, ``exit code N`` otherwise."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"{name}, signal {-returncode}"
    return f"exit code {returncode}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((_HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _port_is_free(port: int) -> bool:
    # SO_REUSEADDR as the server sets it: connections the dead child left in
    # TIME_WAIT do not make its port look taken, a listener does.
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((_HOST, port))
        except OSError:
            return False
        return True


def _pick_port(preferred: int | None) -> int:
    """``preferred`` when it is free, else a new free port."""
    if preferred is not None and _port_is_free(preferred):
        return preferred
    return _free_port()


def _seconds(s: float) -> str:
    return f"{s:.1f}" if s < 10 else f"{s:.0f}"


class EmbeddedModel:
    """The embedded model server, started on first use and kept alive.

    ``url()`` starts it (or waits for a start or restart in progress);
    ``endpoint()`` is the same as ``(host, port, tls)`` for
    ``ModelBridge(resolve=...)``; ``explain_drop()`` says whether it just died,
    for ``ModelBridge(explain_drop=...)``; ``status`` is a read-only snapshot;
    ``close()`` stops it.

    Restarts: a death (a signal, or any exit it was not asked for) is followed
    by a new start after ``backoff_s`` (doubling per death in the window, at
    most ``backoff_max_s``), on the same port when it is free. More than
    ``max_restarts`` deaths within ``restart_window_s`` and it gives up
    (``state == "failed"``): ``url()`` raises :class:`ModelUnavailable` naming
    the cause, until older deaths leave the window; then a call tries again.
    An exit with an error code before it ever answered is a setup problem (a
    missing model file or package) and fails at once, naming the log's last
    lines; a later call tries again.
    """

    def __init__(
        self,
        *,
        log_path: Path,
        gguf: Path | None = None,
        start_timeout_s: float = 120.0,
        server_argv: Sequence[str] | None = None,
        max_restarts: int = 5,
        restart_window_s: float = 600.0,
        backoff_s: float = 0.5,
        backoff_max_s: float = 15.0,
        wait_timeout_s: float | None = None,
        stop_timeout_s: float = 10.0,
        n_ctx: int | None = None,
    ) -> None:
        """``server_argv`` replaces ``python -m sclated.model`` (``--host``, ``--port`` and
        ``--parent-pid``, this process's pid, are appended: the server dies with us).

        ``url()`` waits at most ``wait_timeout_s`` (default ``start_timeout_s +
        backoff_max_s``) for a start or restart in progress.
        """
        self._server_argv = list(server_argv) if server_argv else [sys.executable, "-m", "sclated.model"]
        self._log_path = log_path
        self._gguf = gguf
        self._n_ctx = n_ctx
        self._timeout = start_timeout_s
        self._max_restarts = max_restarts
        self._window = restart_window_s
        self._backoff = backoff_s
        self._backoff_max = backoff_max_s
        self._wait_timeout = start_timeout_s + backoff_max_s if wait_timeout_s is None else wait_timeout_s
        self._stop_timeout = stop_timeout_s
        self._proc: asyncio.subprocess.Process | None = None
        self._port: int | None = None
        self._url: str | None = None
        self._state: ModelState = "stopped"
        self._error: str | None = None
        self._restarts = 0
        self._deaths: collections.deque[tuple[float, int]] = collections.deque()  # (monotonic, returncode)
        self._last_exit: str | None = None
        self._last_exit_at: float | None = None
        self._served = False  # it answered /health at least once
        self._new_port = False  # the next start takes a new port
        self._supervisor: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    # -- public --------------------------------------------------------------------------
    @property
    def status(self) -> ModelStatus:
        proc = self._proc
        alive = proc is not None and proc.returncode is None
        return ModelStatus(
            state=self._state,
            pid=proc.pid if proc is not None and alive else None,
            url=self._url if self._state == "serving" and alive else None,
            restarts=self._restarts,
            last_exit=self._last_exit,
            error=self._error if self._state == "failed" else None,
            log_path=str(self._log_path),
        )

    async def url(self, *, timeout_s: float | None = None) -> str:
        """The base URL (``http://127.0.0.1:PORT``), starting the server if needed.

        While it starts or restarts, waits up to ``timeout_s`` (default
        ``wait_timeout_s``); raises :class:`ModelUnavailable` when it gave up
        (the message names the cause and what to do), did not come back in
        time, or is being closed.
        """
        wait_s = self._wait_timeout if timeout_s is None else timeout_s
        deadline = time.monotonic() + wait_s
        self._supervise_if_needed()
        while True:
            proc = self._proc
            if self._state == "serving" and proc is not None and proc.returncode is None and self._url:
                return self._url
            if self._state == "failed":
                raise ModelUnavailable(self._error or f"the embedded model server failed; see {self._log_path}")
            if self._state == "stopped":
                raise ModelUnavailable("the embedded model server was stopped (the daemon is shutting down)")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                cause = f"it died ({self._last_exit})" if self._last_exit else "it is still loading"
                raise ModelUnavailable(
                    f"the embedded model server is {self._state} ({cause}) and did not answer within "
                    f"{_seconds(wait_s)} s; see {self._log_path}"
                )
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                # The supervisor announces every change; the timeout only bounds a missed one.
                await asyncio.wait_for(changed.wait(), min(remaining, 1.0))

    async def endpoint(self) -> tuple[str, int, bool]:
        """``(host, port, tls)`` of the server as it is now, for ``ModelBridge(resolve=...)``.

        Starts it or waits for a restart as :meth:`url` does, and raises as it does.
        """
        await self.url()
        assert self._port is not None
        return _HOST, self._port, False

    async def explain_drop(self, *, wait_s: float = 2.0) -> str | None:
        """Why the server may just have dropped a connection: its death, if it
        died within the last minute or dies within ``wait_s``; None otherwise.

        For ``ModelBridge(explain_drop=...)``: a child that crashes mid-call has
        its sockets closed by the kernel before the daemon reaps it, so this
        waits briefly for the exit to be seen.
        """
        if self._supervisor is None:
            return None  # not started, or being closed: a drop is no crash
        proc = self._proc
        if proc is not None and proc.returncode is not None:
            return self._died(proc)
        if recent := self._recent_exit():
            return recent
        if proc is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), wait_s)
        if proc is not None and proc.returncode is not None and self._supervisor is not None:
            return self._died(proc)
        return None

    async def close(self) -> None:
        """Stop the watcher first (so this stop is never taken for a crash), then
        the child: SIGTERM, then SIGKILL after ``stop_timeout_s``."""
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.cancel()
            await asyncio.wait({supervisor})
        proc, self._proc = self._proc, None
        self._url = None
        self._set_state("stopped")
        if proc is not None:
            await self._stop(proc)

    # -- supervision -----------------------------------------------------------------------
    def _set_state(self, state: ModelState) -> None:
        self._state = state
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _supervise_if_needed(self) -> None:
        if self._supervisor is not None and not self._supervisor.done():
            return
        if self._state == "failed" and not self._may_try_again():
            return
        self._error = None
        self._set_state("restarting" if self._served else "starting")
        self._supervisor = asyncio.create_task(self._supervise(), name="sclated-model-watcher")

    def _prune(self, now: float) -> None:
        while self._deaths and now - self._deaths[0][0] > self._window:
            self._deaths.popleft()

    def _may_try_again(self) -> bool:
        self._prune(time.monotonic())
        return len(self._deaths) <= self._max_restarts

    async def _supervise(self) -> None:
        """Start the child and wait for its exit, again and again, until closed or out of restarts."""
        try:
            while True:
                try:
                    proc = await self._start()
                except _Died as died:
                    if died.returncode > 0 and not self._served:
                        # An error exit before it ever answered is a setup problem
                        # (no model file, a missing package): starting again won't help.
                        self._record_death(died.returncode)
                        tail = await asyncio.to_thread(self._tail)
                        message = f"the embedded model server exited ({died}) while starting; see {self._log_path}"
                        log.error("%s; last lines of its log:\n%s", message, tail)
                        self._fail(f"{message}:\n{tail}")
                        return
                    if not await self._after_death(died.returncode, starting=True):
                        return
                    continue
                except _NoAnswer:
                    message = (
                        f"the embedded model server did not answer within {self._timeout:.0f} s; see {self._log_path}"
                    )
                    log.error("%s", message)
                    self._fail(message)
                    return
                returncode = await proc.wait()
                if not await self._after_death(returncode, starting=False):
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not leave url() callers waiting
            log.exception("the embedded model's watcher failed")
            self._fail(f"the embedded model's watcher failed: {exc!r}; see {self._log_path}")

    async def _start(self) -> asyncio.subprocess.Process:
        """Start the child and wait for /health; raises _Died or _NoAnswer."""
        old = None if self._new_port else self._port
        port = await asyncio.to_thread(_pick_port, old)
        if self._port is not None and port != self._port:
            log.warning(
                "embedded model: port %d is not usable any more; starting on port %d "
                "(URLs handed out for the old port stop working)",
                self._port,
                port,
            )
        self._port, self._new_port = port, False
        # --parent-pid: a daemon killed outright takes its model server with it.
        args = [*self._server_argv, "--host", _HOST, "--port", str(port), "--parent-pid", str(os.getpid())]
        if self._gguf is not None:
            args += ["--gguf", str(self._gguf)]
        if self._n_ctx is not None:
            args += ["--n-ctx", str(self._n_ctx)]
        await asyncio.to_thread(self._log_path.parent.mkdir, parents=True, exist_ok=True)
        logf = await asyncio.to_thread(open, self._log_path, "ab")
        try:
            proc = await asyncio.create_subprocess_exec(
                *args, stdin=asyncio.subprocess.DEVNULL, stdout=logf, stderr=logf
            )
        finally:
            logf.close()
        self._proc = proc
        url = f"http://{_HOST}:{port}"
        deadline = time.monotonic() + self._timeout
        async with aiohttp.ClientSession() as http:
            while True:
                if proc.returncode is not None:
                    raise _Died(proc.returncode)
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=2)) as resp:
                        if resp.status == 200:
                            break
                if time.monotonic() > deadline:
                    await self._stop(proc)
                    raise _NoAnswer
                await asyncio.sleep(0.2)
        if proc.returncode is not None:
            raise _Died(proc.returncode)
        self._url = url
        again = self._served
        self._served = True
        self._set_state("serving")
        if again:
            log.warning("embedded model serving again at %s (pid %d, restart %d)", url, proc.pid, self._restarts)
        else:
            log.info("embedded model serving at %s (pid %d)", url, proc.pid)
        return proc

    def _record_death(self, returncode: int) -> str:
        now = time.monotonic()
        desc = _describe_exit(returncode)
        self._last_exit, self._last_exit_at = desc, now
        self._deaths.append((now, returncode))
        self._prune(now)
        return desc

    async def _after_death(self, returncode: int, *, starting: bool) -> bool:
        """Log an unintended exit, and wait before the next start; False when giving up."""
        proc, self._proc = self._proc, None
        pid = proc.pid if proc is not None else None
        desc = self._record_death(returncode)
        if starting and returncode > 0:
            self._new_port = True  # perhaps it could not bind the old port
        self._set_state("restarting")
        tail = await asyncio.to_thread(self._tail)
        deaths = len(self._deaths)
        if deaths > self._max_restarts:
            message = self._give_up_message()
            log.error("%s\nlast lines of %s:\n%s", message, self._log_path, tail)
            self._fail(message)
            return False
        delay = min(self._backoff_max, self._backoff * 2 ** (deaths - 1))
        log.warning(
            "embedded model server (pid %s) died %s: %s; log %s; starting it again in %s s "
            "(death %d of at most %d in %s s); last lines of its log:\n%s",
            pid,
            "while starting" if starting else "while serving",
            desc,
            self._log_path,
            _seconds(delay),
            deaths,
            self._max_restarts,
            _seconds(self._window),
            tail,
        )
        await asyncio.sleep(delay)
        self._restarts += 1
        return True

    def _give_up_message(self) -> str:
        kinds = collections.Counter(_describe_exit(rc) for _, rc in self._deaths)
        cause = "; ".join(desc if len(kinds) == 1 else f"{desc} x{n}" for desc, n in kinds.most_common())
        span = self._deaths[-1][0] - self._deaths[0][0]
        message = (
            f"the embedded model server died ({cause}) {len(self._deaths)} times in {_seconds(span)} s; "
            f"giving up; see {self._log_path}"
        )
        signals = {-rc for _, rc in self._deaths if rc < 0}
        if signals & _CRASH_SIGNALS:
            message += f". {_REBUILD_HINT[0].upper()}{_REBUILD_HINT[1:]}"
        elif signal.SIGKILL in signals:
            message += ". SIGKILL is often the out-of-memory killer: check `dmesg` and the daemon's memory limit"
        return message

    def _fail(self, message: str) -> None:
        self._error = message
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        self._set_state("failed")

    def _died(self, proc: asyncio.subprocess.Process) -> str:
        assert proc.returncode is not None
        return (
            f"the embedded model server (pid {proc.pid}) died: {_describe_exit(proc.returncode)}; see {self._log_path}"
        )

    def _recent_exit(self, within_s: float = 60.0) -> str | None:
        if self._last_exit is None or self._last_exit_at is None:
            return None
        ago = time.monotonic() - self._last_exit_at
        if ago > within_s:
            return None
        return f"the embedded model server died {_seconds(ago)} s ago ({self._last_exit}); see {self._log_path}"

    async def _stop(self, proc: asyncio.subprocess.Process) -> None:
        if proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), self._stop_timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    def _tail(self) -> str:
        """The log's last lines (it is shared by every start, so only its end is read)."""
        try:
            with self._log_path.open("rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - _TAIL_BYTES))
                data = f.read()
        except OSError as exc:
            return f"(the log could not be read: {exc})"
        lines = data.decode(errors="replace").splitlines()
        return "\n".join(lines[-_TAIL_LINES:]) or "(the log is empty)"
