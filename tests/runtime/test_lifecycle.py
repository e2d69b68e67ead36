"""Container lifecycle, hardening, labels, reaping and error paths on the real engine."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from sclated.errors import FailedPrecondition, InvalidArgument, NotFound, RuntimeUnavailable
from sclated.runtime import (
    LABEL_DAEMON,
    LABEL_RUN,
    LABEL_TENANT,
    DockerRuntime,
    Limits,
    Mount,
    SandboxManager,
    SandboxSpec,
    VolumeMount,
)

from .conftest import SIM_START_NS

pytestmark = pytest.mark.docker


def _spec(image: str, run: str, **kw: object) -> SandboxSpec:
    return SandboxSpec(image=image, run=run, tenant="acme", **kw)  # type: ignore[arg-type]


async def test_lifecycle_exec_pause_stop_remove(runtime: DockerRuntime, sandbox_image: str) -> None:
    info = await runtime.create(_spec(sandbox_image, "life", env={"GREETING": "hi there"}))
    assert info.state == "created"
    await runtime.start(info.id)
    assert (await runtime.inspect(info.id)).state == "running"

    r = await runtime.exec(info.id, ["sh", "-c", 'echo "$GREETING $EXTRA"; pwd; echo err >&2'],
                           env={"EXTRA": "x"}, workdir="/tmp")  # fmt: skip
    assert r.ok and r.stdout == b"hi there x\n/tmp\n" and r.stderr == b"err\n"

    r = await runtime.exec(info.id, ["id", "-un"], user="nobody")
    assert r.stdout.strip() == b"nobody"

    r = await runtime.exec(info.id, ["sh", "-c", "exit 7"])
    assert r.exit_code == 7 and not r.ok and not r.timed_out

    r = await runtime.exec(info.id, ["sleep", "30"], timeout_s=0.5)
    assert r.timed_out and r.seconds < 5

    await runtime.exec(info.id, ["sh", "-c", "echo to-the-log > /proc/1/fd/1"])
    assert "to-the-log" in await runtime.logs(info.id)

    stats = await runtime.stats(info.id)
    assert stats.memory_limit_bytes == Limits().memory_bytes
    assert stats.pids >= 1

    await runtime.pause(info.id)
    assert (await runtime.inspect(info.id)).state == "paused"
    with pytest.raises(FailedPrecondition, match="paused"):
        await runtime.exec(info.id, ["true"])
    await runtime.unpause(info.id)
    assert (await runtime.exec(info.id, ["true"])).ok

    await runtime.stop(info.id, grace_s=1)
    assert (await runtime.inspect(info.id)).state == "exited"
    await runtime.stop(info.id)  # already stopped: no error
    await runtime.remove(info.id)
    await runtime.remove(info.id)  # already gone: no error
    with pytest.raises(NotFound):
        await runtime.inspect(info.id)


async def test_hardened_by_default(runtime: DockerRuntime, sandbox_image: str) -> None:
    info = await runtime.create(_spec(sandbox_image, "hard", limits=Limits(
        memory_bytes=128 << 20, nano_cpus=500_000_000, pids=100)))  # fmt: skip
    await runtime.start(info.id)
    raw = await runtime.inspect_raw(info.id)
    hc = raw["HostConfig"]
    assert hc["Privileged"] is False
    assert hc["CapDrop"] == ["ALL"] and not hc["CapAdd"]
    assert "no-new-privileges:true" in hc["SecurityOpt"]
    assert (hc["Memory"], hc["NanoCpus"], hc["PidsLimit"]) == (128 << 20, 500_000_000, 100)
    assert hc["NetworkMode"] == "none"
    script = (
        "grep CapEff /proc/self/status; ls /sys/class/net; "
        "test -e /var/run/docker.sock && echo SOCKET; "
        "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 2)' "
        "2>&1 | tail -1"
    )
    out = (await runtime.exec(info.id, ["sh", "-c", script])).text
    assert "CapEff:\t0000000000000000" in out
    assert out.split("\n")[1] == "lo"
    assert "SOCKET" not in out
    assert "Network is unreachable" in out
    # Without capabilities root cannot even chown someone else's file.
    r = await runtime.exec(info.id, ["chown", "nobody", "/etc/hostname"])
    assert r.exit_code != 0


async def test_labels_list_adopt_and_reap(
    runtime: DockerRuntime, sandbox_image: str, short_dir: Path
) -> None:
    keep = await runtime.create(_spec(sandbox_image, "keep"))
    gone = await runtime.create(
        _spec(sandbox_image, "gone", network_mode="run", volumes=(VolumeMount("mem", "/memory"),))
    )
    stopped_kept = await runtime.create(_spec(sandbox_image, "keep", role="aux"))
    for c in (keep, gone):
        await runtime.start(c.id)
    listed = await runtime.list_containers({LABEL_DAEMON: runtime.daemon_id})
    assert {c.id for c in listed} == {keep.id, gone.id, stopped_kept.id}
    assert all(c.labels[LABEL_TENANT] == "acme" for c in listed)
    assert {c.id for c in await runtime.list_containers({LABEL_RUN: "gone",
            LABEL_DAEMON: runtime.daemon_id})} == {gone.id}  # fmt: skip
    # What a stopped daemon would leave, by name (the soak counts it).
    found = await runtime.labelled(runtime.daemon_id)
    assert sorted(found["containers"]) == sorted(c.name for c in (keep, gone, stopped_kept))
    assert len(found["networks"]) == 1 and len(found["volumes"]) == 1

    # Another daemon's containers are invisible to this daemon's reap.
    other = await DockerRuntime.connect(runtime.daemon_id + "-other")
    try:
        foreign = await other.create(_spec(sandbox_image, "gone"))
        # A restarted daemon (same id, new process) adopts the live runs it keeps...
        restarted = await DockerRuntime.connect(runtime.daemon_id)
        try:
            adopted = await restarted.adopt(runtime.daemon_id, {"keep"})
            assert [c.id for c in adopted] == [keep.id]  # the created-only one is not live
            # ... and reaps the rest, with the per-run network and volume.
            reaped = await restarted.reap(runtime.daemon_id, keep={"keep"})
            assert {c.id for c in reaped} == {gone.id}
        finally:
            await restarted.close()
        left = await runtime.list_containers({LABEL_DAEMON: runtime.daemon_id})
        assert {c.id for c in left} == {keep.id, stopped_kept.id}
        assert (await other.inspect(foreign.id)).state == "created"
        nets = await runtime.docker._query_json("networks", params={"filters": json.dumps(
            {"label": [f"{LABEL_DAEMON}={runtime.daemon_id}"]})})  # fmt: skip
        vols = await runtime.docker._query_json("volumes", params={"filters": json.dumps(
            {"label": [f"{LABEL_DAEMON}={runtime.daemon_id}"]})})  # fmt: skip
        assert nets == [] and not vols["Volumes"]
        after = await runtime.labelled(runtime.daemon_id)
        assert sorted(after["containers"]) == sorted(c.name for c in (keep, stopped_kept))
        assert after["networks"] == [] and after["volumes"] == []
    finally:
        await other.reap(other.daemon_id, keep=set())
        await other.close()


async def test_unknown_image_is_not_found_and_leaves_nothing(runtime: DockerRuntime) -> None:
    spec = _spec("sclate-sandbox:no-such-tag", "ghost", volumes=(VolumeMount("m", "/memory"),))
    with pytest.raises(NotFound, match="sclated images build"):
        await runtime.create(spec)
    assert await runtime.list_containers({LABEL_DAEMON: runtime.daemon_id}) == []
    vols = await runtime.docker._query_json("volumes", params={"filters": json.dumps(
        {"label": [f"{LABEL_DAEMON}={runtime.daemon_id}"]})})  # fmt: skip
    assert not vols["Volumes"]


async def test_bad_specs_are_invalid_arguments(
    runtime: DockerRuntime, sandbox_image: str, short_dir: Path
) -> None:
    with pytest.raises(InvalidArgument, match="run"):
        _spec(sandbox_image, "has space")
    with pytest.raises(InvalidArgument, match="absolute"):
        _spec(sandbox_image, "r", mounts=(Mount("rel/dir", "/x"),))
    with pytest.raises(InvalidArgument, match="network_mode"):
        _spec(sandbox_image, "r", network_mode="host")
    with pytest.raises(InvalidArgument, match="6 MiB"):
        Limits(memory_bytes=1024)
    with pytest.raises(InvalidArgument, match="Docker socket"):
        await runtime.create(_spec(sandbox_image, "r", mounts=(
            Mount("/var/run/docker.sock", "/var/run/docker.sock"),)))  # fmt: skip
    with pytest.raises(InvalidArgument, match="reserved"):
        SandboxManager(runtime).spec_for(image=sandbox_image, run="r", tenant="t",
            run_dir=short_dir, mounts=(Mount(str(short_dir), "/run/sclate/x"),))  # fmt: skip
    with pytest.raises(InvalidArgument, match="LD_PRELOAD"):
        SandboxManager(runtime).spec_for(image=sandbox_image, run="r", tenant="t",
            run_dir=short_dir, env={"LD_PRELOAD": "x"})  # fmt: skip
    with pytest.raises(InvalidArgument, match="engine rejected"):
        await runtime.create(_spec(sandbox_image, "r", mounts=(
            Mount(str(short_dir / "does-not-exist"), "/data"),)))  # fmt: skip
    assert await runtime.list_containers({LABEL_DAEMON: runtime.daemon_id}) == []


async def test_engine_down_is_runtime_unavailable(monkeypatch: pytest.MonkeyPatch,
                                                  short_dir: Path) -> None:  # fmt: skip
    monkeypatch.setenv("DOCKER_HOST", f"unix://{short_dir}/no-engine.sock")
    with pytest.raises(RuntimeUnavailable, match="not answering"):
        await DockerRuntime.connect("down")


async def test_manager_layout_and_cleanup_on_failure(
    manager: SandboxManager, runtime: DockerRuntime, sandbox_image: str, short_dir: Path
) -> None:
    spec = manager.spec_for(image=sandbox_image, run="lay", tenant="acme", run_dir=short_dir)
    sb = await manager.create(spec, short_dir, sim_ns=SIM_START_NS, probe=False)
    assert sb.paths.root == short_dir / "sandbox"
    assert sb.paths.time_file.read_text().startswith(("+", "-"))
    out = (await sb.sh("ls /run/sclate /run/sclate/time; touch /run/sclate/time/x 2>&1")).text
    assert "faketime.rc" in out and "Read-only file system" in out
    await sb.remove()

    # A sandbox whose clock cannot be faked fails its probe and is removed.
    broken = SandboxSpec(**{**spec.__dict__, "run": "broken",
                            "env": {**spec.env, "LD_PRELOAD": "/nonexistent.so"}})  # fmt: skip
    with pytest.raises(FailedPrecondition, match="time probe"):
        await manager.create(broken, short_dir, sim_ns=SIM_START_NS)
    await asyncio.sleep(0)
    assert await runtime.list_containers({LABEL_DAEMON: runtime.daemon_id}) == []
