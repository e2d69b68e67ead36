"""A sandboxed run's services on a cluster node: its captured calls go into its record stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from sclated.cluster import BufferedCalls, RecordBuffer
from sclated.cluster._node import remove_run_dir
from sclated.errors import InvalidArgument


async def test_a_captured_call_becomes_one_call_record_however_often_it_is_handed_over() -> None:
    buf = RecordBuffer(1)
    calls = BufferedCalls(buf, "acme/r1")
    assert await calls.put_call("acme/r1", "c1", "agent", {"call_id": "c1"}) is True
    assert await calls.put_call("acme/r1", "c1", "agent", {"call_id": "c1"}) is False  # the proxy sent it again
    assert await calls.put_call("acme/r1", "c2", "memory", {"call_id": "c2"}) is True
    records = buf.batch(0).records
    assert [(r.kind, r.data["call_id"], r.data["role"]) for r in records] == [
        ("call", "c1", "agent"),
        ("call", "c2", "memory"),
    ]
    assert records[0].data["record"] == {"call_id": "c1"}
    assert await calls.calls("acme/r1") == [{"call_id": "c1"}, {"call_id": "c2"}]
    # Acknowledged (stored by the control plane): still known, so a late resend is no new call.
    buf.ack(records[-1].rseq)
    assert await calls.put_call("acme/r1", "c2", "memory", {"call_id": "c2"}) is False
    assert buf.pending == 0


async def test_a_call_of_another_run_is_refused() -> None:
    calls = BufferedCalls(RecordBuffer(1), "acme/r1")
    with pytest.raises(InvalidArgument, match="acme/r2"):
        await calls.put_call("acme/r2", "c1", "agent", {})


def test_an_ended_runs_directory_goes_and_the_nodes_once_empty(tmp_path: Path) -> None:
    node = tmp_path / "sclated-node-x"
    a, b = node / "runs" / "acme" / "a", node / "runs" / "acme" / "b"
    for d in (a, b):
        (d / "world").mkdir(parents=True)
    remove_run_dir(a, node)
    assert not a.exists() and b.is_dir()  # another run of the tenant keeps the parents
    remove_run_dir(b, node)
    assert not node.exists()
    # The node's model log keeps the node's directory.
    (node / "runs" / "acme" / "c").mkdir(parents=True)
    (node / "model-server.log").write_text("")
    remove_run_dir(node / "runs" / "acme" / "c", node)
    assert sorted(p.name for p in node.iterdir()) == ["model-server.log"]
