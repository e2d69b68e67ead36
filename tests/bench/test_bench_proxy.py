"""Smoke tests of the capture-proxy benchmark: shape and bookkeeping, never speed."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sclated.bench import BENCHES
from sclated.bench._proxy import bench_proxy

MITMDUMP_MISSING = not (Path(sys.executable).parent / "mitmdump").exists()
pytestmark = pytest.mark.skipif(MITMDUMP_MISSING, reason="mitmdump not installed")

HEADLINE = (
    "direct_ms_p50",
    "proxied_ms_p50",
    "added_ms_p50",
    "sse_added_ms_per_chunk_p50",
    "sse_transit_added_ms_per_chunk_p50",
    "plain_mitm_added_ms_p50",
    "addon_ms_p50",
    "bare_ms_p50",
    "sse_request_added_ms_p50",
    "sse_addon_transit_ms_per_chunk_p50",
    "echo_direct_ms_p50",
    "echo_proxied_ms_p50",
    "echo_added_ms_p50",
    "proxy_rss_mb",
)


def _check_common(out: dict[str, Any]) -> None:
    assert json.loads(json.dumps(out)) == out
    for key in HEADLINE:
        assert isinstance(out[key], float), key
    # The headline figures are the echo upstream's, as the notes say.
    assert out["added_ms_p50"] == out["echo_added_ms_p50"]
    assert out["direct_ms_p50"] == out["echo_direct_ms_p50"]
    assert "echo upstream" in out["notes"]
    # Every proxied call reached the control socket as one complete record
    # with the token ids the addon asked for, and every lease was returned.
    assert out["calls_sent"] == out["calls_recorded"] == out["calls_complete"]
    assert out["calls_with_token_ids"] == out["calls_sent"]
    assert out["leases_left"] == 0 and out["control_errors"] == 0
    assert out["direct_ms_p50"] > 0 and out["proxied_ms_p50"] > 0
    assert 10 < out["proxy_rss_mb"] < 2000
    assert out["quick"] is True


async def test_quick_bench_against_the_echo_upstream() -> None:
    out = await bench_proxy(calls=6, quick=True, with_model=False, in_sandbox=False)
    _check_common(out)
    # 3 warm-up + 6 measured rounds, 1 warm-up + 2 measured streams, then the
    # idle rounds (3 warm-up + at least 10).
    assert out["calls_sent"] == 9 + 3 + 13
    assert not any(k.startswith(("model_", "sandbox_")) for k in out)
    # The figures side by side: addon over bare, bare over direct.
    assert out["plain_mitm_added_ms_p50"] == out["bare_ms_p50"]


@pytest.mark.model
async def test_quick_bench_with_the_embedded_model() -> None:
    out = await bench_proxy(quick=True, in_sandbox=False)
    _check_common(out)
    for key in ("model_direct_ms_p50", "model_proxied_ms_p50", "model_added_ms_p50"):
        assert isinstance(out[key], float), key
    assert out["model_name"]
    # 12 echo rounds + 3 streams + 13 idle rounds + 3 model pairs, each with their warm-ups.
    assert out["calls_sent"] == (3 + 12) + (1 + 2) + (3 + 10) + (3 + 3)


def test_wired_into_the_cli() -> None:
    assert "proxy" in BENCHES
