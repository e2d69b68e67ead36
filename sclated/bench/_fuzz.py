"""`sclated bench fuzz`: hostile input against the daemon, part by part (issue 17).

Each part of :data:`PARTS` is an ``async def run(args, seed) -> dict`` that
returns at least ``cases``, ``crashes``, ``internal_errors``,
``state_changed_on_error``, ``cross_tenant_leaks`` and ``findings`` (short
descriptions of each failure, capped). Parts run in order, each with the same
seed (printed as ``seed``: ``--seed`` replays a campaign); the aggregate sums
every count of :data:`TARGETS` over the parts and reports each part's
``cases`` under its own key (the API part's as ``requests``). A part that
fails to run is reported in ``part_errors`` and misses the targets.
Adding a part is one line in :data:`PARTS`; ``--part NAME`` (repeatable) runs
only those.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sclated.bench import _fuzz_adapters, _fuzz_api, _fuzz_proxy, _fuzz_socket

__all__ = ["PARTS", "TARGETS", "FuzzPart", "aggregate", "bench_fuzz"]

TARGETS: dict[str, int] = {
    "crashes": 0,
    "internal_errors": 0,
    "state_changed_on_error": 0,
    "cross_tenant_leaks": 0,
}
"""Every count over all parts must be 0."""

EXTRA_COUNTS = ("auth_bypasses", "unnamed_errors")
"""Counts some parts report beside the targets; summed over the parts that do, and held to 0 too."""

MAX_FINDINGS = 100

PartRun = Callable[[argparse.Namespace, int], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class FuzzPart:
    name: str
    cases_key: str
    """The aggregate's key for the part's ``cases`` (``requests``, ``control_socket_cases``, ...)."""
    run: PartRun


PARTS: tuple[FuzzPart, ...] = (
    FuzzPart("api", "requests", _fuzz_api.run),
    FuzzPart("control_socket", "control_socket_cases", _fuzz_socket.run),
    FuzzPart("proxy", "proxy_cases", _fuzz_proxy.run),
    FuzzPart("adapters", "adapters_cases", _fuzz_adapters.run),
)


def aggregate(
    seed: int,
    parts: dict[str, dict[str, Any]],
    errors: dict[str, str],
    wall_s: float,
    declared: tuple[FuzzPart, ...] = PARTS,
) -> dict[str, Any]:
    """One JSON object from the parts' results (``parts``: name -> result, in run order)."""
    keys = {p.name: p.cases_key for p in declared}
    out: dict[str, Any] = {"seed": seed}
    for name, res in parts.items():
        out[keys.get(name, f"{name}_cases")] = int(res.get("cases", 0))
    for key in (*TARGETS, *EXTRA_COUNTS):
        present = [int(res[key]) for res in parts.values() if key in res]
        if key in TARGETS or present:
            out[key] = sum(present)
    findings = [f"{name}: {text}" for name, res in parts.items() for text in res.get("findings", [])]
    findings += [f"{name}: the part failed to run: {err}" for name, err in errors.items()]
    out["findings"] = findings[:MAX_FINDINGS]
    out["parts"] = parts
    out["part_errors"] = errors
    out["wall_s"] = round(wall_s, 2)
    targets = {**TARGETS, **{k: 0 for k in EXTRA_COUNTS if k in out}}
    out["targets"] = targets
    missed = [k for k, v in targets.items() if out[k] != v] + [f"part:{name}" for name in errors]
    out["meets_targets"] = not missed
    out["missed_targets"] = missed
    return out


async def bench_fuzz(args: argparse.Namespace, parts: tuple[FuzzPart, ...] | None = None) -> dict[str, Any]:
    seed = args.seed if getattr(args, "seed", None) is not None else random.SystemRandom().randrange(2**32)
    t0 = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    declared = PARTS if parts is None else parts
    only = getattr(args, "part", None)
    if only:
        unknown = sorted(set(only) - {p.name for p in declared})
        if unknown:
            raise ValueError(f"no fuzz part named {', '.join(unknown)}; have: {', '.join(p.name for p in declared)}")
        declared = tuple(p for p in declared if p.name in only)
    for part in declared:
        try:
            results[part.name] = await part.run(args, seed)
        except Exception as exc:
            errors[part.name] = f"{type(exc).__name__}: {exc}"[:500]
    return aggregate(seed, results, errors, time.perf_counter() - t0, declared)
