"""Content-hashed local images: tags, idempotent builds, what the images contain."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sclated.errors import FailedPrecondition, InvalidArgument, NotFound
from sclated.runtime import (
    DockerRuntime,
    ImageRecipe,
    SandboxSpec,
    _images,
    build_all,
    build_images_cli,
    image_ref,
    libfaketime_path,
    recipe_tag,
    register,
)
from sclated.runtime._images import images_dir


@pytest.fixture
def images_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    dest = tmp_path / "images"
    shutil.copytree(images_dir(), dest)
    monkeypatch.setenv("SCLATE_IMAGES_DIR", str(dest))
    yield dest


def test_tags_are_content_hashes(images_copy: Path) -> None:
    base, sandbox = recipe_tag("sclate-base"), recipe_tag("sclate-sandbox")
    assert len(base) == 16 and int(base, 16) >= 0
    assert recipe_tag("sclate-sandbox") == sandbox  # stable

    (images_copy / "sandbox" / "Dockerfile").write_text(
        (images_copy / "sandbox" / "Dockerfile").read_text() + "\n# changed\n"
    )
    assert recipe_tag("sclate-base") == base
    assert recipe_tag("sclate-sandbox") != sandbox

    (images_copy / "sandbox" / "sclate-wait").chmod(0o644)  # the mode is content too
    changed_mode = recipe_tag("sclate-sandbox")
    (images_copy / "sandbox" / "sclate-wait").chmod(0o755)
    assert recipe_tag("sclate-sandbox") != changed_mode

    with (images_copy / "base" / "packages.txt").open("a") as fh:
        fh.write("curl\n")
    # The parent's tag is part of the child's: a new base rebuilds the sandbox.
    assert recipe_tag("sclate-base") != base
    assert recipe_tag("sclate-sandbox") not in (sandbox, changed_mode)


def test_registry_validation() -> None:
    with pytest.raises(InvalidArgument, match="not registered"):
        register(ImageRecipe(name="x", folder="x", parent="no-such-parent"))
    with pytest.raises(InvalidArgument, match="exactly one"):
        register(ImageRecipe(name="x", folder="x"))
    with pytest.raises(NotFound, match="no image recipe"):
        recipe_tag("no-such-image")


def test_libfaketime_is_the_mt_build_cached_once() -> None:
    """libfaketime's thread-safe build, compiled from the pinned sdist once, then reused."""
    path = libfaketime_path()  # built here if this machine has none cached yet
    assert path.name == "libfaketimeMT.so.1"
    assert path.is_relative_to(_images.cache_dir() / "libfaketime")
    assert path.parent.name.startswith(f"{_images.LIBFAKETIME_VERSION}-")
    stamp = path.stat().st_mtime_ns
    assert libfaketime_path() == path and path.stat().st_mtime_ns == stamp
    assert (2, 2) < _images._glibc_needed(path) <= (2, _images._SANDBOX_GLIBC_MINOR)


def test_libfaketime_without_a_compiler_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCLATE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "cc" else f"/usr/bin/{tool}")
    with pytest.raises(FailedPrecondition, match=r"needs cc on this host; run `make system`.*gcc make"):
        libfaketime_path()
    assert not any((tmp_path / "libfaketime").glob("*/libfaketimeMT.so.1"))


@pytest.mark.docker
async def test_build_all_is_idempotent_and_quick(sandbox_image: str) -> None:
    t0 = time.monotonic()
    lines: list[str] = []
    built = await build_all(lines.append, names=["sclate-sandbox"])
    assert [b.name for b in built] == ["sclate-base", "sclate-sandbox"]
    assert not any(b.built for b in built)
    assert built[-1].ref == sandbox_image
    assert time.monotonic() - t0 < 10
    assert any("up to date" in line for line in lines)
    assert await asyncio.to_thread(build_images_cli, ["--check", "--only", "sclate-sandbox"]) == 0


@pytest.mark.docker
async def test_sandbox_image_contents(runtime: DockerRuntime, sandbox_image: str) -> None:
    info = await runtime.create(SandboxSpec(image=sandbox_image, run="img", tenant="acme"))
    await runtime.start(info.id)
    script = (
        "cat /etc/debian_version; python3 --version; mitmdump --version | head -1; "
        "sha256sum /usr/local/lib/faketime/libfaketime.so.1 | cut -d' ' -f1; "
        "test -x /usr/local/bin/sclate-wait && echo wait-ok; "
        "command -v socat; ls /opt/sclate/venv/lib/python3.11/site-packages | grep -c dist-info"
    )
    out = (await runtime.exec(info.id, ["sh", "-c", script])).text.splitlines()
    assert out[0].startswith("12.")  # bookworm, from debootstrap
    assert out[1].startswith("Python 3.11")
    assert "11.0.2" in out[2]
    assert out[3] == hashlib.sha256(libfaketime_path().read_bytes()).hexdigest()
    assert out[4:6] == ["wait-ok", "/usr/bin/socat"]
    assert int(out[6]) > 20  # mitmproxy and its dependencies, installed offline


