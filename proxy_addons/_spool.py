"""Finished records on disk until the daemon acknowledges them.

Layout (``images/sandbox/sclate-capture-drain`` reads it at sandbox close):
``<spool>/<call_id>.json`` per record waiting, ``<spool>/rejected/<call_id>.json``
per record refused as invalid, ``<spool>/.<call_id>.json.tmp`` while writing.

No threads here, and none for calling it: under libfaketime (every sandbox)
a second Python thread in the proxy makes the GIL hand-off spin. The addon
writes after the response has gone out.
"""

import contextlib
import os
from pathlib import Path

DEFAULT_SPOOL = "/var/spool/sclate"


class Spool:
    """Writes are temp + fsync + rename, so a crash leaves either the whole
    record or nothing; records the daemon rejects as invalid move to
    ``rejected/`` instead of being retried forever."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def path(self, call_id: str) -> Path:
        return self.root / f"{call_id}.json"

    def write(self, call_id: str, text: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.path(call_id)
        tmp = self.root / f".{call_id}.json.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)

    def remove(self, call_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(call_id).unlink()

    def reject(self, call_id: str) -> None:
        target = self.root / "rejected"
        target.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path(call_id), target / f"{call_id}.json")

    def pending(self) -> list[tuple[str, str]]:
        """``(call_id, text)`` of every record waiting, oldest first."""
        if not self.root.is_dir():
            return []
        out: list[tuple[str, str]] = []
        for p in sorted(self.root.glob("*.json"), key=_mtime):
            with contextlib.suppress(FileNotFoundError):
                out.append((p.stem, p.read_text(encoding="utf-8")))
        return out


def _mtime(p: Path) -> int:
    try:
        return p.stat().st_mtime_ns
    except FileNotFoundError:  # removed by a delivery meanwhile
        return 0
