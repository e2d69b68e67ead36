"""The daemon's Prometheus metrics: what ``/metrics`` on the ``http_listen`` listener serves.

One :class:`DaemonMetrics` per daemon, with a registry of its own (never the
process-wide default one: two daemons in one test process must not share
counters). It is every room's observer at once (``StoreObserver``,
``CaptureObserver``, ``SandboxObserver``, ``RunsObserver``, ``ApiObserver``): the
rooms tell it what happens through their small protocols and never import
prometheus_client. What is a state rather than an event (runs by tenant and state,
the admission queue, leases held) is read from the run manager when scraped.

Labels are low-cardinality on purpose: tenant names, states, roles, outcomes,
kinds, methods and codes; never a run name or id. Values that come from inside
a sandbox (a call's role) are capped: past :data:`MAX_LABEL_VALUES` distinct
ones, the rest count as ``other``, so a hostile agent cannot grow the registry.

The hooks are cheap on the hot paths: a child metric is looked up once per label
value and kept (no ``labels()`` call, no new label tuple per event); the only lock
taken is prometheus_client's own per-value one, never held across anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sclated.capture import CallRecord, failure_cause
from sclated.runs import STATES

__all__ = ["MAX_LABEL_VALUES", "RUN_STATES", "DaemonMetrics", "RunsView"]

MAX_LABEL_VALUES = 64
"""Distinct values one label of one metric takes before the rest count as ``other``."""
RUN_STATES = STATES
"""Each tenant's runs are shown in every state, 0 included (a series that vanishes reads as no data)."""
SANDBOX_MODES = ("fresh", "adopt", "restore")
SANDBOX_OUTCOMES = ("started", "failed", "cancelled")
SNAPSHOT_OUTCOMES = ("saved", "restored", "failed")

# Buckets in seconds, each for what it measures.
_COMMIT_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_COMMIT_RECORDS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
_DELAY_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_LATENESS_S = (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0, 3600.0)
_MODEL_CALL_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_SANDBOX_START_S = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


class RunsView(Protocol):
    """What the metrics read of the run manager when scraped (``sclated.runs.RunManager``)."""

    def counts(self) -> dict[str, int]: ...

    def state_counts(self) -> dict[tuple[str, str], int]: ...

    def leases_held(self) -> dict[str, int]: ...


C = TypeVar("C")


class _Children(Generic[C]):
    """A labelled metric's children by label values, each made once; values past
    ``limit`` distinct ones in ``capped`` positions become ``other``."""

    def __init__(self, make: Callable[..., C], capped: Sequence[int] = (), limit: int = MAX_LABEL_VALUES) -> None:
        self._make = make
        self._by: dict[tuple[str, ...], C] = {}
        self._capped = tuple(capped)
        self._seen: dict[int, set[str]] = {i: set() for i in self._capped}
        self._limit = limit

    def get(self, *values: str) -> C:
        child = self._by.get(values)
        if child is None:
            child = self._by[values] = self._new(values)
        return child

    def _new(self, values: tuple[str, ...]) -> C:
        kept = list(values)
        for i in self._capped:
            seen = self._seen[i]
            if kept[i] not in seen:
                if len(seen) >= self._limit:
                    kept[i] = "other"
                else:
                    seen.add(kept[i])
        return self._make(*kept)


def _tokens(usage: object, *keys: str) -> int:
    """A token count from a call's usage, under whichever key its API uses."""
    if not isinstance(usage, dict):
        return 0
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


