"""What a sandbox is made of, and what the runtime reports back."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from sclated.errors import InvalidArgument

__all__ = [
    "LABEL_DAEMON",
    "LABEL_ROLE",
    "LABEL_RUN",
    "LABEL_TENANT",
    "ContainerInfo",
    "ContainerStats",
    "EngineFacts",
    "ExecResult",
    "Limits",
    "Mount",
    "SandboxSpec",
    "VolumeMount",
]

LABEL_DAEMON = "sclate.daemon"
LABEL_TENANT = "sclate.tenant"
LABEL_RUN = "sclate.run"
LABEL_ROLE = "sclate.role"

# Names end up in container, network and volume names and in labels.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_NETWORK_MODES = ("none", "bridge", "run")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

GIB = 1 << 30


def check_name(value: str, what: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise InvalidArgument(
            f"{what} {value!r} is not a valid name: use 1-63 letters, digits, '_', '.' "
            "or '-', starting with a letter or digit",
            field=what,
        )
    return value


@dataclass(frozen=True)
class Mount:
    """A host directory bind-mounted into the sandbox."""

    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class VolumeMount:
    """A named volume private to the run (``sclate-<run>-<name>``), labelled and reaped."""

    name: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 2 * GIB
    nano_cpus: int = 1_000_000_000
    pids: int = 512
    disk_bytes: int | None = None
    """The container's writable layer, as the engine's per-container size (StorageOpt
    ``size``); None: unbounded. Overlay2 can only do it on xfs mounted with ``pquota``."""

    def __post_init__(self) -> None:
        if self.memory_bytes < 6 * (1 << 20):
            raise InvalidArgument(
                f"limits.memory_bytes={self.memory_bytes} is below Docker's minimum of 6 MiB",
                field="limits.memory_bytes",
            )
        if self.nano_cpus <= 0:
            raise InvalidArgument("limits.nano_cpus must be > 0 (1_000_000_000 = one CPU)", field="limits.nano_cpus")
        if self.pids <= 0:
            raise InvalidArgument("limits.pids must be > 0", field="limits.pids")
        if self.disk_bytes is not None and self.disk_bytes < 16 * (1 << 20):
            raise InvalidArgument(
                f"limits.disk_bytes={self.disk_bytes} is below 16 MiB: a sandbox could not even start",
                field="limits.disk_bytes",
            )


@dataclass(frozen=True)
class SandboxSpec:
    """One sandbox container. Not hashable (env is a mapping)."""

    image: str
    run: str
    tenant: str
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    volumes: tuple[VolumeMount, ...] = ()
    limits: Limits = field(default_factory=Limits)
    # "none" (default; the model path is a mounted socket), "bridge", or "run":
    # a per-run internal network, created on demand and reaped with the run.
    network_mode: str = "none"
    working_dir: str = "/workspace"
    command: tuple[str, ...] | None = None  # None: the image's CMD
    user: str | None = None  # None: the image's USER
    role: str = "agent"  # several containers of one run are told apart by role

    def __post_init__(self) -> None:
        if not isinstance(self.image, str) or not self.image.strip():
            raise InvalidArgument("spec.image is empty: name an image", field="image")
        check_name(self.run, "run")
        check_name(self.tenant, "tenant")
        check_name(self.role, "role")
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        for key, value in self.env.items():
            if not _ENV_KEY.match(key) or not isinstance(value, str) or "\0" in value:
                raise InvalidArgument(
                    f"env {key!r}: names are [A-Za-z_][A-Za-z0-9_]* and values strings",
                    field="env",
                )
        targets: set[str] = set()
        all_mounts: list[Mount | VolumeMount] = [*self.mounts, *self.volumes]
        for m in all_mounts:
            if not m.target.startswith("/") or m.target == "/":
                raise InvalidArgument(
                    f"mount target {m.target!r} must be an absolute path other than /",
                    field="mounts",
                )
            if m.target in targets:
                raise InvalidArgument(f"two mounts at {m.target}", field="mounts")
            targets.add(m.target)
        for m in self.mounts:
            if not m.source.startswith("/"):
                raise InvalidArgument(f"mount source {m.source!r} must be an absolute host path", field="mounts")
        for v in self.volumes:
            check_name(v.name, "volume name")
        if self.network_mode not in _NETWORK_MODES:
            raise InvalidArgument(
                f"network_mode {self.network_mode!r}: use one of {', '.join(_NETWORK_MODES)}",
                field="network_mode",
            )
        if not self.working_dir.startswith("/"):
            raise InvalidArgument("working_dir must be absolute", field="working_dir")
        if self.command is not None:
            object.__setattr__(self, "command", tuple(self.command))
            if not self.command:
                raise InvalidArgument("command is empty: give None for the image's default", field="command")


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def text(self) -> str:
        return self.stdout.decode(errors="replace")


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    name: str
    image: str
    state: str  # created, running, paused, exited, dead, ...
    labels: Mapping[str, str]
    exit_code: int | None = None
    """How its main process ended (an inspect of a container that is not running; else None)."""
    oom_killed: bool = False

    @property
    def run(self) -> str:
        return self.labels.get(LABEL_RUN, "")

    @property
    def tenant(self) -> str:
        return self.labels.get(LABEL_TENANT, "")

    @property
    def daemon(self) -> str:
        return self.labels.get(LABEL_DAEMON, "")

    @property
    def live(self) -> bool:
        return self.state in ("running", "paused", "restarting")


@dataclass(frozen=True)
class ContainerStats:
    memory_bytes: int
    memory_limit_bytes: int
    cpu_total_ns: int
    pids: int
    oom_killed: bool = False


@dataclass(frozen=True)
class EngineFacts:
    """What the container engine says about where sandboxes live (for the isolation checks)."""

    storage_driver: str
    backing_filesystem: str
    root_dir: str
    """Where the engine keeps containers' writable layers (on the engine's host)."""
    gateways: tuple[str, ...]
    """The host's addresses on the engine's default bridge network (docker0)."""
