"""What the parts of `sclated bench fuzz` in this folder share: the counts each returns
(the aggregator's contract) and the local runner (``python -m sclated.bench._fuzz_socket
--seed 1`` prints the part's JSON)."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

__all__ = ["COUNTS", "FINDINGS_CAP", "Tally", "main"]

COUNTS = ("crashes", "internal_errors", "state_changed_on_error", "cross_tenant_leaks")
"""What every part counts (each must come out 0)."""
FINDINGS_CAP = 20

PartRun = Callable[[argparse.Namespace, int], Coroutine[Any, Any, dict[str, Any]]]


@dataclass
class Tally:
    cases: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    findings: list[str] = field(default_factory=list)
    """One short line per failure, the first FINDINGS_CAP of them."""

    def find(self, kind: str, text: str) -> None:
        """Count a failure of ``kind`` (one of COUNTS, or a part's own count) and say what it was."""
        self.counts[kind] += 1
        if len(self.findings) < FINDINGS_CAP:
            self.findings.append(f"{kind}: {text}"[:400])

    def result(self) -> dict[str, Any]:
        """The contract's part of a result: ``cases``, every count of COUNTS and ``findings``."""
        return {"cases": self.cases, **{k: self.counts[k] for k in COUNTS}, "findings": list(self.findings)}


def main(prog: str, run: PartRun, argv: list[str] | None = None) -> int:
    """Run one part on its own and print its JSON (for measuring it)."""
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    print(json.dumps(asyncio.run(run(args, args.seed))))
    return 0
