"""Snapshot and restore: files intact, missing snapshots refused cleanly."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sclated.errors import FailedPrecondition, NotFound, SclateError
from sclated.runtime import (
    LABEL_DAEMON,
    DockerRuntime,
    SandboxManager,
    SnapshotInfo,
    restore,
    snapshot,
)

from .conftest import SIM_START_NS

pytestmark = pytest.mark.docker

WRITE = (
    "mkdir -p /workspace/src /memory && "
    "echo 'print(1)' > /workspace/src/main.py && "
    "echo 'likes tea' > /memory/facts.md && "
    "head -c 3000000 /dev/urandom > /workspace/blob && "
    "echo installed > /opt/outside-state-dirs && "
    "sha256sum /workspace/blob | cut -d' ' -f1"
)
READ = (
    "cat /workspace/src/main.py /memory/facts.md /opt/outside-state-dirs; "
    "sha256sum /workspace/blob | cut -d' ' -f1; ls /workspace"
)


async def test_snapshot_restore_keeps_files(
    runtime: DockerRuntime, manager: SandboxManager, sandbox_image: str, short_dir: Path
) -> None:
    spec = manager.spec_for(image=sandbox_image, run="snap", tenant="acme", run_dir=short_dir)
    sb = await manager.create(spec, short_dir, sim_ns=SIM_START_NS, probe=False)
    digest = (await sb.sh(WRITE)).text.strip()
    info: SnapshotInfo | None = None
    restored_id = ""
    try:
        info = await snapshot(runtime, sb.info, short_dir / "snaps" / "a")
        assert info.image == f"sclate-snap:snap-{info.n}"
        assert (await runtime.inspect(sb.id)).state == "running"  # unpaused again
        assert [a[0] for a in info.archives] == ["/workspace", "/memory"]
        assert info.bytes >= 3_000_000
        assert await SnapshotInfo.load(short_dir / "snaps" / "a") == info

        # Work after the snapshot must not survive the restore.
        await sb.sh("echo later > /workspace/later.txt; echo changed > /memory/facts.md")
        await sb.remove()

        restored = await restore(runtime, info, spec)
        restored_id = restored.id
        out = (await runtime.exec(restored.id, ["sh", "-c", READ])).text.split("\n")
        assert out[:4] == ["print(1)", "likes tea", "installed", digest]
        assert "later.txt" not in out
        # Restored containers carry the run's labels (so they are adopted/reaped).
        assert (await runtime.inspect(restored.id)).labels[LABEL_DAEMON] == runtime.daemon_id

        # A second snapshot of the same run gets the next number.
        again = await snapshot(runtime, restored, short_dir / "snaps" / "b")
        assert again.n == info.n + 1
        await runtime.remove_image(again.image)
        # The restored container still uses the first snapshot: refused, not untagged.
        with pytest.raises(FailedPrecondition, match="still used"):
            await runtime.remove_image(info.image)
    finally:
        if restored_id:
            await runtime.remove(restored_id)
        if info is not None:
            await runtime.remove_image(info.image)


async def test_missing_snapshot_is_not_found_and_leaves_nothing(
    runtime: DockerRuntime, manager: SandboxManager, sandbox_image: str, short_dir: Path
) -> None:
    with pytest.raises(NotFound, match="no snapshot"):
        await SnapshotInfo.load(short_dir / "nowhere")

    spec = manager.spec_for(image=sandbox_image, run="lost", tenant="acme", run_dir=short_dir)
    tar = short_dir / "workspace.tar"
    tar.write_bytes(b"")
    gone_image = SnapshotInfo(
        run="lost", n=1, image="sclate-snap:lost-999999", image_id="", bytes=0,
        archives=(("/workspace", str(tar)),), created_ns=0, pause_ms=0.0,
    )  # fmt: skip
    with pytest.raises(NotFound, match="not on this engine"):
        await restore(runtime, gone_image, spec)
    gone_archive = dataclasses.replace(
        gone_image, image=sandbox_image, archives=(("/workspace", str(short_dir / "x.tar")),)
    )
    with pytest.raises(NotFound, match="archive"):
        await restore(runtime, gone_archive, spec)
    # An archive the engine cannot extract fails after the container was created:
    # the container is removed again.
    tar.write_bytes(b"this is not a tar archive" * 100)
    corrupt = dataclasses.replace(gone_image, image=sandbox_image)
    with pytest.raises(SclateError):
        await restore(runtime, corrupt, spec)
    assert await runtime.list_containers({LABEL_DAEMON: runtime.daemon_id}) == []