class _RunsCollector(Collector):
    """The run manager's states, read at scrape time."""

    def __init__(self, runs: RunsView) -> None:
        self._runs = runs

    def describe(self) -> Iterable[Metric]:
        # Only the names (registration checks them): nothing is read from the manager.
        return self._families()

    def collect(self) -> Iterable[Metric]:
        return self._families(self._runs)

    @staticmethod
    def _families(runs: RunsView | None = None) -> Iterator[Metric]:
        by_state = GaugeMetricFamily(
            "sclate_runs", "Runs the daemon holds, by tenant and state (deleted runs leave)", labels=["tenant", "state"]
        )
        queue = GaugeMetricFamily("sclate_admission_queue_runs", "Runs waiting for a slot to execute (PENDING)")
        executing = GaugeMetricFamily("sclate_runs_executing", "Runs executing now (admitted, not yet ended)")
        leases = GaugeMetricFamily(
            "sclate_leases_held", "Clock leases held now across executing runs, by kind of work", labels=["kind"]
        )
        if runs is not None:
            states = runs.state_counts()
            for tenant in sorted({t for t, _ in states}):
                for state in RUN_STATES:
                    by_state.add_metric([tenant, state], states.get((tenant, state), 0))
            counts = runs.counts()
            queue.add_metric([], counts["pending"])
            executing.add_metric([], counts["running"])
            for kind, n in sorted(runs.leases_held().items()):
                leases.add_metric([kind], n)
        yield from (by_state, queue, executing, leases)


