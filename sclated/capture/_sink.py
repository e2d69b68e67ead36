"""Daemon side of the capture path: what the control-socket server calls.

The socket server owns framing and replies; it hands each decoded message of
type ``call_start``/``call_end``/``record`` to a :class:`CaptureSink` together
with the run the socket belongs to, and sends the returned dict back (merged
into ``{"id": ..., "ok": true}``). Errors are raised as ``SclateError`` so the
server can answer ``ok: false`` with their ``reason``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from sclated.capture._observer import NO_CAPTURE_OBSERVER, CaptureObserver
from sclated.capture._record import CallRecord
from sclated.errors import InvalidArgument, ResourceExhausted

__all__ = ["DEFAULT_CALL_TTL_NS", "CaptureSink", "LeaseHolder", "MemoryRecordStore", "RecordStore"]

DEFAULT_CALL_TTL_NS = 15 * 60 * 1_000_000_000
MAX_CALLS_IN_FLIGHT = 512
"""Leased model calls of one run at once: a ``call_start`` past it is refused (the proxy
lets the call go ahead unleased), so a flood of them cannot hold the clock or memory."""
MAX_NAME_CHARS = 256
"""The longest call id or role a lease is named after (the proxy's are uuids and role names)."""


class RecordStore(Protocol):
    async def put(self, record: CallRecord) -> bool:
        """Store; True when new, False when ``record.call_id`` was already stored."""
        ...

    async def list(self, run: str) -> list[CallRecord]:
        """The run's records in the order they were first stored."""
        ...


class LeaseHolder(Protocol):
    """The subset of ``sclated.clock.LeaseTable`` the sink needs."""

    def acquire(self, name: str, holder: str, *, ttl_ns: int | None = None) -> Any: ...

    def release(self, lease: Any) -> Any: ...


class MemoryRecordStore:
    """Test double for :class:`RecordStore`: an in-memory dict, nothing persisted."""

    def __init__(self) -> None:
        self._by_run: dict[str, dict[str, CallRecord]] = {}

    async def put(self, record: CallRecord) -> bool:
        calls = self._by_run.setdefault(record.run, {})
        if record.call_id in calls:
            return False
        calls[record.call_id] = record
        return True

    async def list(self, run: str) -> list[CallRecord]:
        return list(self._by_run.get(run, {}).values())


class CaptureSink:
    """Turns the addon's lease messages into clock leases and stores records.

    A model call holds the lease ``model-call:<call_id>`` from ``call_start``
    to ``call_end`` so simulated time flows while the model works. A call's
    ``owner`` (the proxy's connection) is remembered: when the proxy goes, the
    leases of its calls in flight are released at once (:meth:`release_owned`),
    and whatever is left when the sandbox closes too (:meth:`release_all`). The
    TTL bounds a lease whose end nobody reports (the sandbox froze).
    """

    def __init__(
        self,
        store: RecordStore,
        leases: LeaseHolder,
        *,
        call_ttl_ns: int = DEFAULT_CALL_TTL_NS,
        observer: CaptureObserver = NO_CAPTURE_OBSERVER,
    ) -> None:
        self._store = store
        self._observer = observer
        self._leases = leases
        self._ttl_ns = call_ttl_ns
        self._held: dict[tuple[str, str], tuple[Any, object]] = {}
        self._in_flight: dict[str, int] = {}
        self._lock = asyncio.Lock()

    @staticmethod
    def _name(msg: dict[str, Any], key: str) -> str:
        value = msg.get(key)
        if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
            raise InvalidArgument(f"{key} must be a non-empty string of at most {MAX_NAME_CHARS} characters", field=key)
        return value

    def active_calls(self, run: str) -> list[str]:
        return [c for (r, c) in self._held if r == run]

    async def on_call_start(self, run: str, msg: dict[str, Any], *, owner: object = None) -> dict[str, Any]:
        """``owner``: who reported the call (the proxy's connection); see release_owned."""
        call_id = self._name(msg, "call_id")
        role = self._name(msg, "role")
        key = (run, call_id)
        if key in self._held:
            # A resent call_start (the proxy timed out waiting for our reply)
            # must not take a second lease that nobody would release.
            return {"leased": False}
        if self._in_flight.get(run, 0) >= MAX_CALLS_IN_FLIGHT:
            raise ResourceExhausted(
                f"run {run!r} has {MAX_CALLS_IN_FLIGHT} model calls in flight already; this one goes unleased",
                reason="TOO_MANY_CALLS",
            )
        self._in_flight[run] = self._in_flight.get(run, 0) + 1
        lease = self._leases.acquire(f"model-call:{call_id}", f"{run}/{role}", ttl_ns=self._ttl_ns)
        self._held[key] = (lease, owner)
        return {"leased": True}

    async def on_call_end(self, run: str, msg: dict[str, Any]) -> dict[str, Any]:
        call_id = self._name(msg, "call_id")
        if (run, call_id) not in self._held:
            return {"released": False}
        self._release([(run, call_id)])
        return {"released": True}

    def release_owned(self, owner: object) -> list[str]:
        """Release the leases of the calls ``owner`` started and never ended (the proxy
        that reported them is gone, so their ends will never come); their call ids."""
        return self._release([key for key, (_, who) in self._held.items() if who is owner and owner is not None])

    def release_all(self) -> list[str]:
        """Release every call lease still held (the sandbox closed); their call ids."""
        return self._release(list(self._held))

    def _release(self, keys: list[tuple[str, str]]) -> list[str]:
        for key in keys:
            lease, _ = self._held.pop(key)
            self._in_flight[key[0]] -= 1
            self._leases.release(lease)
        return [call_id for _, call_id in keys]

    async def on_record(self, run: str, msg: dict[str, Any]) -> dict[str, Any]:
        record = CallRecord.from_json(msg.get("record"))
        if record.run != run:
            raise InvalidArgument(
                f"record {record.call_id} names run {record.run!r} on run {run!r}'s socket",
                field="record.run",
                reason="INVALID_RECORD",
            )
        # put() is the idempotency point; the lock keeps a redelivery racing
        # the first delivery from being judged new twice by a store whose
        # check-then-insert is not atomic.
        async with self._lock:
            stored = await self._store.put(record)
        if stored:
            # Only a first delivery: a call the proxy sent again is one call.
            self._observer.on_call_captured(record)
        return {"stored": stored}
