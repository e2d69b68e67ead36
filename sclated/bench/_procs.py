"""The host's processes as /proc shows them: who is whose parent (for the benches that
find a daemon's children, or count what it left running)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["children", "descendants"]


def _parents(*, live_only: bool) -> dict[int, int]:
    """Each process's parent pid; zombies left out with ``live_only``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # it ended meanwhile
        # The command name may hold spaces and parentheses: the fields follow its last ")".
        fields = stat.rsplit(")", 1)[1].split()
        if live_only and fields[0] == "Z":
            continue
        parents[int(entry)] = int(fields[1])
    return parents


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (zombies included)."""
    return [p for p, ppid in _parents(live_only=False).items() if ppid == pid]


def descendants(pid: int) -> int:
    """How many live (not zombie) processes descend from ``pid``."""
    parents = _parents(live_only=True)
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, ppid in parents.items() if ppid in frontier and p not in found}
        found |= frontier
    return len(found)