class DaemonMetrics:
    """The daemon's metrics and every room's observer (see the module docstring); what the
    HTTP listener's ``/metrics`` serves (``render()`` and ``content_type``, its MetricsSource)."""

    content_type: str = CONTENT_TYPE_LATEST

    def __init__(self, *, process: bool = True) -> None:
        """``process``: also the process's CPU, memory and file descriptors (``sclate_process_*``)."""
        reg = self.registry = CollectorRegistry()
        if process:
            ProcessCollector(namespace="sclate", registry=reg)
        self._runs: _RunsCollector | None = None

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, labels, registry=reg)

        def histogram(name: str, doc: str, buckets: Sequence[float], *labels: str) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=reg)

        def gauge(name: str, doc: str, *labels: str) -> Gauge:
            return Gauge(name, doc, labels, registry=reg)

        # -- scheduler and clock (RunsObserver) --
        self._fires = _Children(
            counter("sclate_scheduler_fires", "Events fired, by their first effect's kind", "kind").labels
        )
        self._lateness = histogram(
            "sclate_scheduler_fire_lateness_seconds",
            "How far past its due time each event fired, in simulated seconds",
            _LATENESS_S,
        )
        self._jumps = counter("sclate_clock_jumps", "Clock jumps over idle simulated time")
        self._skipped = counter("sclate_clock_skipped_seconds", "Simulated seconds the clocks jumped over")
        self._delivery = histogram(
            "sclate_delivery_delay_seconds",
            "Wall seconds from a message's fire to the agent's receipt (lateness included while the clock flows)",
            _DELAY_S,
        )
        self._snapshots = _Children(
            counter("sclate_snapshots", "Snapshots saved, restored (runs put at one) and failed", "outcome").labels
        )
        for outcome in SNAPSHOT_OUTCOMES:
            self._snapshots.get(outcome)

        # -- captured model calls (CaptureObserver); the role comes from a sandbox: capped --
        by_call = ("role", "outcome")
        self._calls = _Children(
            counter(
                "sclate_model_calls", "Captured model calls, by role and outcome (ok or why it failed)", *by_call
            ).labels,
            capped=(0,),
        )
        self._prompt = _Children(
            counter("sclate_model_prompt_tokens", "Prompt tokens of captured model calls", *by_call).labels,
            capped=(0,),
        )
        self._completion = _Children(
            counter("sclate_model_completion_tokens", "Completion tokens of captured model calls", *by_call).labels,
            capped=(0,),
        )
        self._call_latency = _Children(
            histogram(
                "sclate_model_call_seconds",
                "Wall seconds from a model call's request to its end",
                _MODEL_CALL_S,
                "role",
            ).labels,
            capped=(0,),
        )

        # -- sandboxes (SandboxObserver) --
        self._starts = _Children(
            counter("sclate_sandbox_starts", "Sandbox starts, by mode and outcome", "mode", "outcome").labels
        )
        self._start_s = _Children(
            histogram(
                "sclate_sandbox_start_seconds",
                "Wall seconds a sandbox took to start (successful starts)",
                _SANDBOX_START_S,
                "mode",
            ).labels
        )
        for mode in SANDBOX_MODES:
            for outcome in SANDBOX_OUTCOMES:
                self._starts.get(mode, outcome)

        # -- the store (StoreObserver; called on the store's thread) --
        self._commit_s = histogram(
            "sclate_store_commit_seconds", "Wall seconds of each store transaction (BEGIN to COMMIT)", _COMMIT_S
        )
        self._commit_records = histogram(
            "sclate_store_commit_records",
            "Rows each store transaction wrote (events, journal entries, run updates)",
            _COMMIT_RECORDS,
        )
        self._db_bytes = gauge("sclate_store_database_bytes", "The database's files on disk (main, WAL, shared memory)")

        # -- the API (ApiObserver) --
        self._requests = _Children(
            counter("sclate_api_requests", "API calls, by method and final gRPC status code", "method", "code").labels
        )
        self._streams = _Children(
            gauge(
                "sclate_api_streams_open", "Server streams open (WatchRun, WatchGroup, StreamTrajectories)", "method"
            ).labels
        )

    # -- serving ----------------------------------------------------------------------
    def render(self) -> bytes:
        """The Prometheus text exposition of every metric (``content_type`` says which format)."""
        return generate_latest(self.registry)

    def watch_runs(self, runs: RunsView) -> None:
        """Read the run manager's states at each scrape (once per daemon)."""
        if self._runs is not None:
            raise RuntimeError("these metrics already watch a run manager")
        self._runs = _RunsCollector(runs)
        self.registry.register(self._runs)

    # -- RunsObserver -------------------------------------------------------------------
    def on_fire(self, kind: str, lateness_s: float) -> None:
        self._fires.get(kind).inc()
        self._lateness.observe(lateness_s)

    def on_jump(self, skipped_s: float) -> None:
        self._jumps.inc()
        self._skipped.inc(skipped_s)

    def on_delivery(self, delay_s: float) -> None:
        self._delivery.observe(delay_s)

    def on_snapshot(self, outcome: str) -> None:
        self._snapshots.get(outcome).inc()

    # -- CaptureObserver ------------------------------------------------------------------
    def on_call_captured(self, record: CallRecord) -> None:
        role = record.role
        cause = failure_cause(
            {"status": record.status, "error": record.error, "complete": record.complete, "response": record.response}
        )
        outcome = cause or "ok"
        self._calls.get(role, outcome).inc()
        usage = record.usage
        prompt = _tokens(usage, "prompt_tokens", "input_tokens")
        if prompt:
            self._prompt.get(role, outcome).inc(prompt)
        completion = _tokens(usage, "completion_tokens", "output_tokens")
        if completion:
            self._completion.get(role, outcome).inc(completion)
        took_ns = record.timings.end_ns - record.timings.start_ns
        if took_ns >= 0:  # a negative span is a clock fault, not a latency
            self._call_latency.get(role).observe(took_ns / 1e9)

    # -- SandboxObserver ----------------------------------------------------------------
    def on_sandbox_start(self, mode: str, outcome: str, seconds: float) -> None:
        self._starts.get(mode, outcome).inc()
        if outcome == "started":
            self._start_s.get(mode).observe(seconds)

    # -- StoreObserver --------------------------------------------------------------------
    def on_commit(self, records: int, seconds: float) -> None:
        self._commit_s.observe(seconds)
        self._commit_records.observe(records)

    def on_db_size(self, file_bytes: int) -> None:
        self._db_bytes.set(file_bytes)

    # -- ApiObserver ------------------------------------------------------------------------
    def on_request(self, method: str, code: str) -> None:
        self._requests.get(method, code).inc()

    def on_stream(self, method: str, opened: int) -> None:
        self._streams.get(method).inc(opened)
