"""A Ray cluster of several nodes on this one machine, for tests and ``bench cluster``.

Each node (the head and every other) is its own ``ray start --block`` process in a
session of its own, so that one node can be killed whole (its raylet and its
workers: the process group) as a machine failure would, and so that stopping the
cluster touches only these processes (never ``ray stop``, which would stop every
Ray process of the machine). Every node declares ``sandbox`` slots; all share the
machine's one Docker engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from sclated.cluster._node import node_dirs
from sclated.errors import Unavailable

__all__ = ["LocalCluster", "LocalNode"]

_OBJECT_STORE_BYTES = 100_000_000
"""Small: the runs pass records, not data; the machine has little memory to spare."""
_JOIN_TIMEOUT_S = 90.0
_STOP_GRACE_S = 5.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(slots=True)
class LocalNode:
    index: int
    proc: subprocess.Popen[bytes]
    node_id: str = ""
    log_path: Path | None = None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass(slots=True)
class LocalCluster:
    """``start()``, then ``address`` for ``--ray-address``; ``kill(node)``; ``stop()``."""

    nodes: int = 2
    """Nodes besides the head."""
    sandbox_slots: int = 2
    """``sandbox`` slots each node (the head too) declares."""
    head_sandbox_slots: int = 0
    """The head's own slots (0: the head only coordinates, as on a real cluster)."""
    cpus_per_node: int = 1
    address: str = ""
    members: list[LocalNode] = field(default_factory=list)
    _root: Path | None = None
    _ray_bin: str = field(default_factory=lambda: str(Path(sys.executable).with_name("ray")))

    async def start(self) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="sclray-", dir="/tmp"))
        port = _free_port()
        self.address = f"127.0.0.1:{port}"
        head = self._spawn(
            0, ["--head", "--port", str(port), "--temp-dir", str(self._root / "ray"), "--include-dashboard", "false"]
        )
        self.members.append(head)
        try:
            await self._joined(head)
            for i in range(1, self.nodes + 1):
                node = self._spawn(i, ["--address", self.address])
                self.members.append(node)
                await self._joined(node)
        except BaseException:
            await self.stop()
            raise

    def _spawn(self, index: int, args: list[str]) -> LocalNode:
        assert self._root is not None
        slots = self.head_sandbox_slots if index == 0 else self.sandbox_slots
        ports = [
            "--node-manager-port", str(_free_port()),
            "--object-manager-port", str(_free_port()),
            "--metrics-export-port", str(_free_port()),
            "--dashboard-agent-listen-port", str(_free_port()),
            "--dashboard-agent-grpc-port", str(_free_port()),
            "--runtime-env-agent-port", str(_free_port()),
        ]  # fmt: skip
        log_path = self._root / f"node-{index}.log"
        cmd = [
            self._ray_bin, "start", "--block", *args, *ports,
            "--num-cpus", str(self.cpus_per_node),
            "--resources", f'{{"sandbox": {slots}}}',
            "--object-store-memory", str(_OBJECT_STORE_BYTES),
            "--disable-usage-stats",
        ]  # fmt: skip
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env
            )
        return LocalNode(index, proc, log_path=log_path)

    async def _joined(self, node: LocalNode) -> None:
        """Wait until ``node`` is in the cluster; learn its Ray node id."""
        known = {m.node_id for m in self.members if m.node_id}
        deadline = time.monotonic() + _JOIN_TIMEOUT_S
        while time.monotonic() < deadline:
            if not node.alive:
                raise Unavailable(f"ray node {node.index} exited: see {node.log_path}", reason="NO_CLUSTER")
            ids = await asyncio.to_thread(self._alive_node_ids)
            new = [n for n in ids if n not in known]
            if new:
                node.node_id = new[0]
                return
            await asyncio.sleep(0.5)
        raise Unavailable(f"ray node {node.index} did not join in {_JOIN_TIMEOUT_S:.0f} s", reason="NO_CLUSTER")

    def _alive_node_ids(self) -> list[str]:
        try:
            return alive_node_ids(self.address)
        except Exception:
            return []  # the head is still starting

    def kill(self, node: LocalNode) -> None:
        """The node dies at once: its raylet and workers (the process group) get SIGKILL."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.proc.pid, signal.SIGKILL)
        node.proc.wait(30)

    async def stop(self) -> None:
        """Stop every node of this cluster (only its own processes) and remove its files.

        SIGTERM first; a node still there after a few seconds (the head drains for up to
        30 s) gets SIGKILL, its whole group: a test cluster holds nothing to drain."""
        for node in reversed(self.members):
            if node.alive:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGTERM)

        async def end(node: LocalNode) -> None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(node.proc.wait, _STOP_GRACE_S)
            # Workers that outlived their raylet are in its group too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.proc.pid, signal.SIGKILL)
            await asyncio.to_thread(node.proc.wait, 30)

        await asyncio.gather(*(end(n) for n in self.members))
        if self._root is not None:
            await asyncio.to_thread(shutil.rmtree, self._root, True)
        # The nodes' own directories (their model's log, the run dirs of a killed node) go with them.
        for node in self.members:
            if node.node_id:
                for d in node_dirs(node.node_id):
                    await asyncio.to_thread(shutil.rmtree, d, True)


def alive_node_ids(address: str) -> list[str]:
    """The ids of the cluster's live nodes, asked with a short-lived driver (blocking)."""
    script = (
        f"import ray,json;ray.init(address={address!r},log_to_driver=False,logging_level='ERROR');"
        "print(json.dumps([n['NodeID'] for n in ray.nodes() if n['Alive']]))"
    )
    out = (
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
        .stdout.strip()
        .splitlines()
    )
    return [str(x) for x in json.loads(out[-1])] if out else []
