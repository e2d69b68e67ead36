"""`sclated bench faults`: faults injected into a real daemon, its sandboxes and its model.

Against real `sclated` processes, real sandboxes (the reference harness) and the
embedded model, each fault is injected at seeded random points (the seed is
printed; ``--seed`` repeats a campaign):

1. SIGKILL of the daemon at ``--daemon-kills`` points (default 20), each followed
   by a restart, during scripted synthetic runs and a sandboxed MetaClaw ``tiny`` run;
2. SIGKILL of the embedded model server during a call, and during a streaming call;
3. SIGKILL of mitmdump inside the sandbox during a call;
4. the sandbox's container killed during a turn, and paused during a model call for
   longer than the call's lease TTL;
5. SIGKILL of the harness process inside the sandbox during a turn;
6. the control socket closed from inside during a ``wait``;
7. the state directory's disk full (a 64 MiB tmpfs) during runs;
8. SIGTERM during a snapshot, and during a restore.

Each run under a fault is a case: ``recovered`` (SUCCEEDED, after a resume where
one was needed), ``failed_clearly`` (ended with a reason naming the fault) or
``unclear``. Every event a client was delivered and every call record the daemon
acknowledged before a fault must be there afterwards, byte for byte; each run's
stored journal must replay without divergence; a run must hold no lease when it
ends; and once each daemon stopped, no container, snapshot image not kept by a
snapshot, control socket, half-made snapshot or model server may be left. The
sandboxed faults need the reference harness's image (``sclated images build``);
without it they are listed in ``faults_skipped`` and the targets are not met.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from sclated.bench import _faults_cases as cases
from sclated.bench._faults_check import CaseOutcome, figures

__all__ = ["bench_faults"]

CALL_LEASE_TTL_S = 10.0
"""The sandboxed runs' model-call lease TTL (run option ``call_lease_ttl_s``), so a pause
longer than it fits in the bench; the pause lasts twice as long."""


async def _images_missing() -> str | None:
    """Why sandboxed faults cannot run here (None: the reference harness's image is built)."""
    import aiodocker

    from adapters.reference_harness.image import IMAGE_NAME, register_image
    from sclated.runtime import image_ref

    register_image()
    try:
        ref = await image_ref(IMAGE_NAME)
        async with aiodocker.Docker() as docker:
            await docker.images.inspect(ref)
    except Exception as exc:  # no engine, no image: the same answer for the bench
        return f"the reference harness's image is not there ({exc}); `sclated images build` makes it"
    return None


class _Campaign:
    def __init__(
        self, tmp: Path, seed: int, progress: Callable[[str], None], only: set[str], keep: Path | None
    ) -> None:
        self.tmp = tmp
        self.only = only
        self.keep = keep
        """Where each daemon's state directory is copied once its part ended (``--keep``)."""
        self.seed = seed
        self.progress = progress
        self.tag = f"f{seed % 100_000}-{secrets.token_hex(2)}"
        """Run ids carry it: snapshot image tags are per run id across daemons on one engine."""
        self.cases: list[CaseOutcome] = []
        self.injected = 0
        self.leftovers: dict[str, list[str]] = {}
        self.skipped: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        """Parts that broke (a daemon that would not start again), with what broke them."""

    def selected(self, *names: str) -> bool:
        return any(n in self.only for n in names)

    @contextlib.asynccontextmanager
    async def phase(self, name: str, state: Path, *extra: str) -> AsyncIterator[Any]:
        """A daemon for some cases; on the way out its runs are concluded, it is stopped,
        what it left behind is counted, then cleaned away."""
        from sclated.bench._daemon import reap_daemon_sandboxes
        from sclated.bench._faults_daemon import FaultDaemon
        from sclated.bench._faults_phase import Phase

        state.mkdir(parents=True, exist_ok=True)
        (state / "daemon-id").write_text(f"bench-faults-{os.getpid()}-{secrets.token_hex(3)}\n")
        daemon = FaultDaemon(state, "--max-running", "16", "--drain-grace-s", "2", "--no-reports")
        await daemon.start()
        # Each part draws from its own stream: `--only` repeats a part's points exactly.
        phase = Phase(daemon, lambda line: self.progress(f"{name}: {line}"), random.Random(f"{self.seed}/{name}"))
        try:
            yield phase
            concluded = await phase.conclude(timeout_s=900)
            for case in concluded:
                self.progress(f"{name}: {case.fault} {case.run}: {case.outcome} ({case.state}: {case.reason[:100]})")
            self.cases.extend(concluded)
            self.injected += phase.injected
            await daemon.terminate()
            for kind, items in (await phase.leftovers()).items():
                self.leftovers.setdefault(kind, []).extend(items)
        finally:
            await daemon.close()
            if self.keep is not None:
                await asyncio.to_thread(_keep, state, self.keep / name)
            with contextlib.suppress(Exception):
                await asyncio.shield(reap_daemon_sandboxes(state))
            with contextlib.suppress(Exception):
                await asyncio.shield(_remove_images(daemon.daemon_id))


def _keep(state: Path, dest: Path) -> None:
    """A copy of a state directory (its database, logs, run folders) for a reader."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(state, dest, ignore=lambda d, names: [n for n in names if (Path(d) / n).is_socket()])


async def _remove_images(daemon_id: str) -> None:
    """The daemon's snapshot images (counted already): the bench leaves none behind."""
    import json

    import aiodocker

    from sclated.runtime import LABEL_DAEMON

    async with aiodocker.Docker() as docker:
        for image in await docker.images.list(filters=json.dumps({"label": [f"{LABEL_DAEMON}={daemon_id}"]})):
            with contextlib.suppress(Exception):
                await docker.images.delete(image["Id"], force=True)


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Any:
    """A tmpfs of ``size`` mounted at ``path``, unmounted (lazily, if busy) on the way out."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True, capture_output=True)
    try:
        yield path
    finally:
        done = subprocess.run(["umount", str(path)], capture_output=True)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


async def bench_faults(args: argparse.Namespace) -> dict[str, Any]:
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    print(f"sclated bench faults: seed {seed}", file=sys.stderr, flush=True)

    def progress(line: str) -> None:
        if not args.json or args.verbose:
            print(f"faults {time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)

    kills = args.daemon_kills if args.daemon_kills is not None else (5 if args.quick else 20)
    only = set(args.only or PHASES)  # names checked by the option's choices (FAULTS_PARTS)
    # A daemon (or model server) that crashes writes its Python stack to its log.
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")
    t0 = time.monotonic()
    missing = await _images_missing()
    with tempfile.TemporaryDirectory(prefix="sclate-bench-faults-") as tmp:
        c = _Campaign(Path(tmp), seed, progress, only, args.keep)
        chosen: list[str] = []
        for name in PHASES:
            if not c.selected(name, *(SANDBOX_FAULTS if name == "sandbox" else ())):
                c.skipped[name] = "not selected (--only)"
            elif missing is not None and name == "sandbox":
                c.skipped[name] = missing
            elif name == "disk" and (shutil.which("mount") is None or os.geteuid() != 0):
                c.skipped[name] = "mounting a tmpfs needs root and mount(8)"
            else:
                chosen.append(name)
        # Each part has a daemon (and model server) of its own: they go side by side. A part
        # that breaks is reported; the others go on.
        done = await asyncio.gather(
            *(_PHASES[name](c, kills=kills, sandboxed=missing is None) for name in chosen), return_exceptions=True
        )
        for name, result in zip(chosen, done, strict=True):
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, BaseException):
                c.errors[name] = f"{type(result).__name__}: {result}"[:2000]
        if missing is not None and "kill" in only:
            c.skipped["kill (sandboxed run)"] = missing
    out = figures(c.cases, seed=seed, faults_injected=c.injected, leftovers=c.leftovers, skipped=c.skipped)
    if c.errors:
        out["errors"] = c.errors
    out["meets_targets"] = out["meets_targets"] and not c.skipped and not c.errors
    out["wall_s"] = round(time.monotonic() - t0, 1)
    out["cpus"] = os.cpu_count()
    return out


async def _kill(c: _Campaign, *, kills: int, sandboxed: bool) -> None:
    """1. The daemon SIGKILLed, during scripted synthetic runs and a sandboxed MetaClaw tiny run."""
    async with c.phase("kill", c.tmp / "kill") as p:
        # MetaClaw tiny one day at a time (day01, day02, day03): kills keep landing on
        # sandboxed runs at every stage, and the part ends soon after its last kill.
        sandboxed_run = (lambda i: cases.metaclaw_run(f"day0{i % 3 + 1}")) if sandboxed else None
        p.injected += await cases.daemon_kills(p, p.rng, kills, sandboxed=sandboxed_run, prefix=f"{c.tag}-k")


async def _disk(c: _Campaign, **_: Any) -> None:
    """7. The state directory's disk full (a small tmpfs filled up)."""
    with _tmpfs(c.tmp / "disk", "64m") as disk:
        async with c.phase("disk", disk / "state") as p:
            n, refusals = await cases.disk_full(p, p.rng, disk, f"{c.tag}-d")
            p.injected += n
            c.cases.extend(refusals)


async def _sigterm(c: _Campaign, **_: Any) -> None:
    """8 (scripted runs): SIGTERM during a snapshot and during a restore."""
    async with c.phase("sigterm", c.tmp / "sigterm") as p:
        p.injected += await cases.sigterm_snapshot(p, p.rng, cases.scripted_run(3, turn_ms=1500), f"{c.tag}-ts")
        p.injected += await cases.sigterm_restore(p, p.rng, cases.scripted_run(3, turn_ms=600), f"{c.tag}-tr")


SANDBOX_FAULTS = (
    "mitmdump_kill",
    "container_kill",
    "container_pause",
    "harness_kill",
    "control_close",
    "model_kill",
    "sigterm_snapshot",
    "sigterm_restore",
)
"""The sandbox part's faults (``--only`` takes them one by one too)."""


async def _sandboxed(c: _Campaign, **_: Any) -> None:
    """Faults 2-6 and 8 on sandboxed runs (one daemon; the faults of one run each run together)."""
    tag = c.tag
    short = cases.synthetic_sandboxed_run
    chosen = [f for f in SANDBOX_FAULTS if c.selected("sandbox", f)]
    c.skipped.update({f: "not selected (--only)" for f in SANDBOX_FAULTS if f not in chosen})
    async with c.phase("sandbox", c.tmp / "sandbox") as p:
        rng = p.rng
        # Faults confined to one run's sandbox, side by side.
        alone: dict[str, Callable[[], Awaitable[int]]] = {
            "mitmdump_kill": lambda: cases.mitmdump_kill(p, rng, short(days=1, events=3), f"{tag}-mitm"),
            "container_kill": lambda: cases.container_kill(p, rng, short(), f"{tag}-ckill"),
            "container_pause": lambda: cases.container_pause(
                p, rng, short(call_lease_ttl_s=CALL_LEASE_TTL_S), f"{tag}-cpause", 2 * CALL_LEASE_TTL_S
            ),
            "harness_kill": lambda: cases.harness_kill(p, rng, short(), f"{tag}-hkill"),
            "control_close": lambda: cases.control_close(p, rng, short(), f"{tag}-wait"),
        }
        injected: list[int] = await asyncio.gather(*(make() for f, make in alone.items() if f in chosen))
        p.injected += sum(injected)
        await asyncio.gather(*(p.finish(t, 900) for t in p.tracked))
        # The model server is every run's: on its own.
        if "model_kill" in chosen:
            p.injected += await cases.model_kill(p, rng, short(days=1, events=3), f"{tag}-model")
            await asyncio.gather(*(p.finish(t, 900) for t in p.tracked))
        # SIGTERM stops the whole daemon: last.
        if "sigterm_snapshot" in chosen:
            # Not at a turn boundary: the SIGTERM lands while the sandbox is paused and committed.
            run = short(days=1, events=3)
            p.injected += await cases.sigterm_snapshot(p, rng, run, f"{tag}-tsnap", at_turn_boundary=False)
        if "sigterm_restore" in chosen:
            p.injected += await cases.sigterm_restore(p, rng, short(days=1, events=3), f"{tag}-trest")


_PHASES: dict[str, Callable[..., Awaitable[None]]] = {
    "kill": _kill,
    "disk": _disk,
    "sigterm": _sigterm,
    "sandbox": _sandboxed,
}
PHASES = tuple(_PHASES)
"""The campaign's parts, in order (``--only`` picks some, or single faults of the sandbox part)."""
