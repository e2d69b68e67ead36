"""`DockerRuntime`: the runtime on a Docker engine, through aiodocker only."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import time
from collections.abc import Mapping, Sequence, Set
from pathlib import Path
from typing import Any

import aiodocker
from aiodocker.containers import DockerContainer
from aiodocker.exceptions import DockerError

from sclated.errors import FailedPrecondition, InvalidArgument, NotFound
from sclated.runtime._engine import connect, docker_error, file_chunks, is_not_found, raw_query
from sclated.runtime._exec_stream import ExecStream, open_exec_stream
from sclated.runtime._runtime import Runtime
from sclated.runtime._spec import (
    LABEL_DAEMON,
    LABEL_ROLE,
    LABEL_RUN,
    LABEL_TENANT,
    ContainerInfo,
    ContainerStats,
    EngineFacts,
    ExecResult,
    SandboxSpec,
    check_name,
)

__all__ = ["DockerRuntime", "hardened_host_config"]

# Exit status of coreutils `timeout` when it had to kill the command.
_TIMEOUT_CODES = (124, 137)
_DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")


def _scope(daemon_id: str, tenant: str) -> str:
    # Two daemons (or two tenants) may use the same run name; resource names
    # that must be unique carry a short hash of both.
    return hashlib.sha256(f"{daemon_id}\0{tenant}".encode()).hexdigest()[:8]


def network_name(daemon_id: str, spec: SandboxSpec) -> str:
    return f"sclate-{spec.run}-{_scope(daemon_id, spec.tenant)}"


def volume_name(daemon_id: str, spec: SandboxSpec, name: str) -> str:
    return f"sclate-{spec.run}-{name}-{_scope(daemon_id, spec.tenant)}"


def hardened_host_config(spec: SandboxSpec, network: str) -> dict[str, Any]:
    """HostConfig every sandbox gets: no privileges, capabilities or engine access."""
    mounts: list[dict[str, Any]] = [
        {"Type": "bind", "Source": m.source, "Target": m.target, "ReadOnly": m.read_only} for m in spec.mounts
    ]
    config: dict[str, Any] = {
        "Privileged": False,
        "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges:true"],
        "Memory": spec.limits.memory_bytes,
        # Same as Memory: no swap, so a hog meets the OOM killer instead of the disk.
        "MemorySwap": spec.limits.memory_bytes,
        "NanoCpus": spec.limits.nano_cpus,
        "PidsLimit": spec.limits.pids,
        "NetworkMode": network,
        "Mounts": mounts,
        "IpcMode": "private",
        # docker-init as PID 1 reaps orphans (an agent's background jobs).
        "Init": True,
        "RestartPolicy": {"Name": "no"},
        "AutoRemove": False,
        "LogConfig": {"Type": "json-file", "Config": {"max-size": "10m", "max-file": "2"}},
    }
    if spec.limits.disk_bytes is not None:
        config["StorageOpt"] = {"size": str(spec.limits.disk_bytes)}
    return config


def _info(data: Mapping[str, Any]) -> ContainerInfo:
    """From either a list entry or an inspect result."""
    if "Config" in data:  # inspect
        labels = data["Config"].get("Labels") or {}
        state = data["State"]["Status"]
        name = str(data.get("Name", "")).lstrip("/")
        image = data["Config"].get("Image", "")
        if state not in ("running", "paused", "restarting", "created"):
            code = data["State"].get("ExitCode")
            return ContainerInfo(
                id=str(data["Id"]),
                name=name,
                image=str(image),
                state=str(state),
                labels=dict(labels),
                exit_code=int(code) if isinstance(code, int) else None,
                oom_killed=bool(data["State"].get("OOMKilled")),
            )
    else:
        labels = data.get("Labels") or {}
        state = data.get("State", "")
        names = data.get("Names") or [""]
        name = str(names[0]).lstrip("/")
        image = data.get("Image", "")
    return ContainerInfo(id=str(data["Id"]), name=name, image=str(image), state=str(state), labels=dict(labels))


class DockerRuntime(Runtime):
    """Sandboxes on a Docker engine. Build with :meth:`connect`."""

    def __init__(self, docker: aiodocker.Docker, daemon_id: str) -> None:
        self.docker = docker
        self.daemon_id = check_name(daemon_id, "daemon id")

    @classmethod
    async def connect(cls, daemon_id: str) -> DockerRuntime:
        """Connect to the local engine (DOCKER_HOST if set); RuntimeUnavailable if down."""
        check_name(daemon_id, "daemon id")
        return cls(await connect(), daemon_id)

    async def close(self) -> None:
        await self.docker.close()

    async def __aenter__(self) -> DockerRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _container(self, container_id: str) -> DockerContainer:
        return self.docker.containers.container(container_id)

    # ---------------------------------------------------------------- lifecycle

    def labels_for(self, spec: SandboxSpec) -> dict[str, str]:
        return {
            LABEL_DAEMON: self.daemon_id,
            LABEL_TENANT: spec.tenant,
            LABEL_RUN: spec.run,
            LABEL_ROLE: spec.role,
        }

    def host_config(self, spec: SandboxSpec, network: str) -> dict[str, Any]:
        """The HostConfig a sandbox is created with: always :func:`hardened_host_config`."""
        return hardened_host_config(spec, network)

    def _check_mounts(self, spec: SandboxSpec) -> None:
        for m in spec.mounts:
            real = os.path.realpath(m.source)
            if real == "/" or real in _DOCKER_SOCKETS or real.endswith("/docker.sock"):
                raise InvalidArgument(
                    f"mount {m.source} -> {m.target}: sandboxes never get the host root or "
                    "the Docker socket; mount a dedicated directory",
                    field="mounts",
                )

    async def create(self, spec: SandboxSpec) -> ContainerInfo:
        self._check_mounts(spec)
        labels = self.labels_for(spec)
        created: list[str] = []
        network = spec.network_mode
        try:
            if spec.network_mode == "run":
                network = await self._ensure_network(spec, labels)
            host_config = self.host_config(spec, network)
            for v in spec.volumes:
                name = volume_name(self.daemon_id, spec, v.name)
                if await self._ensure_volume(name, labels):
                    created.append(name)
                host_config["Mounts"].append(
                    {"Type": "volume", "Source": name, "Target": v.target, "ReadOnly": v.read_only}
                )
            config: dict[str, Any] = {
                "Image": spec.image,
                "Env": [f"{k}={v}" for k, v in spec.env.items()],
                "Labels": labels,
                "WorkingDir": spec.working_dir,
                "HostConfig": host_config,
                "AttachStdout": False,
                "AttachStderr": False,
                "Tty": False,
            }
            if spec.command is not None:
                config["Cmd"] = list(spec.command)
            if spec.user is not None:
                config["User"] = spec.user
            name = f"sclate-{spec.tenant}-{spec.run}-{spec.role}-{secrets.token_hex(3)}"
            try:
                container = await self.docker.containers.create(config, name=name)
            except DockerError as exc:
                if "storage-opt" in exc.message.lower():
                    raise FailedPrecondition(
                        f"limits.disk_bytes: this engine cannot bound a container's disk ({exc.message}); "
                        "put the engine's data root on xfs mounted with pquota, or leave disk_bytes unset",
                        reason="DISK_LIMIT_UNSUPPORTED",
                    ) from exc
                if exc.status == 404 and "image" in exc.message.lower():
                    raise NotFound(
                        f"image {spec.image!r} is not on this engine; build it with "
                        "`sclated images build` (sandbox images are local, never pulled)",
                        field="image",
                    ) from exc
                raise docker_error(exc, f"creating the sandbox for run {spec.run}") from exc
        except BaseException:
            # A failed create leaves nothing behind, not even the volumes it made.
            for vol in created:
                await self._delete(f"volumes/{vol}")
            raise
        return ContainerInfo(id=container.id, name=name, image=spec.image, state="created", labels=labels)

    async def _ensure_network(self, spec: SandboxSpec, labels: Mapping[str, str]) -> str:
        name = network_name(self.daemon_id, spec)
        try:
            await self.docker.networks.get(name)
            return name
        except DockerError as exc:
            if not is_not_found(exc):
                raise docker_error(exc, f"looking up network {name}") from exc
        try:
            await self.docker.networks.create(
                # Internal: containers of the run see each other, nothing else.
                {"Name": name, "Driver": "bridge", "Internal": True, "Labels": dict(labels),
                 "CheckDuplicate": True}
            )  # fmt: skip
        except DockerError as exc:
            if exc.status != 409:  # created concurrently: fine
                raise docker_error(exc, f"creating network {name}") from exc
        return name

    async def _ensure_volume(self, name: str, labels: Mapping[str, str]) -> bool:
        """True if the volume was created now (so a failed create can undo it)."""
        try:
            await self.docker._query_json(f"volumes/{name}")
            return False
        except DockerError as exc:
            if not is_not_found(exc):
                raise docker_error(exc, f"looking up volume {name}") from exc
        try:
            await self.docker._query_json("volumes/create", "POST", data={"Name": name, "Labels": dict(labels)})
        except DockerError as exc:
            raise docker_error(exc, f"creating volume {name}") from exc
        return True

    async def start(self, container_id: str) -> None:
        try:
            await self._container(container_id).start()
        except DockerError as exc:
            raise docker_error(exc, f"starting container {container_id[:12]}") from exc

    async def stop(self, container_id: str, *, grace_s: float = 10.0) -> None:
        try:
            await self._container(container_id).stop(t=max(0, round(grace_s)))
        except DockerError as exc:
            if exc.status == 304:  # already stopped
                return
            raise docker_error(exc, f"stopping container {container_id[:12]}") from exc

    async def pause(self, container_id: str) -> None:
        try:
            await self._container(container_id).pause()
        except DockerError as exc:
            if exc.status == 409:
                raise FailedPrecondition(f"cannot pause container {container_id[:12]}: {exc.message}") from exc
            raise docker_error(exc, f"pausing container {container_id[:12]}") from exc

    async def unpause(self, container_id: str) -> None:
        try:
            await self._container(container_id).unpause()
        except DockerError as exc:
            if exc.status == 409:
                raise FailedPrecondition(f"cannot unpause container {container_id[:12]}: {exc.message}") from exc
            raise docker_error(exc, f"unpausing container {container_id[:12]}") from exc

    async def remove(self, container_id: str) -> None:
        try:
            await self._container(container_id).delete(force=True, v=True)
        except DockerError as exc:
            if is_not_found(exc):
                return
            if exc.status == 409 and "in progress" in exc.message:
                return  # someone else is removing it
            raise docker_error(exc, f"removing container {container_id[:12]}") from exc

    async def inspect(self, container_id: str) -> ContainerInfo:
        try:
            data = await self._container(container_id).show()
        except DockerError as exc:
            raise docker_error(exc, f"container {container_id[:12]}") from exc
        return _info(data)

    async def inspect_raw(self, container_id: str) -> dict[str, Any]:
        try:
            return dict(await self._container(container_id).show())
        except DockerError as exc:
            raise docker_error(exc, f"container {container_id[:12]}") from exc

    # -------------------------------------------------------------------- exec

    async def exec_stream(
        self,
        container_id: str,
        cmd: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
    ) -> ExecStream:
        """Start a process with stdin/stdout attached, for line-by-line conversation."""
        try:
            return await open_exec_stream(self.docker, container_id, cmd, env=env, workdir=workdir, user=user)
        except DockerError as exc:
            raise docker_error(exc, f"container {container_id[:12]}") from exc

    async def exec(
        self,
        container_id: str,
        cmd: Sequence[str],
        *,
        user: str | None = None,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> ExecResult:
        if not cmd:
            raise InvalidArgument("exec: empty command", field="cmd")
        argv = list(cmd)
        if timeout_s is not None:
            if timeout_s <= 0:
                raise InvalidArgument("exec: timeout_s must be > 0", field="timeout_s")
            # The engine has no "kill this exec" call, so the deadline is
            # enforced inside by coreutils timeout (TERM, then KILL 2 s later);
            # the host-side deadline below is only a backstop.
            argv = ["timeout", "-k", "2", f"{timeout_s:.3f}", *argv]
        start = time.monotonic()
        try:
            execution = await self._container(container_id).exec(
                argv,
                stdout=True,
                stderr=True,
                user=user or "",
                environment=dict(env) if env else None,
                workdir=workdir,
            )
        except DockerError as exc:
            if exc.status == 409:
                raise FailedPrecondition(
                    f"exec in container {container_id[:12]}: {exc.message} (start or unpause the sandbox first)"
                ) from exc
            raise docker_error(exc, f"exec in container {container_id[:12]}") from exc
        out: list[bytes] = []
        err: list[bytes] = []
        backstop_hit = False
        try:
            async with asyncio.timeout(None if timeout_s is None else timeout_s + 10):
                async with execution.start(detach=False) as stream:
                    while True:
                        msg = await stream.read_out()
                        if msg is None:
                            break
                        (out if msg.stream == 1 else err).append(msg.data)
        except TimeoutError:
            backstop_hit = True
        try:
            details = await execution.inspect()
        except DockerError as exc:
            raise docker_error(exc, f"exec in container {container_id[:12]}") from exc
        code = details.get("ExitCode")
        seconds = time.monotonic() - start
        timed_out = backstop_hit or (timeout_s is not None and code in _TIMEOUT_CODES and seconds >= timeout_s)
        return ExecResult(
            exit_code=-1 if code is None else int(code),
            stdout=b"".join(out),
            stderr=b"".join(err),
            timed_out=timed_out,
            seconds=seconds,
        )

    # ---------------------------------------------------------- images, archives

    async def commit(self, container_id: str, repo: str, tag: str) -> str:
        try:
            # pause=True is a no-op for a container the caller already paused and
            # keeps the commit consistent for one that is still running.
            result = await self._container(container_id).commit(
                repository=repo, tag=tag, pause=True, message="sclate snapshot"
            )
        except DockerError as exc:
            raise docker_error(exc, f"committing container {container_id[:12]}") from exc
        return str(result["Id"])

    async def get_archive(self, container_id: str, path: str, dest: Path) -> int:
        size = 0
        fh = await asyncio.to_thread(open, dest, "wb")
        try:
            async with raw_query(
                self.docker, f"containers/{container_id}/archive", "GET", params={"path": path}
            ) as response:
                async for chunk in response.content.iter_chunked(1 << 20):
                    await asyncio.to_thread(fh.write, chunk)
                    size += len(chunk)
        except DockerError as exc:
            raise docker_error(exc, f"reading {path} from container {container_id[:12]}") from exc
        finally:
            await asyncio.to_thread(fh.close)
        return size

    async def put_archive(self, container_id: str, path: str, src: Path) -> None:
        try:
            async with raw_query(
                self.docker,
                f"containers/{container_id}/archive",
                "PUT",
                params={"path": path},
                data=file_chunks(src),
                headers={"Content-Type": "application/x-tar"},
            ) as response:
                await response.read()
        except DockerError as exc:
            raise docker_error(exc, f"writing {path} into container {container_id[:12]}") from exc

    async def image_exists(self, ref: str) -> bool:
        try:
            await self.docker.images.inspect(ref)
        except DockerError as exc:
            if is_not_found(exc):
                return False
            raise docker_error(exc, f"image {ref}") from exc
        return True

    async def image_label(self, ref: str, key: str) -> str | None:
        try:
            info = await self.docker.images.inspect(ref)
        except DockerError as exc:
            if is_not_found(exc):
                return None
            raise docker_error(exc, f"image {ref}") from exc
        labels = (info.get("Config") or {}).get("Labels") or {}
        value = labels.get(key)
        return None if value is None else str(value)

    async def image_tags(self, pattern: str) -> list[str]:
        filters = json.dumps({"reference": [pattern]})
        try:
            images = await self.docker._query_json("images/json", params={"filters": filters})
        except DockerError as exc:
            raise docker_error(exc, f"listing images {pattern}") from exc
        prefix = pattern.split("*", 1)[0]
        return sorted(tag for image in images or [] for tag in image.get("RepoTags") or [] if tag.startswith(prefix))

    async def remove_image(self, ref: str) -> None:
        try:
            # Not forced: forcing an image a container still uses only untags it
            # and leaves a nameless image behind that nothing will clean up.
            await self.docker.images.delete(ref, force=False)
        except DockerError as exc:
            if is_not_found(exc):
                return
            if exc.status == 409:
                raise FailedPrecondition(
                    f"image {ref} is still used: {exc.message}; remove those containers first"
                ) from exc
            raise docker_error(exc, f"removing image {ref}") from exc

    # ------------------------------------------------------------ observation

    async def logs(self, container_id: str, *, tail: int | None = None) -> str:
        try:
            lines = await self._container(container_id).log(
                stdout=True, stderr=True, tail="all" if tail is None else str(tail)
            )
        except DockerError as exc:
            raise docker_error(exc, f"logs of container {container_id[:12]}") from exc
        return "".join(lines)

    async def stats(self, container_id: str) -> ContainerStats:
        c = self._container(container_id)
        try:
            raw = await c.stats(stream=False)
            state = (await c.show())["State"]
        except DockerError as exc:
            raise docker_error(exc, f"stats of container {container_id[:12]}") from exc
        data: Mapping[str, Any] = raw[0] if isinstance(raw, list) and raw else {}
        mem = data.get("memory_stats") or {}
        cpu = (data.get("cpu_stats") or {}).get("cpu_usage") or {}
        pids = data.get("pids_stats") or {}
        return ContainerStats(
            memory_bytes=int(mem.get("usage") or 0),
            memory_limit_bytes=int(mem.get("limit") or 0),
            cpu_total_ns=int(cpu.get("total_usage") or 0),
            pids=int(pids.get("current") or 0),
            oom_killed=bool(state.get("OOMKilled")),
        )

    async def writable_layer_bytes(self, container_id: str) -> int:
        # The engine's own walk of the layer (inspect with size: SizeRw), the measure
        # `docker ps --size` shows; measured on overlay2: ~1 ms for a few files, ~0.2 s
        # for 20k, ~0.8 s for 100k (see sclated/sandbox/_disk_watch.py for how often).
        try:
            data = await self.docker._query_json(f"containers/{container_id}/json", params={"size": "1"})
        except DockerError as exc:
            raise docker_error(exc, f"the writable layer of container {container_id[:12]}") from exc
        size = data.get("SizeRw")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise FailedPrecondition(
                f"the engine did not say how much container {container_id[:12]} wrote (SizeRw {size!r}); "
                f"its storage driver {data.get('Driver')!r} may not report it",
                reason="DISK_UNMEASURED",
            )
        return size

    async def addresses(self, container_id: str) -> tuple[str, ...]:
        try:
            data = await self._container(container_id).show()
        except DockerError as exc:
            raise docker_error(exc, f"container {container_id[:12]}") from exc
        networks = (data.get("NetworkSettings") or {}).get("Networks") or {}
        found = [str(n.get("IPAddress")) for n in networks.values() if n and n.get("IPAddress")]
        found += [str(n.get("GlobalIPv6Address")) for n in networks.values() if n and n.get("GlobalIPv6Address")]
        return tuple(found)

    async def engine_facts(self) -> EngineFacts:
        try:
            info = await self.docker.system.info()
            bridge = await self.docker._query_json("networks/bridge")
        except DockerError as exc:
            raise docker_error(exc, "engine information") from exc
        status = {str(k): str(v) for k, v in info.get("DriverStatus") or []}
        ipam = (bridge.get("IPAM") or {}).get("Config") or []
        return EngineFacts(
            storage_driver=str(info.get("Driver") or ""),
            backing_filesystem=status.get("Backing Filesystem", ""),
            root_dir=str(info.get("DockerRootDir") or ""),
            gateways=tuple(str(c["Gateway"]) for c in ipam if c.get("Gateway")),
        )

    async def list_containers(self, labels: Mapping[str, str]) -> list[ContainerInfo]:
        filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
        try:
            raw = await self.docker._query_json("containers/json", params={"all": "1", "filters": json.dumps(filters)})
        except DockerError as exc:
            raise docker_error(exc, "listing containers") from exc
        return [_info(item) for item in raw]

    # ------------------------------------------------------- adoption, reaping

    async def labelled(self, daemon_id: str) -> dict[str, list[str]]:
        """The names of every container, network and volume labelled as ``daemon_id``'s
        (what a stopped daemon left on the engine)."""
        nets, vols = await self._networks_volumes(daemon_id)
        return {
            "containers": [c.name for c in await self.list_containers({LABEL_DAEMON: daemon_id})],
            "networks": [str(n.get("Name", n.get("Id", ""))) for n in nets],
            "volumes": [str(v.get("Name", "")) for v in vols],
        }

    async def _networks_volumes(self, daemon_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The engine's descriptions of the networks and volumes labelled as ``daemon_id``'s."""
        label = json.dumps({"label": [f"{LABEL_DAEMON}={daemon_id}"]})
        try:
            nets = await self.docker._query_json("networks", params={"filters": label})
            vols = await self.docker._query_json("volumes", params={"filters": label})
        except DockerError as exc:
            raise docker_error(exc, "listing sclate networks and volumes") from exc
        return list(nets or []), list((vols or {}).get("Volumes") or [])

    async def adopt(self, daemon_id: str, runs: Set[str]) -> list[ContainerInfo]:
        found = await self.list_containers({LABEL_DAEMON: daemon_id})
        return [c for c in found if c.run in runs and c.live]

    async def reap(self, daemon_id: str, keep: Set[str]) -> list[ContainerInfo]:
        found = await self.list_containers({LABEL_DAEMON: daemon_id})
        doomed = [c for c in found if c.run not in keep]
        await asyncio.gather(*(self.remove(c.id) for c in doomed))
        await self._reap_networks_volumes(daemon_id, keep)
        return doomed

    async def _reap_networks_volumes(self, daemon_id: str, keep: Set[str]) -> None:
        nets, vols = await self._networks_volumes(daemon_id)
        for net in nets:
            if (net.get("Labels") or {}).get(LABEL_RUN) not in keep:
                await self._delete(f"networks/{net['Id']}")
        for vol in vols:
            if (vol.get("Labels") or {}).get(LABEL_RUN) not in keep:
                await self._delete(f"volumes/{vol['Name']}")

    async def remove_run_resources(self, spec: SandboxSpec) -> None:
        # In use (another container of the run) -> the engine refuses with 409: keep it.
        if spec.network_mode == "run":
            await self._delete(f"networks/{network_name(self.daemon_id, spec)}")
        for v in spec.volumes:
            await self._delete(f"volumes/{volume_name(self.daemon_id, spec, v.name)}")

    async def _delete(self, path: str) -> bool:
        """Best-effort removal of a network or volume: gone, in use or racing is fine."""
        try:
            async with self.docker._query(path, "DELETE"):
                return True
        except DockerError:
            return False
