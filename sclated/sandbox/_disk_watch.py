"""A sandbox's disk limit where the engine cannot enforce one: measure, then stop.

The engine's per-container size (``Limits.disk_bytes``, StorageOpt ``size``)
bounds only the writable layer, and overlay2 can set it only on xfs mounted
with ``pquota``; volumes it never bounds. So, as Kubernetes' kubelet does for
ephemeral storage, a :class:`DiskWatchdog` measures what a sandbox wrote every
few seconds (the writable layer through the engine, the run's volumes with
``du`` inside) and, once the sum is over the limit, stops the sandbox: the
caller kills the container and fails the run with :attr:`DiskVerdict.reason`.

A periodic measure lets a fast writer go past the limit by what it writes in
one interval (plus the measurement); it bounds a sandbox, it is no quota.
Measuring walks the files (``SizeRw`` is the engine's own walk of the layer),
so its cost grows with their number: after a measurement that took ``t`` the
next waits at least ``t / MAX_SHARE`` (with ``MAX_SHARE`` 5 %: a 0.8 s walk of
100k files waits 16 s), never less than the interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sclated.errors import FailedPrecondition, SclateError, describe
from sclated.runtime import ExecResult, Runtime

__all__ = [
    "DEFAULT_DISK_CHECK_S",
    "DEFAULT_DISK_LIMIT_GB",
    "DiskMeter",
    "DiskUsage",
    "DiskVerdict",
    "DiskWatchdog",
    "SandboxDiskMeter",
    "size_text",
]

log = logging.getLogger("sclated.sandbox.disk")

_KIB, _MIB, _GIB = 1 << 10, 1 << 20, 1 << 30
DEFAULT_DISK_LIMIT_GB = 20.0
"""A run's sandbox may write this much (its writable layer and volumes) unless its options say otherwise."""
DEFAULT_DISK_CHECK_S = 10.0
MAX_SHARE = 0.05
"""The share of wall time measurements may take: a slow one spaces out the next ones."""
MAX_WAIT_S = 600.0
"""However slow a measurement, the next one comes within this."""

RunInSandbox = Callable[[Sequence[str], float], Awaitable[ExecResult]]
"""Run ``argv`` in the sandbox with a timeout (seconds)."""


def size_text(n: int) -> str:
    """``20.4 GiB``, ``70 MiB``, ``12 KiB``, ``0 B``: GiB with one decimal from 1 GiB up, else whole units."""
    if n >= _GIB:
        return f"{n / _GIB:.1f}".removesuffix(".0") + " GiB"
    if n >= _MIB:
        return f"{n // _MIB} MiB"
    return f"{n // _KIB} KiB" if n >= _KIB else f"{n} B"


@dataclass(frozen=True, slots=True)
class DiskUsage:
    """One measurement of what a sandbox wrote."""

    layer_bytes: int | None
    """Its writable layer; None when not measured (the engine bounds it itself)."""
    volume_bytes: int
    """Its own (writable) volumes."""
    seconds: float = 0.0
    """How long the measurement took."""

    @property
    def total_bytes(self) -> int:
        return (self.layer_bytes or 0) + self.volume_bytes

    def text(self) -> str:
        parts = [] if self.layer_bytes is None else [f"writable layer {size_text(self.layer_bytes)}"]
        return f"{size_text(self.total_bytes)} ({', '.join([*parts, f'volumes {size_text(self.volume_bytes)}'])})"


@dataclass(frozen=True, slots=True)
class DiskVerdict:
    """The watchdog found the sandbox over its limit (and had it stopped)."""

    usage: DiskUsage
    limit_bytes: int
    option: str
    """The setting that holds the limit, named in the reason (a run's ``disk_limit_gb``)."""

    @property
    def reason(self) -> str:
        return (
            f"the sandbox wrote {self.usage.text()}, over its disk limit of {size_text(self.limit_bytes)} "
            f"({self.option}); the disk watchdog stopped it"
        )


class DiskMeter(Protocol):
    async def measure(self) -> DiskUsage:
        """What the sandbox wrote now; SclateError (or TimeoutError) when it cannot be told."""
        ...


