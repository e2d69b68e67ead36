"""The disk watchdog with test doubles for what it measures: over the limit it stops the sandbox
with a reason naming sizes and limit; under it, or when a measurement fails or hangs, it never
does; closing cancels its task. The run options that set it are checked."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from sclated.errors import FailedPrecondition, InvalidArgument
from sclated.runtime import ExecResult
from sclated.sandbox import DiskUsage, DiskVerdict, DiskWatchdog, SandboxDiskMeter, SandboxOptions
from sclated.sandbox._disk_watch import MAX_SHARE, size_text

MIB, GIB = 1 << 20, 1 << 30


class ScriptedDiskMeter:
    """Test double of a DiskMeter: answers each measurement from a script (a usage, an error to
    raise, or "hang"), repeating the last entry once the script runs out."""

    def __init__(self, *script: DiskUsage | Exception | str) -> None:
        self.script = list(script)
        self.calls = 0

    async def measure(self) -> DiskUsage:
        step = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        if step == "hang":
            await asyncio.sleep(3600)
        if isinstance(step, Exception):
            raise step
        assert isinstance(step, DiskUsage)
        return step


class StopRecorder:
    """Test double of the session's stop: records each verdict it is given."""

    def __init__(self) -> None:
        self.verdicts: list[DiskVerdict] = []

    async def __call__(self, verdict: DiskVerdict) -> None:
        self.verdicts.append(verdict)


def _watchdog(meter: ScriptedDiskMeter, stop: StopRecorder, *, limit: int = 20 * GIB) -> DiskWatchdog:
    return DiskWatchdog(meter, limit_bytes=limit, interval_s=0.01, on_over=stop, name="run t/r", timeout_s=0.2)