@pytest.mark.docker
async def test_adding_an_image_is_a_folder_and_a_registry_entry(
    images_copy: Path, runtime: DockerRuntime, sandbox_image: str
) -> None:
    folder = images_copy / "tiny"
    folder.mkdir()
    (folder / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY hello.txt /hello.txt\n")
    (folder / "hello.txt").write_text("hello from a recipe\n")
    register(ImageRecipe(name="sclate-test-tiny", folder="tiny", parent="sclate-sandbox"))
    ref = await image_ref("sclate-test-tiny")
    try:
        lines: list[str] = []
        built = await build_all(lines.append, names=["sclate-test-tiny"])
        assert [(b.name, b.built) for b in built] == [
            ("sclate-base", False),
            ("sclate-sandbox", False),
            ("sclate-test-tiny", True),
        ]
        assert any("build: Step" in line for line in lines)  # progress was streamed
        info = await runtime.create(SandboxSpec(image=ref, run="tiny", tenant="acme"))
        await runtime.start(info.id)
        out = await runtime.exec(info.id, ["cat", "/hello.txt"])
        assert out.text == "hello from a recipe\n"
        again = await build_all(names=["sclate-test-tiny"])
        assert not again[-1].built
    finally:
        _images._REGISTRY.pop("sclate-test-tiny", None)
        await runtime.reap(runtime.daemon_id, keep=set())
        await runtime.remove_image(ref)
        await runtime.remove_image("sclate-test-tiny:latest")


@pytest.mark.docker
async def test_a_recipe_changed_during_the_build(
    images_copy: Path, runtime: DockerRuntime, sandbox_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files edited while images build: a child is built on its parent as the parent's
    recipe is now, and an image whose own files changed under it is not kept."""
    for folder, text in (("tiny", "parent"), ("tiny-child", "child")):
        (images_copy / folder).mkdir()
        (images_copy / folder / "Dockerfile").write_text(
            f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\nCOPY {folder}.txt /{folder}.txt\n"
        )
        (images_copy / folder / f"{folder}.txt").write_text(text + "\n")
    register(ImageRecipe(name="sclate-test-tiny", folder="tiny", parent="sclate-sandbox"))
    register(ImageRecipe(name="sclate-test-tiny-child", folder="tiny-child", parent="sclate-test-tiny"))
    real_build, real_tag_latest = _images._build_dockerfile, _images._tag_latest
    edits: dict[str, Path] = {}
    after_edits = {"sclate-test-tiny": images_copy / "tiny" / "tiny.txt"}

    async def build_then_edit(docker: Any, recipe: ImageRecipe, tag: str, say: Any) -> None:
        await real_build(docker, recipe, tag, say)
        edited = edits.pop(recipe.name, None)
        if edited is not None:  # edited while it was built (before the build checked)
            edited.write_text("edited while built\n")

    async def done_then_edit(docker: Any, ref: str, name: str) -> None:
        await real_tag_latest(docker, ref, name)
        edited = after_edits.pop(name, None)
        if edited is not None:  # edited once it was built, before its child is
            edited.write_text("parent, edited\n")

    monkeypatch.setattr(_images, "_build_dockerfile", build_then_edit)
    monkeypatch.setattr(_images, "_tag_latest", done_then_edit)
    refs: list[str] = []
    try:
        built = await build_all(names=["sclate-test-tiny-child"])
        refs = [b.ref for b in built if b.built] + ["sclate-test-tiny:latest", "sclate-test-tiny-child:latest"]
        # The parent was built twice (before and after the edit), the child on the second.
        assert [b.name for b in built if b.built][-1] == "sclate-test-tiny-child"
        child = built[-1].ref
        info = await runtime.create(SandboxSpec(image=child, run="tiny", tenant="acme"))
        await runtime.start(info.id)
        assert (await runtime.exec(info.id, ["cat", "/tiny.txt"])).text == "parent, edited\n"

        # Now the child's own file changes while the child builds: nothing kept, and why.
        (images_copy / "tiny-child" / "tiny-child.txt").write_text("child 2\n")
        edits["sclate-test-tiny-child"] = images_copy / "tiny-child" / "tiny-child.txt"
        stale = await image_ref("sclate-test-tiny-child")
        with pytest.raises(FailedPrecondition, match="recipe changed while it was being built"):
            await build_all(names=["sclate-test-tiny-child"])
        assert await _images_exist(stale) is False
    finally:
        _images._REGISTRY.pop("sclate-test-tiny-child", None)
        _images._REGISTRY.pop("sclate-test-tiny", None)
        await runtime.reap(runtime.daemon_id, keep=set())
        for ref in refs:
            with contextlib.suppress(Exception):
                await runtime.remove_image(ref)


async def _images_exist(ref: str) -> bool:
    proc = await asyncio.create_subprocess_exec(
        "docker", "image", "inspect", ref, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    return await proc.wait() == 0