class SandboxDiskMeter:
    """A sandbox's writable layer (the engine's ``SizeRw``) plus ``du -sxb`` inside over its volumes."""

    def __init__(
        self,
        runtime: Runtime,
        container_id: str,
        *,
        volumes: Sequence[str] = (),
        measure_layer: bool = True,
        run: RunInSandbox | None = None,
        du_timeout_s: float = 60.0,
    ) -> None:
        self._runtime = runtime
        self._id = container_id
        self.volumes = tuple(volumes)
        self.measure_layer = measure_layer
        self._run: RunInSandbox = run or (lambda argv, t: runtime.exec(container_id, argv, timeout_s=t))
        self._du_timeout_s = du_timeout_s

    async def measure(self) -> DiskUsage:
        started = time.monotonic()
        layer = await self._runtime.writable_layer_bytes(self._id) if self.measure_layer else None
        volumes = await self._du() if self.volumes else 0
        return DiskUsage(layer, volumes, time.monotonic() - started)

    async def _du(self) -> int:
        # -x: each volume's own file system (a volume mounted inside another is counted once).
        res = await self._run(["du", "-sxb", *self.volumes], self._du_timeout_s)
        sizes: dict[str, int] = {}
        for line in res.stdout.decode(errors="replace").splitlines():
            size, _, path = line.partition("\t")
            if size.isdigit():
                sizes[path] = int(size)
        missing = [v for v in self.volumes if v not in sizes]
        # du exits 1 when a file vanished during its walk (a busy agent): its totals still stand.
        if res.timed_out or missing:
            why = "timed out" if res.timed_out else f"exited {res.exit_code} without a total for {', '.join(missing)}"
            raise FailedPrecondition(
                f"du over the sandbox's volumes {why}: {res.stderr.decode(errors='replace')[-300:]}",
                reason="DISK_UNMEASURED",
            )
        return sum(sizes.values())


class DiskWatchdog:
    """Measures a sandbox every ``interval_s`` (or less often, see MAX_SHARE); over
    ``limit_bytes`` it records a :class:`DiskVerdict`, awaits ``on_over`` with it (which
    stops the sandbox) and ends. A measurement that fails or times out is logged and
    tried again at the next interval: it never stops a sandbox.

    Its task is kept and cancelled by :meth:`close`; ``start`` once, ``close`` always.
    """

    def __init__(
        self,
        meter: DiskMeter,
        *,
        limit_bytes: int,
        interval_s: float,
        on_over: Callable[[DiskVerdict], Awaitable[None]],
        name: str,
        option: str = "disk_limit_gb",
        timeout_s: float = 60.0,
    ) -> None:
        if limit_bytes <= 0 or interval_s <= 0 or timeout_s <= 0:
            raise ValueError("a disk watchdog needs a positive limit, interval and timeout")
        self._meter = meter
        self.limit_bytes = limit_bytes
        self.interval_s = interval_s
        self._on_over = on_over
        self.name = name
        self.option = option
        self.timeout_s = timeout_s
        self.verdict: DiskVerdict | None = None
        self.last: DiskUsage | None = None
        self.measurements = 0
        self.failures = 0
        """Measurements that failed since the last one that worked."""
        self._task: asyncio.Task[None] | None = None

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError(f"the disk watchdog of {self.name} is already started")
        self._task = asyncio.get_running_loop().create_task(self._watch(), name=f"disk-watch:{self.name}")
        self._task.add_done_callback(self._ended)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def next_wait(self, cost_s: float) -> float:
        """How long after a measurement that took ``cost_s`` the next one starts."""
        return max(self.interval_s, min(cost_s / MAX_SHARE, MAX_WAIT_S))

    async def _watch(self) -> None:
        wait = self.interval_s
        while True:
            await asyncio.sleep(wait)
            started = time.monotonic()
            try:
                async with asyncio.timeout(self.timeout_s):
                    usage = await self._meter.measure()
            except (SclateError, TimeoutError) as exc:
                self.failures += 1
                log.warning(
                    "%s: the disk watchdog could not measure the sandbox (%s; %d time(s) in a row); it tries again",
                    self.name,
                    f"no answer within {self.timeout_s:g} s" if isinstance(exc, TimeoutError) else describe(exc),
                    self.failures,
                )
                wait = self.next_wait(time.monotonic() - started)
                continue
            self.failures = 0
            self.measurements += 1
            self.last = usage
            if usage.total_bytes > self.limit_bytes:
                self.verdict = DiskVerdict(usage, self.limit_bytes, self.option)
                log.error("%s: %s", self.name, self.verdict.reason)
                await self._on_over(self.verdict)
                return
            wait = self.next_wait(time.monotonic() - started)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: the disk watchdog ended with an error", self.name, exc_info=task.exception())
