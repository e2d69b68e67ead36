"""A remote worker's records, kept until the control plane says they are stored.

The worker (in a Ray actor) reports to a :class:`RecordBuffer` as it would to the
daemon's sink. Each record gets a stream number (``rseq``); the control plane pulls
the records after the last number it holds, stores them, then acknowledges that
number, and only then does the buffer drop them. A pull whose answer was lost (the
daemon died before storing it) is answered again from the same records, and the
control plane recognises what it stored already by the records' own numbers (event
and journal sequence numbers): a redelivery is never a duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

__all__ = ["Batch", "Record", "RecordBuffer"]


@dataclass(frozen=True, slots=True)
class Record:
    rseq: int
    kind: str
    """``event``, ``journal``, ``progress``, ``call`` (a captured model call) or ``end``
    (the run's outcome, always last)."""
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Batch:
    records: list[Record]
    acked: int
    """The highest stream number acknowledged so far."""


class RecordBuffer:
    """A RunSink that numbers and keeps what the worker reports until it is acknowledged."""

    def __init__(self, next_event_seq: int) -> None:
        if next_event_seq < 1:
            raise ValueError(f"next_event_seq must be at least 1, got {next_event_seq}")
        self._next_event_seq = next_event_seq
        self._rseq = 0
        self._acked = 0
        self._records: deque[Record] = deque()
        self._changed = asyncio.Event()
        self._ended = False

    # -- RunSink (the worker's side) ----------------------------------------------------
    def emit(self, kind: str, payload: dict[str, Any], sim_ns: int) -> None:
        seq = self._next_event_seq
        self._next_event_seq += 1
        self._add("event", {"seq": seq, "kind": kind, "payload": payload, "sim_ns": sim_ns, "wall_ns": time.time_ns()})

    def journal(self, entry: dict[str, Any]) -> None:
        self._add("journal", entry)

    def progress(self, sim_ns: int) -> None:
        self._add("progress", {"sim_ns": sim_ns})

    def call(self, call_id: str, role: str, record: dict[str, Any]) -> None:
        """A model call the run's capture proxy handed over (stored by call id: once)."""
        self._add("call", {"call_id": call_id, "role": role, "record": record})

    def end(self, state: str, reason: str, results: dict[str, Any]) -> None:
        """The run's outcome: the last record; nothing is added after it."""
        self._add("end", {"state": state, "reason": reason, "results": results})
        self._ended = True

    def _add(self, kind: str, data: dict[str, Any]) -> None:
        if self._ended:
            raise RuntimeError("a record after the run's end")
        self._rseq += 1
        self._records.append(Record(self._rseq, kind, data))
        self._changed.set()

    # -- the control plane's side ------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Records not acknowledged yet."""
        return len(self._records)

    def batch(self, after: int, limit: int = 1000) -> Batch:
        """Records with a stream number above ``after`` (at most ``limit``), oldest first."""
        out: list[Record] = []
        for record in self._records:
            if record.rseq > after:
                out.append(record)
                if len(out) >= limit:
                    break
        return Batch(out, self._acked)

    async def wait_batch(self, after: int, wait_s: float, limit: int = 1000) -> Batch:
        """Like ``batch``, waiting up to ``wait_s`` for a record to come when none is there."""
        deadline = asyncio.get_running_loop().time() + wait_s
        while True:
            batch = self.batch(after, limit)
            remaining = deadline - asyncio.get_running_loop().time()
            if batch.records or remaining <= 0:
                return batch
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    def ack(self, upto: int) -> int:
        """Drop the records up to ``upto`` (stored by the control plane); how many are left."""
        if upto > self._rseq:
            raise ValueError(f"ack {upto} is past the last record {self._rseq}")
        while self._records and self._records[0].rseq <= upto:
            self._records.popleft()
        self._acked = max(self._acked, upto)
        return len(self._records)
