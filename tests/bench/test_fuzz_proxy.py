"""The capture-proxy part of `sclated bench fuzz`: real mitmdump, the real addon, a faulty
upstream; every call recorded, as failed with a cause, and the proxy serving on."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from sclated.bench import _fuzz_proxy as fz

MITMDUMP_MISSING = not (Path(sys.executable).parent / "mitmdump").exists()
pytestmark = pytest.mark.skipif(MITMDUMP_MISSING, reason="mitmdump not installed")


async def test_every_malformed_upstream_answer_is_a_failed_call_and_the_proxy_serves_on() -> None:
    out = await fz.run(argparse.Namespace(), seed=1)
    assert out["findings"] == []
    for count in ("crashes", "internal_errors", "state_changed_on_error", "cross_tenant_leaks"):
        assert out[count] == 0, count
    expected = sum(len(spec.streams) for spec in fz.FAULTS.values()) * len(fz.APIS)
    assert out["cases"] == expected >= 100
    causes = out["failure_causes"]
    assert sum(causes.values()) == expected
    # The well-formed answers are the only successes; the rest failed for a cause the run reports.
    successes = sum(len(s.streams) for s in fz.FAULTS.values() if not s.failed) * len(fz.APIS)
    assert causes["none"] == successes
    assert {"bad_response", "aborted", "upstream_5xx"} <= set(causes)


async def test_a_proxy_that_records_nothing_is_found_wanting() -> None:
    # mitmdump without the addon passes every call through and records none.
    out = await fz.run(argparse.Namespace(), seed=1, faults=("ok", "invalid_json"), addon=False, record_wait_s=0.5)
    assert out["cases"] == 12 and out["crashes"] == 0
    assert out["internal_errors"] == 12
    assert all("no record" in f for f in out["findings"])


def test_every_fault_has_a_case_for_each_api() -> None:
    assert set(fz.APIS) == {"openai_chat", "openai_responses", "anthropic_messages"}
    for name, spec in fz.FAULTS.items():
        assert spec.streams, name
    assert not fz.FAULTS["ok"].failed and fz.FAULTS["huge_body_50mb"].failed
