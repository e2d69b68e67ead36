"""A run's end is recorded whatever arrives while it is being recorded.

Found by `sclated bench soak`: a CancelRun that came after a run's agent had
finished, while the daemon was still writing the run's report, cut the
recording short; the run stayed RUNNING forever and its watchers waited for an
end that never came.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from sclate_api.v1 import sclate_pb2 as pb

from sclated.report import write_report as real_write_report
from sclated.runs import _manager as manager_module
from tests.api.conftest import Api


@pytest.mark.timeout(60)
async def test_a_cancel_while_the_report_is_written_leaves_the_run_as_it_ended(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    writing = threading.Event()
    release = threading.Event()

    def slow_write_report(*args: Any, **kwargs: Any) -> Any:
        """A report that takes until the test says so (a stand-in for a slow plot)."""
        writing.set()
        release.wait(30)
        return real_write_report(*args, **kwargs)

    monkeypatch.setattr(manager_module, "write_report", slow_write_report)
    run = await api.create(days=1, events=1)
    await asyncio.to_thread(writing.wait, 30)

    async def cancel_run() -> pb.Run:
        cancelled: pb.Run = await api.stub.CancelRun(pb.CancelRunRequest(name=run.name))
        return cancelled

    cancel = asyncio.create_task(cancel_run())
    await asyncio.sleep(0.3)  # the cancel reaches the run while its report is being written
    release.set()
    after_cancel = await cancel

    assert after_cancel.state == pb.SUCCEEDED, after_cancel.state_reason
    events = await api.watch_all(run.name)  # ends: the final state is recorded
    assert events[-1].state.state == pb.SUCCEEDED
    got = await api.stub.GetRun(pb.GetRunRequest(name=run.name))
    assert got.state == pb.SUCCEEDED and Path(got.results.report_path).is_file()


async def test_reports_are_drawn_one_at_a_time(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """write_report frees each figure by collecting the young generations after the plot;
    a figure half drawn in another thread meanwhile would be promoted to the old
    generation instead (found by `sclated bench soak`: +470 MB of figures in 80 runs)."""
    lock = threading.Lock()
    drawing = 0
    most = 0

    def counting_write_report(*args: Any, **kwargs: Any) -> Any:
        """Counts how many reports are being written at once (a stand-in that is slow)."""
        nonlocal drawing, most
        with lock:
            drawing += 1
            most = max(most, drawing)
        try:
            threading.Event().wait(0.2)
            return real_write_report(*args, **kwargs)
        finally:
            with lock:
                drawing -= 1

    monkeypatch.setattr(manager_module, "write_report", counting_write_report)
    runs = [await api.create(days=1, events=1) for _ in range(4)]
    for run in runs:
        await api.watch_all(run.name)
        got = await api.stub.GetRun(pb.GetRunRequest(name=run.name))
        assert got.state == pb.SUCCEEDED and Path(got.results.report_path).is_file()
    assert most == 1
