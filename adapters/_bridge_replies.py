"""What the harnesses' in-sandbox bridges print, read on the host (shared by Hermes and OpenClaw)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sclated.errors import InvalidArgument

__all__ = ["last_json", "number_option"]


def last_json(output: str) -> dict[str, Any] | None:
    """The last line of ``output`` that is a JSON object (a bridge's report), if any."""
    for line in reversed(output.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def number_option(options: Mapping[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    """A numeric run option in ``[lo, hi]``; the error names ``run.agent.options.<key>``."""
    value = options.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidArgument(f"{key} must be a number in [{lo:g}, {hi:g}]", field=f"run.agent.options.{key}")
    return float(value)