async def _until(condition: object, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not callable(condition) or not condition():
            await asyncio.sleep(0.01)


async def test_over_the_limit_the_sandbox_is_stopped_with_a_reason_naming_sizes_and_limit() -> None:
    over = DiskUsage(layer_bytes=int(20.1 * GIB), volume_bytes=int(0.3 * GIB))
    meter, stop = ScriptedDiskMeter(DiskUsage(GIB, 0), over), StopRecorder()
    watchdog = _watchdog(meter, stop)
    watchdog.start()
    try:
        await _until(lambda: stop.verdicts)
        assert watchdog.task is not None
        await _until(watchdog.task.done)  # it ends once it stopped the sandbox
    finally:
        await watchdog.close()
    (verdict,) = stop.verdicts
    assert watchdog.verdict == verdict and meter.calls == 2
    assert verdict.reason == (
        "the sandbox wrote 20.4 GiB (writable layer 20.1 GiB, volumes 307 MiB), over its disk limit of 20 GiB "
        "(disk_limit_gb); the disk watchdog stopped it"
    )


async def test_under_the_limit_the_sandbox_is_untouched() -> None:
    meter, stop = ScriptedDiskMeter(DiskUsage(20 * GIB, 0)), StopRecorder()  # at the limit is not over it
    watchdog = _watchdog(meter, stop)
    watchdog.start()
    try:
        await _until(lambda: meter.calls >= 5)
    finally:
        await watchdog.close()
    assert stop.verdicts == [] and watchdog.verdict is None
    assert watchdog.measurements >= 5 and watchdog.last == DiskUsage(20 * GIB, 0)


async def test_a_failing_or_hanging_measurement_is_logged_and_retried_and_never_stops_a_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failing = FailedPrecondition("the engine did not say", reason="DISK_UNMEASURED")
    meter = ScriptedDiskMeter(failing, "hang", failing, DiskUsage(MIB, 0))
    stop = StopRecorder()
    watchdog = _watchdog(meter, stop)
    with caplog.at_level(logging.WARNING, logger="sclated.sandbox.disk"):
        watchdog.start()
        try:
            await _until(lambda: watchdog.measurements >= 2)
        finally:
            await watchdog.close()
    assert stop.verdicts == [] and watchdog.failures == 0  # the count resets once one works
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 3, warnings
    assert "run t/r: the disk watchdog could not measure the sandbox (the engine did not say" in warnings[0]
    assert "no answer within 0.2 s; 2 time(s) in a row" in warnings[1]
    assert "3 time(s) in a row); it tries again" in warnings[2]


async def test_closing_cancels_the_watchdog_task() -> None:
    meter, stop = ScriptedDiskMeter("hang"), StopRecorder()
    watchdog = _watchdog(meter, stop)
    watchdog.start()
    task = watchdog.task
    assert task is not None
    await _until(lambda: meter.calls == 1)  # in the middle of a measurement
    await watchdog.close()
    assert task.cancelled() and watchdog.task is None
    await watchdog.close()  # twice is fine


def test_a_slow_measurement_spaces_out_the_next_ones() -> None:
    watchdog = DiskWatchdog(ScriptedDiskMeter(), limit_bytes=GIB, interval_s=10, on_over=StopRecorder(), name="x")
    assert watchdog.next_wait(0.001) == 10
    assert watchdog.next_wait(0.8) == pytest.approx(0.8 / MAX_SHARE) == pytest.approx(16)
    assert watchdog.next_wait(1e6) == 600


def test_sizes_read_as_people_write_them() -> None:
    assert [size_text(n) for n in (0, 512, 12 * 1024, 70 * MIB, GIB, int(20.44 * GIB))] == [
        "0 B", "512 B", "12 KiB", "70 MiB", "1 GiB", "20.4 GiB",
    ]  # fmt: skip
    assert DiskUsage(None, 3 * MIB).text() == "3 MiB (volumes 3 MiB)"  # the engine bounds the layer


class ScriptedSandbox:
    """Test double of a runtime and an exec in the sandbox, for SandboxDiskMeter."""

    def __init__(self, layer: int, du: ExecResult) -> None:
        self.layer, self.du = layer, du
        self.argv: list[Sequence[str]] = []

    async def writable_layer_bytes(self, container_id: str) -> int:
        return self.layer

    async def run(self, argv: Sequence[str], timeout_s: float) -> ExecResult:
        self.argv.append(argv)
        return self.du


async def test_the_meter_adds_the_writable_layer_and_each_volume() -> None:
    # du exits 1 when a file vanished during its walk: the totals it printed still count.
    du = ExecResult(1, b"1048576\t/workspace\n2048\t/memory\n", b"du: cannot access '/workspace/tmp.1'")
    double = ScriptedSandbox(5 * MIB, du)
    meter = SandboxDiskMeter(double, "c1", volumes=("/workspace", "/memory"), run=double.run)  # type: ignore[arg-type]
    usage = await meter.measure()
    assert (usage.layer_bytes, usage.volume_bytes) == (5 * MIB, MIB + 2048)
    assert double.argv == [["du", "-sxb", "/workspace", "/memory"]]
    assert (await SandboxDiskMeter(double, "c1", run=double.run).measure()).volume_bytes == 0  # type: ignore[arg-type]
    assert double.argv == [["du", "-sxb", "/workspace", "/memory"]]  # no volumes, no du


@pytest.mark.parametrize(
    ("du", "why"),
    [
        (ExecResult(124, b"", b"", timed_out=True), "timed out"),
        (ExecResult(1, b"4096\t/workspace\n", b"du: /memory: Permission denied"), "without a total for /memory"),
    ],
)
async def test_a_du_that_cannot_tell_fails_the_measurement(du: ExecResult, why: str) -> None:
    double = ScriptedSandbox(0, du)
    meter = SandboxDiskMeter(double, "c1", volumes=("/workspace", "/memory"), run=double.run)  # type: ignore[arg-type]
    with pytest.raises(FailedPrecondition, match=why) as info:
        await meter.measure()
    assert info.value.reason == "DISK_UNMEASURED"


# ------------------------------------------------------------------------------ run options


def test_runs_get_a_disk_limit_by_default_and_can_set_theirs() -> None:
    default = SandboxOptions.parse({})
    assert default.disk_limit_gb == 20 and default.disk_limit_bytes == 20 * GIB
    assert default.disk_check_interval_s == 10
    mine = SandboxOptions.parse({"disk_limit_gb": 0.5, "disk_check_interval_s": 2})
    assert mine.disk_limit_bytes == 512 * MIB and mine.disk_check_interval_s == 2.0
    assert {"disk_limit_gb", "disk_check_interval_s"} <= SandboxOptions.KEYS


@pytest.mark.parametrize("value", [0, -1, 0.001, 1e9, float("nan"), float("inf"), "20", True, None])
def test_a_bad_disk_limit_is_refused_naming_the_option(value: object) -> None:
    with pytest.raises(InvalidArgument, match="disk_limit_gb must be a number of GiB") as info:
        SandboxOptions.parse({"disk_limit_gb": value})
    assert info.value.field == "run.agent.options.disk_limit_gb"


@pytest.mark.parametrize("value", [0, 0.1, 3601, float("nan"), "10", False])
def test_a_bad_disk_check_interval_is_refused_naming_the_option(value: object) -> None:
    with pytest.raises(InvalidArgument, match="disk_check_interval_s") as info:
        SandboxOptions.parse({"disk_check_interval_s": value})
    assert info.value.field == "run.agent.options.disk_check_interval_s"
