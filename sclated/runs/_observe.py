"""What the runs room shows whoever watches it (the daemon's metrics).

Two ways: :class:`RunsObserver` is told of things as they happen (fires, jumps,
deliveries, snapshots; called on the event loop, so it must be cheap), and
:class:`StateCounts` is read when someone looks (how many runs each tenant has in
each state, kept as runs change state rather than counted from the store)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["NO_RUNS_OBSERVER", "RunsObserver", "StateCounts"]


class RunsObserver(Protocol):
    def on_fire(self, kind: str, lateness_s: float) -> None:
        """An event fired: ``kind`` is its first effect's kind (``none`` without effects),
        ``lateness_s`` how far past its due time it fired, in simulated seconds."""
        ...

    def on_jump(self, skipped_s: float) -> None:
        """A run's clock jumped over ``skipped_s`` simulated seconds."""
        ...

    def on_delivery(self, delay_s: float) -> None:
        """A message reached the agent ``delay_s`` wall seconds after its fire (the run's
        ``delivery_delay_ms``; negative is a clock fault and is told as it is)."""
        ...

    def on_snapshot(self, outcome: str) -> None:
        """``saved`` (a snapshot was taken), ``restored`` (a run was put at one: a
        restore or one run of a branch group) or ``failed`` (taking one failed)."""
        ...


class _NoRunsObserver:
    def on_fire(self, kind: str, lateness_s: float) -> None:
        pass

    def on_jump(self, skipped_s: float) -> None:
        pass

    def on_delivery(self, delay_s: float) -> None:
        pass

    def on_snapshot(self, outcome: str) -> None:
        pass


NO_RUNS_OBSERVER: RunsObserver = _NoRunsObserver()


class StateCounts:
    """Runs per (tenant, state), loaded from the store once and moved with every change
    the run manager makes, so reading them costs no query."""

    def __init__(self) -> None:
        self._n: dict[tuple[str, str], int] = {}

    def load(self, counts: dict[tuple[str, str], int]) -> None:
        self._n = dict(counts)

    def add(self, tenant: str, state: str, n: int = 1) -> None:
        key = (tenant, state)
        left = self._n.get(key, 0) + n
        if left > 0:
            self._n[key] = left
        else:
            self._n.pop(key, None)

    def move(self, tenant: str, old: str, new: str) -> None:
        if old != new:
            self.add(tenant, old, -1)
            self.add(tenant, new)

    def snapshot(self) -> dict[tuple[str, str], int]:
        """A copy (made in one step, so a reader on another thread sees a whole one)."""
        return dict(self._n)
