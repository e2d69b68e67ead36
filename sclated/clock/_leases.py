"""Named, counted leases: the declaration that something is busy.

The clock flows while any lease is held. A lease has a holder (who to blame),
an optional time-to-live in *wall* time, renewed by heartbeats, so a holder
that dies or forgets to release never freezes a run in real time: the lease
expires, is released and is reported.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sclated.errors import InvalidArgument

__all__ = ["ExpiredLease", "Lease", "LeaseChange", "LeaseInfo", "LeaseTable"]


@dataclass(frozen=True, slots=True)
class Lease:
    """A handle on one acquisition. Release it exactly once (extra releases are no-ops)."""

    id: int
    name: str
    holder: str
    kind: str = "other"


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """What the diagnostics view shows for one held lease."""

    id: int
    name: str
    holder: str
    acquired_wall_ns: int
    acquired_sim_ns: int | None
    expires_wall_ns: int | None
    heartbeats: int
    kind: str = "other"
    """What kind of work holds it (see WallLedger): the agent's turn, a model call, grading, ..."""


@dataclass(frozen=True, slots=True)
class ExpiredLease:
    """A lease released because its holder stopped heartbeating."""

    info: LeaseInfo
    expired_wall_ns: int


@dataclass(frozen=True, slots=True)
class LeaseChange:
    kind: Literal["acquired", "released", "expired", "heartbeat"]
    lease: LeaseInfo
    held_count: int


@dataclass(slots=True)
class _Held:
    lease: Lease
    acquired_wall_ns: int
    acquired_sim_ns: int | None
    ttl_ns: int | None
    expires_wall_ns: int | None
    heartbeats: int = 0

    def info(self) -> LeaseInfo:
        return LeaseInfo(
            id=self.lease.id,
            name=self.lease.name,
            holder=self.lease.holder,
            acquired_wall_ns=self.acquired_wall_ns,
            acquired_sim_ns=self.acquired_sim_ns,
            expires_wall_ns=self.expires_wall_ns,
            heartbeats=self.heartbeats,
            kind=self.lease.kind,
        )


class LeaseTable:
    """All leases of one run.

    It also accounts for *busy time*: the wall time during which at least one
    lease was held, which bounds how far a hybrid clock can compress a run.
    """

    def __init__(
        self,
        *,
        wall: Callable[[], int] = time.monotonic_ns,
        default_ttl_ns: int | None = None,
    ) -> None:
        self._wall = wall
        self._default_ttl_ns = default_ttl_ns
        self._held: dict[int, _Held] = {}
        self._ids = itertools.count(1)
        self._listeners: list[Callable[[LeaseChange], None]] = []
        self._busy_since: int | None = None
        self._busy_total_ns = 0

    # -- queries ---------------------------------------------------------
    @property
    def held(self) -> bool:
        return bool(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def counts(self) -> dict[str, int]:
        """How many times each name is held right now."""
        out: dict[str, int] = {}
        for h in self._held.values():
            out[h.lease.name] = out.get(h.lease.name, 0) + 1
        return out

    def kinds(self) -> dict[str, int]:
        """How many leases each kind of work holds right now."""
        out: dict[str, int] = {}
        # A copy first: a reader on another thread (a metrics scrape) never sees the table change under it.
        for h in list(self._held.values()):
            out[h.lease.kind] = out.get(h.lease.kind, 0) + 1
        return out

    def diagnostics(self) -> list[LeaseInfo]:
        """Who holds what, since when, oldest first."""
        return sorted((h.info() for h in self._held.values()), key=lambda i: i.acquired_wall_ns)

    def is_held(self, lease: Lease) -> bool:
        return lease.id in self._held

    def next_expiry_wall_ns(self) -> int | None:
        deadlines = [h.expires_wall_ns for h in self._held.values() if h.expires_wall_ns is not None]
        return min(deadlines) if deadlines else None

    def busy_ns(self) -> int:
        """Total wall time with at least one lease held, including the current stretch."""
        if self._busy_since is None:
            return self._busy_total_ns
        return self._busy_total_ns + (self._wall() - self._busy_since)

    # -- changes ---------------------------------------------------------
    def add_listener(self, listener: Callable[[LeaseChange], None]) -> None:
        self._listeners.append(listener)

    def acquire(
        self,
        name: str,
        holder: str,
        *,
        ttl_ns: int | None = None,
        sim_ns: int | None = None,
        kind: str = "other",
    ) -> Lease:
        if not name:
            raise InvalidArgument("a lease needs a non-empty name", field="name")
        if not holder:
            raise InvalidArgument(f"lease {name!r} needs a holder", field="holder")
        ttl = self._default_ttl_ns if ttl_ns is None else ttl_ns
        if ttl is not None and ttl <= 0:
            raise InvalidArgument(f"lease {name!r}: ttl must be positive, got {ttl} ns", field="ttl")
        now = self._wall()
        lease = Lease(next(self._ids), name, holder, kind)
        held = _Held(lease, now, sim_ns, ttl, None if ttl is None else now + ttl)
        if not self._held:
            self._busy_since = now
        self._held[lease.id] = held
        self._emit("acquired", held)
        return lease

    def release(self, lease: Lease) -> bool:
        """Release; False when it was already released or expired."""
        held = self._held.pop(lease.id, None)
        if held is None:
            return False
        self._after_removal()
        self._emit("released", held)
        return True

    def heartbeat(self, lease: Lease, *, ttl_ns: int | None = None) -> bool:
        """Push the deadline out by the lease's TTL; False if it is no longer held."""
        held = self._held.get(lease.id)
        if held is None:
            return False
        if ttl_ns is not None:
            held.ttl_ns = ttl_ns
        if held.ttl_ns is not None:
            held.expires_wall_ns = self._wall() + held.ttl_ns
        held.heartbeats += 1
        self._emit("heartbeat", held)
        return True

    def expire(self, now_wall_ns: int | None = None) -> list[ExpiredLease]:
        """Release every lease past its deadline and report each one."""
        now = self._wall() if now_wall_ns is None else now_wall_ns
        dead = [h for h in self._held.values() if h.expires_wall_ns is not None and h.expires_wall_ns <= now]
        out = []
        for h in sorted(dead, key=lambda h: (h.expires_wall_ns or 0, h.lease.id)):
            del self._held[h.lease.id]
            self._after_removal()
            out.append(ExpiredLease(h.info(), now))
            self._emit("expired", h)
        return out

    def _after_removal(self) -> None:
        if not self._held and self._busy_since is not None:
            self._busy_total_ns += self._wall() - self._busy_since
            self._busy_since = None

    def _emit(self, kind: Literal["acquired", "released", "expired", "heartbeat"], held: _Held) -> None:
        if not self._listeners:
            return
        change = LeaseChange(kind, held.info(), len(self._held))
        for listener in self._listeners:
            listener(change)
