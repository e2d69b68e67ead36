"""Where a run's wall time goes: the agent's own work or the substrate's overhead.

Busy time alone cannot tell a slow agent from a slow substrate: every lease
keeps the clock flowing, the daemon's own session control and grading
included. The ledger splits wall time by *kind* of work. Each lease declares
its kind when it is acquired; work that holds no lease (publishing time to
sandboxes, the settle window before a jump, preparing a sandbox) is declared
as a segment. At every change the time since the previous change is charged
to the highest-priority kind in progress, so overlapping work is counted once
and the kinds always add up to the wall time measured.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence

from sclated.clock._leases import LeaseChange, LeaseTable
from sclated.errors import InvalidArgument

__all__ = ["WallLedger"]


class WallLedger:
    """Charges wall time to kinds of work, by ``priority`` (first wins) when they overlap.

    Time when nothing is in progress goes to ``idle_kind``. Kinds not in
    ``priority`` rank after all listed ones, in the order first seen.
    """

    def __init__(
        self,
        leases: LeaseTable,
        *,
        priority: Sequence[str],
        idle_kind: str = "scheduler",
        wall: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if len(set(priority)) != len(priority):
            raise InvalidArgument("ledger priority lists a kind twice", field="priority")
        self._rank = {kind: i for i, kind in enumerate(priority)}
        self._idle = idle_kind
        self._wall = wall
        self._active: dict[str, int] = {}
        self._lease_kind: dict[int, str] = {}
        self._totals: dict[str, int] = {}
        self._last = wall()
        self._started = self._last
        leases.add_listener(self._on_lease)

    # -- recording -------------------------------------------------------------
    def _charge(self) -> None:
        now = self._wall()
        elapsed = now - self._last
        self._last = now
        if elapsed <= 0:
            return
        kind = self._top()
        self._totals[kind] = self._totals.get(kind, 0) + elapsed

    def _top(self) -> str:
        if not self._active:
            return self._idle
        return min(self._active, key=lambda k: self._rank.setdefault(k, len(self._rank)))

    def _enter(self, kind: str) -> None:
        self._charge()
        self._active[kind] = self._active.get(kind, 0) + 1

    def _leave(self, kind: str) -> None:
        self._charge()
        left = self._active.get(kind, 0) - 1
        if left > 0:
            self._active[kind] = left
        else:
            self._active.pop(kind, None)

    def _on_lease(self, change: LeaseChange) -> None:
        if change.kind == "acquired":
            self._lease_kind[change.lease.id] = change.lease.kind
            self._enter(change.lease.kind)
        elif change.kind in ("released", "expired"):
            kind = self._lease_kind.pop(change.lease.id, None)
            if kind is not None:
                self._leave(kind)

    @contextlib.contextmanager
    def segment(self, kind: str) -> Iterator[None]:
        """Declare work that holds no lease (for example publishing time to sandboxes)."""
        self._enter(kind)
        try:
            yield
        finally:
            self._leave(kind)

    def begin(self, kind: str) -> None:
        """Open a segment that a later :meth:`end` closes (work spanning loop passes)."""
        self._enter(kind)

    def end(self, kind: str) -> None:
        if kind in self._active:
            self._leave(kind)

    # -- reading -----------------------------------------------------------------
    def totals_ns(self) -> dict[str, int]:
        """Wall nanoseconds per kind so far, the current stretch included."""
        self._charge()
        return dict(self._totals)

    def elapsed_ns(self) -> int:
        """Wall time since the ledger started: the sum of :meth:`totals_ns`."""
        self._charge()
        return self._last - self._started
