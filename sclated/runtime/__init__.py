"""The sandbox runtime: containers (aiodocker only), images, simulated time, cron.

See docs/architecture.md ("Sandbox control socket") for the contract with the
rest of the daemon. Nothing here knows gRPC; nothing here blocks the loop.
"""

from sclated.runtime._archives import untar_dir
from sclated.runtime._bridge import BridgeStats, ModelBridge
from sclated.runtime._cron import CronEntry, CronExpr, CronFire, CronSource, CronTable, next_fire
from sclated.runtime._docker import DockerRuntime, hardened_host_config
from sclated.runtime._doctor import Check, run_doctor
from sclated.runtime._exec_stream import ExecStream
from sclated.runtime._images import (
    BuiltImage,
    Debootstrap,
    HostFile,
    ImageRecipe,
    NodePackages,
    build_all,
    build_derived,
    build_image,
    build_images_cli,
    image_ref,
    image_refs,
    libfaketime_path,
    recipe_tag,
    recipes,
    register,
)
from sclated.runtime._runtime import Runtime
from sclated.runtime._sandbox import Sandbox, SandboxManager, SandboxPaths, TimeProbe
from sclated.runtime._simtime import FAKETIME_ENV, SANDBOX_DIR, format_frozen, format_offset, freeze_time, publish_time
from sclated.runtime._snapshot import SnapshotInfo, restore, snapshot
from sclated.runtime._spec import (
    LABEL_DAEMON,
    LABEL_ROLE,
    LABEL_RUN,
    LABEL_TENANT,
    ContainerInfo,
    ContainerStats,
    EngineFacts,
    ExecResult,
    Limits,
    Mount,
    SandboxSpec,
    VolumeMount,
)

__all__ = [
    "FAKETIME_ENV",
    "LABEL_DAEMON",
    "LABEL_ROLE",
    "LABEL_RUN",
    "LABEL_TENANT",
    "SANDBOX_DIR",
    "BridgeStats",
    "BuiltImage",
    "Check",
    "ContainerInfo",
    "ContainerStats",
    "CronEntry",
    "CronExpr",
    "CronFire",
    "CronSource",
    "CronTable",
    "Debootstrap",
    "DockerRuntime",
    "EngineFacts",
    "ExecResult",
    "ExecStream",
    "HostFile",
    "ImageRecipe",
    "Limits",
    "ModelBridge",
    "Mount",
    "NodePackages",
    "Runtime",
    "Sandbox",
    "SandboxManager",
    "SandboxPaths",
    "SandboxSpec",
    "SnapshotInfo",
    "TimeProbe",
    "VolumeMount",
    "build_all",
    "build_derived",
    "build_image",
    "build_images_cli",
    "format_frozen",
    "format_offset",
    "freeze_time",
    "hardened_host_config",
    "image_ref",
    "image_refs",
    "libfaketime_path",
    "next_fire",
    "publish_time",
    "recipe_tag",
    "recipes",
    "register",
    "restore",
    "run_doctor",
    "snapshot",
    "untar_dir",
]
