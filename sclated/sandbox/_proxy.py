"""The capture proxy inside every sandbox: one mitmdump, one listener per role.

The harness's model calls reach the proxy on loopback; the listener a call
arrives on is its role (agent, memory, aux). The proxy records the call and
forwards it to the sandbox's model socket (``/run/sclate/model.sock``, exposed
on loopback TCP by the entrypoint's forwarder), which the daemon's model bridge
pipes to the run's endpoint.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from adapters import ProxyEndpoints
from sclated.errors import FailedPrecondition
from sclated.runtime import SANDBOX_DIR

__all__ = [
    "PROXY_LOG",
    "ROLE_PORTS",
    "SPOOL_DIR",
    "UPSTREAM_KEY_FILE",
    "endpoints_for",
    "mitmdump_command",
    "upstream_env",
]

ROLE_PORTS = {"agent": 4001, "memory": 4002, "aux": 4003}
MEMORY_SYSTEM_PORT = 4004
"""The memory role's second listener: the run's memory system (Mem0, Hindsight) is
pointed here, the harness's own memory work at ``ROLE_PORTS["memory"]``, so the two
are told apart (components ``memory:<system>`` and ``memory:native``)."""
FORWARDER_PORT = 18080
"""The entrypoint's loopback forwarder to the model socket (images/sandbox/sclate-init)."""
SPOOL_DIR = "/var/spool/sclate"
"""Where the addon keeps records until the daemon acknowledges them."""
PROXY_LOG = "/var/log/sclate-proxy.log"
UPSTREAM_KEY_FILE = "upstream.key"
"""The endpoint's API key, in the run's read-only mount (/run/sclate), for the proxy to put on."""
ADDON = "/opt/sclate/proxy/capture.py"


def mitmdump_command() -> str:
    """The shell command that starts the proxy in the background (the container's main command)."""
    ports = {**{port: role for role, port in ROLE_PORTS.items()}, MEMORY_SYSTEM_PORT: "memory:system"}
    modes = " ".join(f"--mode reverse:http://127.0.0.1:{FORWARDER_PORT}@127.0.0.1:{port}" for port in ports)
    roles = ",".join(f"{port}={role}" for port, role in ports.items())
    return (
        f"mitmdump -q -s {ADDON} {modes} --set sclate_roles={roles} "
        "--set confdir=/tmp/mitmproxy --set connection_strategy=lazy"
    )


def endpoints_for(run_id: str, secret: str, model: str, path_prefix: str = "") -> ProxyEndpoints:
    """The base URLs a harness is pointed at, and the run's secret API key.

    ``path_prefix``: the path of the run's model endpoint, if it has one, kept
    as the OpenAI prefix so a client reaches the same route through the proxy.
    """
    urls = {role: f"http://127.0.0.1:{port}" for role, port in ROLE_PORTS.items()}
    return ProxyEndpoints(
        agent=urls["agent"],
        memory=urls["memory"],
        aux=urls["aux"],
        memory_system=f"http://127.0.0.1:{MEMORY_SYSTEM_PORT}",
        api_key=f"sk-sclate-{run_id}-{secret}",
        model=model or "default",
        openai_prefix=path_prefix.rstrip("/") or "/v1",
    )


SEED_APIS_EMBEDDED = ("openai_chat", "openai_completions", "openai_responses", "anthropic_messages")
"""The embedded model reads ``seed`` on every API it serves."""
SEED_APIS_EXTERNAL = ("openai_chat", "openai_completions")
"""What OpenAI-compatible servers (vLLM, SGLang, OpenAI) take a ``seed`` on; Anthropic's API refuses one."""


def upstream_env(
    root: Path,
    key_env: str,
    skip_token_ids: bool,
    environ: Mapping[str, str],
    sampling_seed: int | None = None,
    embedded: bool = True,
) -> dict[str, str]:
    """The capture proxy's view of a run's endpoint, as container environment.

    The key (from the daemon's variable ``key_env``) goes into a file in the run's
    read-only mount (``root``, seen at /run/sclate), never into the container's
    environment, which a snapshot's image would keep; the proxy puts it on each
    call. Written at every sandbox start, so a restored run takes the key the
    daemon has now. Blocking file I/O: call it off the event loop.
    """
    env: dict[str, str] = {}
    if skip_token_ids:
        env["SCLATE_REQUEST_TOKENS"] = "0"
    if sampling_seed is not None:
        env["SCLATE_SAMPLING_SEED"] = str(sampling_seed)
        env["SCLATE_SEED_APIS"] = ",".join(SEED_APIS_EMBEDDED if embedded else SEED_APIS_EXTERNAL)
    key_file = root / UPSTREAM_KEY_FILE
    if not key_env:
        key_file.unlink(missing_ok=True)
        return env
    key = environ.get(key_env, "").strip()
    if not key:
        raise FailedPrecondition(
            f"run.agent.model.api_key_env names {key_env}, which is not set in the daemon's environment "
            "(set it where sclated starts, e.g. the systemd unit's Environment=)",
            reason="MODEL_KEY_MISSING",
        )
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    env["SCLATE_UPSTREAM_API_KEY_FILE"] = f"{SANDBOX_DIR}/{UPSTREAM_KEY_FILE}"
    return env
