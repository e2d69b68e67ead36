"""Delivery figures that can fail: order and earliness as the agent's own clock saw them,
delays never clamped. Each check is shown to bite with a deliberately broken clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adapters import AgentEnvironment, InProcessAgent, TurnResult
from sclated.runs import RunWorker
from sclated.runs._deliveries import Delivery, DeliveryLog
from sclated.scheduler import DeliverPrompt
from tests.runs.doubles import NullSink, synthetic_with

H = 3_600_000_000_000


def test_log_counts_early_out_of_order_and_negative_delays() -> None:
    log = DeliveryLog()
    log.add(Delivery("a", 1, due_ns=100, delay_ms=2.0, received_sim_ns=150))
    log.add(Delivery("b", 2, due_ns=200, delay_ms=-0.5, received_sim_ns=140))  # early AND before a's receipt
    log.add(Delivery("c", 3, due_ns=300, delay_ms=None, received_sim_ns=None))  # an agent without a clock
    s = log.summary()
    assert s["deliveries"] == 3 and s["deliveries_checked"] == 2
    assert s["early_deliveries"] == 1 and s["out_of_order"] == 1
    assert s["negative_delays"] == 1 and s["delivery_delay_ms_min"] == -0.5
    assert s["receipt_vs_due_ms_min"] == pytest.approx(-60 / 1e6)


def test_a_redelivery_replaces_the_first_and_survives_json() -> None:
    log = DeliveryLog()
    first = Delivery("a", 1, 100, 1.0, 99)
    log.add(first)
    log.add(Delivery.from_json(Delivery("a", 1, 100, 3.0, 120).to_json()))
    s = log.summary()
    assert s["deliveries"] == 1 and s["early_deliveries"] == 0 and s["delivery_delay_ms_max"] == 3.0


class ClockedAgent(InProcessAgent):
    """Test double of a sandboxed harness: it reads its own clock the way a process under
    libfaketime does (real time plus the last published offset) and reports receipts."""

    def __init__(self, publish: Callable[[int, int], int]) -> None:
        self._publish = publish
        self._offset_ns = 0
        self._received = 0
        self.publications = 0

    @property
    def name(self) -> str:
        return "clocked"

    async def prepare(self, env: AgentEnvironment) -> None:
        async def publisher(sim_ns: int) -> None:
            self.publications += 1
            self._offset_ns = self._publish(sim_ns, self.publications) - time.time_ns()

        env.clock.add_publisher(publisher)
        await publisher(env.clock.now())

    async def start_session(self, session: str) -> None:
        pass

    async def stop_session(self) -> None:
        pass

    async def deliver(self, prompt: DeliverPrompt) -> TurnResult:
        self._received += 1
        return TurnResult(
            reply="ok",
            started_ns=0,
            ended_ns=0,
            received_wall_ns=time.monotonic_ns(),
            received_sim_ns=time.time_ns() + self._offset_ns,
            received_seq=self._received,
        )


async def _run(tmp_path: Path, publish: Callable[[int, int], int]) -> dict[str, Any]:
    registry, spec = synthetic_with("clocked", lambda options: ClockedAgent(publish), days=2, events_per_day=3)
    worker = RunWorker("local/deliveries", spec, registry, NullSink(), run_dir=tmp_path)
    outcome = await worker.run()
    assert outcome.state == "SUCCEEDED", outcome.reason
    scheduler: dict[str, Any] = outcome.results["scheduler"]
    return scheduler


async def test_a_correct_publisher_gives_no_early_or_out_of_order_delivery(tmp_path: Path) -> None:
    s = await _run(tmp_path, lambda sim_ns, n: sim_ns)
    assert s["deliveries"] == s["deliveries_checked"] == 8  # 3 tasks + 1 review per day
    assert s["early_deliveries"] == 0 and s["out_of_order"] == 0 and s["negative_delays"] == 0
    assert s["receipt_vs_due_ms_min"] >= 0


async def test_a_publisher_an_hour_behind_makes_every_delivery_early(tmp_path: Path) -> None:
    s = await _run(tmp_path, lambda sim_ns, n: sim_ns - H)
    assert s["early_deliveries"] == s["deliveries_checked"] == 8
    assert s["receipt_vs_due_ms_min"] < -3_000_000 + 1_000


async def test_a_publisher_that_goes_backwards_puts_receipts_out_of_order(tmp_path: Path) -> None:
    # Each publication is a day further behind: a later message is seen before an earlier one.
    s = await _run(tmp_path, lambda sim_ns, n: sim_ns - n * 24 * H)
    assert s["out_of_order"] > 0
