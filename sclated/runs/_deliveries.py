"""Did each message reach the agent when and in the order the schedule said?

The figures are measured where they can fail: the delay from the fire (host
monotonic clock) to the harness's receipt (the harness's monotonic clock, the
same kernel clock inside a container), and the receipt as the harness's own
simulated clock saw it (libfaketime inside a sandbox). A delay is never
clamped: a negative one is a clock fault and is counted. A receipt whose
simulated time is before the message's scheduled time is an early delivery;
receipts whose order differs from the schedule's total order are out of order.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from typing import Any

__all__ = ["Delivery", "DeliveryLog"]


@dataclass(frozen=True, slots=True)
class Delivery:
    event_id: str
    order: int
    """Position in the schedule's total order (the fire's journal sequence number)."""
    due_ns: int
    delay_ms: float | None
    """None when the harness did not say when it received the message."""
    received_sim_ns: int | None
    """The harness's own simulated time at receipt; None for agents without a clock."""

    def to_json(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "order": self.order,
            "due_ns": self.due_ns,
            "delay_ms": self.delay_ms,
            "received_sim_ns": self.received_sim_ns,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Delivery:
        delay = d.get("delay_ms")
        received = d.get("received_sim_ns")
        return cls(
            event_id=str(d.get("event_id", "")),
            order=int(d.get("order", 0)),
            due_ns=int(d.get("due_ns", 0)),
            delay_ms=float(delay) if isinstance(delay, int | float) else None,
            received_sim_ns=int(received) if isinstance(received, int) else None,
        )


class DeliveryLog:
    """The deliveries of one run (those of earlier processes included, from the journal)."""

    def __init__(self) -> None:
        self._by_event: dict[str, Delivery] = {}

    def add(self, delivery: Delivery) -> None:
        # A message delivered again after a resume replaces its first delivery:
        # the figures describe what the agent finally got.
        self._by_event[delivery.event_id] = delivery

    def __len__(self) -> int:
        return len(self._by_event)

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self._by_event.values(), key=lambda d: d.order)
        delays = [d.delay_ms for d in ordered if d.delay_ms is not None]
        checked = [d for d in ordered if d.received_sim_ns is not None]
        early = [d for d in checked if d.received_sim_ns is not None and d.received_sim_ns < d.due_ns]
        out_of_order = 0
        for prev, cur in itertools.pairwise(checked):
            assert prev.received_sim_ns is not None and cur.received_sim_ns is not None
            if cur.received_sim_ns < prev.received_sim_ns:
                out_of_order += 1
        negative = [x for x in delays if x < 0]
        # How long after its scheduled time each message was seen inside (negative: early).
        leads = [((d.received_sim_ns or 0) - d.due_ns) / 1e6 for d in checked]
        return {
            "deliveries": len(ordered),
            "deliveries_checked": len(checked),
            "out_of_order": out_of_order,
            "early_deliveries": len(early),
            "receipt_vs_due_ms_min": min(leads) if leads else 0.0,
            "negative_delays": len(negative),
            "delivery_delay_ms_p50": statistics.median(delays) if delays else 0.0,
            "delivery_delay_ms_max": max(delays) if delays else 0.0,
            "delivery_delay_ms_min": min(delays) if delays else 0.0,
        }
