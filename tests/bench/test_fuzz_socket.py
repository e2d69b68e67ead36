"""The control-socket part of `sclated bench fuzz`: the daemon's sockets take every case
cleanly, and each figure comes out bad against a server that misbehaves."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sclated.bench import _fuzz_socket as fz
from sclated.capture import MAX_CONTROL_LINE_BYTES, CaptureSink
from sclated.capture._sink import MAX_CALLS_IN_FLIGHT
from sclated.errors import InvalidArgument
from sclated.sandbox import ControlLimits


async def test_the_daemon_s_control_sockets_take_every_case_cleanly() -> None:
    out = await fz.run(argparse.Namespace(), seed=1)
    assert out["findings"] == []
    for count in ("crashes", "internal_errors", "state_changed_on_error", "cross_tenant_leaks"):
        assert out[count] == 0, count
    assert out["cases"] >= 100
    limits = ControlLimits()
    # A record just under the line limit is stored; lines past it are refused.
    assert limits.line_bytes - 128 * 1024 < out["max_line_bytes_accepted"] <= limits.line_bytes
    assert out["longest_line_refused_bytes"] > limits.line_bytes
    assert out["connections_refused_past_limit"] == 8
    assert out["wait_flood_woken"] == 2 * limits.in_flight
    assert out["call_start_flood_leased"] == MAX_CALLS_IN_FLIGHT
    assert out["memory_attack_sent_mb"] > 0


def test_a_reply_that_is_not_a_clean_refusal_is_found() -> None:
    bad = fz.Case("c", b"x\n", "error")
    assert fz._judge(bad, fz.Reply([], closed=True)) == "0 of 1 replies (connection closed)"
    assert "internal error" in str(fz._judge(bad, fz.Reply([{"ok": False, "error": "e", "reason": "INTERNAL"}], False)))
    assert "accepted" in str(fz._judge(bad, fz.Reply([{"ok": True}], False)))
    assert "not a control reply" in str(fz._judge(bad, fz.Reply(["<html>"], False)))
    assert fz._judge(bad, fz.Reply([{"ok": False, "error": "e", "reason": "INVALID_ARGUMENT"}], False)) is None
    good = fz.Case("c", b"x\n", "ok")
    assert "refused" in str(fz._judge(good, fz.Reply([{"ok": False, "error": "e", "reason": "X"}], False)))


@pytest.fixture
async def rig() -> AsyncIterator[tuple[fz._Rig, list[fz.Target]]]:
    with tempfile.TemporaryDirectory(prefix="sc-fz-t-") as tmp:
        r = fz._Rig(Path(tmp))
        try:
            yield r, await r.start()
        finally:
            await r.close()


async def test_a_refused_request_that_changed_its_run_or_the_other_is_counted(
    rig: tuple[fz._Rig, list[fz.Target]], monkeypatch: pytest.MonkeyPatch
) -> None:
    r, targets = rig
    alice, bob = targets

    async def leaky_start(self: CaptureSink, run: str, msg: dict[str, Any], owner: object = None) -> dict[str, Any]:
        """A sink that takes the lease, then refuses."""
        self._leases.acquire(f"model-call:{msg.get('call_id')}", f"{run}/agent")
        raise InvalidArgument("refused after all")

    monkeypatch.setattr(CaptureSink, "on_call_start", leaky_start)
    f = fz.Fuzzer(r, targets, random.Random(1))
    await f.snapshot()
    await f.throw(fz.Case("leaky", fz.line({"id": 1, "type": "call_start", "call_id": "c1", "role": "a"}), "error"))
    assert f.tally.counts["state_changed_on_error"] == 1 and "leases" in f.tally.findings[0]

    async def misfiling(self: CaptureSink, run: str, msg: dict[str, Any]) -> dict[str, Any]:
        """A sink that files alice's record under bob's run, then refuses."""
        rec = fz.record_for(alice.run_id)
        await r.store.put_call(bob.key, rec["call_id"], "agent", rec)
        raise InvalidArgument("refused after all")

    monkeypatch.setattr(CaptureSink, "on_record", misfiling)
    record = fz.record_for(alice.run_id)
    await f.throw(fz.Case("misfiled", fz.line({"id": 2, "type": "record", "record": record}), "error"))
    assert f.tally.counts["cross_tenant_leaks"] == 1 and "changed bob/fuzz-bob" in f.tally.findings[-1]


# Run in a fresh interpreter: RSS growth is only a clean signal in a process whose
# allocator has not kept memory freed by earlier tests (a long pytest process reuses
# it, and an unbounded server's buffers then hardly raise its RSS).
_RSS_GROWTH_SCRIPT = """
import asyncio, json, sys
from pathlib import Path
from sclated.bench._fuzz_socket import memory_attack
from sclated.sandbox import ControlLimits, ControlServer

async def hello(msg):
    return {}

async def main(sock):
    grown = {}
    for name, limits in (
        ("unbounded", ControlLimits(line_bytes=2**31, held_bytes=2**32, connections=1000)),
        ("bounded", ControlLimits()),
    ):
        server = ControlServer(sock, {"hello": hello}, limits)
        await server.start()
        try:
            sent, grown[name] = await memory_attack(sock, 20, 8 * 1024 * 1024)
        finally:
            await server.close()
        grown[name + "_sent"] = sent
        await asyncio.sleep(0.2)
    print(json.dumps(grown))

asyncio.run(main(Path(sys.argv[1])))
"""


async def test_rss_growth_comes_out_large_against_a_server_that_buffers_without_bound(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _RSS_GROWTH_SCRIPT, str(tmp_path / "s.sock"), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0
    grown = json.loads(out)
    for name in ("unbounded", "bounded"):
        assert grown[name + "_sent"] >= 20 * 8 * 1024 * 1024 * 0.9, grown
    assert grown["unbounded"] > 100 and grown["unbounded"] > 2 * grown["bounded"], grown
    assert ControlLimits().line_bytes == MAX_CONTROL_LINE_BYTES
