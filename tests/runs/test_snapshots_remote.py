"""Snapshots.save_remote with a test double of a remote worker (the real one is the Ray
actor, tested in tests/cluster/test_ray_snapshots.py): the snapshot appears whole in its
final directory or not at all, and the worker is told to discard what it made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sclated.errors import FailedPrecondition
from sclated.runs import RemoteSnapshot, default_registry
from sclated.runs._snapshots import Snapshots
from sclated.runs._worker import Capture
from sclated.store import JournalRow, RunRow, Store, WriteBatch

KEY = "acme/r1"


class _DoubleRemote:
    """Test double of a remote worker's snapshots: writes a file into the temporary directory."""

    def __init__(self, root: Path, journal_length: int) -> None:
        self.root = root
        self.journal_length = journal_length
        self.discarded: list[RemoteSnapshot] = []

    async def capture(self, tenant: str, snapshot_id: str, *, at_turn_boundary: bool) -> RemoteSnapshot:
        final = self.root / KEY / snapshot_id
        tmp = final.parent / f".{snapshot_id}.tmp-test"
        (tmp / "sandbox").mkdir(parents=True)
        (tmp / "sandbox" / "image.tar").write_bytes(b"image")
        capture = Capture(self.journal_length, 5, {"image": "sclate-snap:r1-1"}, False)
        return RemoteSnapshot(tmp, final, capture, [{"call_id": "c-node", "role": "agent"}])

    async def discard(self, taken: RemoteSnapshot) -> None:
        self.discarded.append(taken)


async def _seed(store: Store, entries: int) -> None:
    await store.insert_run(RunRow(KEY, "acme", {}, "RUNNING", 1))
    await store.write(WriteBatch(journal=[JournalRow(KEY, i, {"seq": i, "kind": "fire"}) for i in range(entries)]))
    await store.put_call(KEY, "c-stored", "agent", {"call_id": "c-stored", "role": "agent"})


async def _noflush() -> None:
    return None


async def test_a_remote_snapshot_is_published_whole_with_its_journal_prefix_and_calls(
    store: Store, tmp_path: Path
) -> None:
    await _seed(store, 4)
    snapshots = Snapshots(store, default_registry(), None, _noflush)
    remote = _DoubleRemote(tmp_path / "shared", journal_length=3)
    view = await snapshots.save_remote(KEY, "acme", remote, "s1")
    final = tmp_path / "shared" / KEY / "s1"
    assert view.name == "runs/r1/snapshots/s1" and view.journal_length == 3 and view.image == "sclate-snap:r1-1"
    assert sorted(p.name for p in final.parent.iterdir()) == ["s1"]  # the temporary directory was renamed
    journal = [json.loads(line) for line in (final / "journal.jsonl").read_text().splitlines()]
    assert [e["seq"] for e in journal] == [0, 1, 2]
    calls = [json.loads(line)["call_id"] for line in (final / "calls.jsonl").read_text().splitlines()]
    assert calls == ["c-stored", "c-node"]
    row = await store.get_snapshot(f"{KEY}/snapshots/s1")
    assert row is not None and row["info"]["dir"] == str(final) and row["info"]["shared"] is True
    assert remote.discarded == []


async def test_a_remote_snapshot_whose_journal_never_arrives_leaves_nothing(store: Store, tmp_path: Path) -> None:
    await _seed(store, 2)
    snapshots = Snapshots(store, default_registry(), None, _noflush)
    remote = _DoubleRemote(tmp_path / "shared", journal_length=3)
    snapshots.remote_journal_wait_s = 0.3
    with pytest.raises(FailedPrecondition) as gap:
        await snapshots.save_remote(KEY, "acme", remote, "s1")
    assert gap.value.reason == "JOURNAL_GAP"
    assert not (tmp_path / "shared" / KEY / "s1").exists()
    assert [t.final_dir.name for t in remote.discarded] == ["s1"]
    assert await store.get_snapshot(f"{KEY}/snapshots/s1") is None
