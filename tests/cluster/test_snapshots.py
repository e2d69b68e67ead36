"""A node's side of snapshots kept in the shared directory: paths written as they will be
after the rename, and an image loaded only when the engine lacks its id."""

from __future__ import annotations

import json
from pathlib import Path

import aiodocker
import pytest

from sclated.cluster._snapshots import _relocate, ensure_image, shared_dir, temp_dir

TAG = "sclate-test-ensure-image:1"


def test_a_snapshots_paths_are_written_as_they_will_be_once_renamed(tmp_path: Path) -> None:
    final = shared_dir(tmp_path, "acme/r1", "s1")
    tmp = temp_dir(final)
    assert tmp.parent == final.parent and tmp.name.startswith(".s1.tmp-")
    (tmp / "sandbox").mkdir(parents=True)
    (tmp / "sandbox" / "workspace.tar").write_bytes(b"tar")
    archives = [["/workspace", str(tmp / "sandbox" / "workspace.tar")]]
    (tmp / "sandbox" / "snapshot.json").write_text(json.dumps({"image": "sclate-snap:r1-1", "archives": archives}))
    out = _relocate(tmp, final, {"image": "sclate-snap:r1-1", "archives": archives})
    moved = [["/workspace", str(final / "sandbox" / "workspace.tar")]]
    assert out["archives"] == moved
    assert json.loads((tmp / "sandbox" / "snapshot.json").read_text())["archives"] == moved


@pytest.mark.docker
async def test_an_image_the_engine_has_by_id_is_not_loaded_again_only_tagged(tmp_path: Path) -> None:
    async with aiodocker.Docker() as docker:
        images = [i for i in await docker.images.list() if i.get("RepoTags")]
        assert images, "no image on this engine (scripts/setup-system.sh builds the sandbox images)"
        image_id = str(images[0]["Id"])
        # No image.tar in the directory: a load would fail, so True or an error means it tried.
        (tmp_path / "sandbox").mkdir()
        (tmp_path / "sandbox" / "snapshot.json").write_text(json.dumps({"image": TAG, "image_id": image_id}))
        try:
            assert await ensure_image(tmp_path) is False
            assert (await docker.images.inspect(TAG))["Id"] == image_id
            assert await ensure_image(tmp_path) is False  # again: nothing to do
        finally:
            await docker.images.delete(TAG)  # only the tag: the image stays
