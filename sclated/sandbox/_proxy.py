"""The capture proxy inside every sandbox: one mitmdump, one listener per role.

The harness's model calls reach the proxy on loopback; the listener a call
arrives on is its role (agent, memory, aux). The proxy records the call and
forwards it to the sandbox's model socket (``/run/sclate/model.sock``, exposed
on loopback TCP by the entrypoint's forwarder), which the daemon's model bridge
pipes to the run's endpoint.
"""

from __future__ import annotations

from adapters import ProxyEndpoints

__all__ = ["PROXY_LOG", "ROLE_PORTS", "SPOOL_DIR", "endpoints_for", "mitmdump_command"]

ROLE_PORTS = {"agent": 4001, "memory": 4002, "aux": 4003}
FORWARDER_PORT = 18080
"""The entrypoint's loopback forwarder to the model socket (images/sandbox/sclate-init)."""
SPOOL_DIR = "/var/spool/sclate"
"""Where the addon keeps records until the daemon acknowledges them."""
PROXY_LOG = "/var/log/sclate-proxy.log"
ADDON = "/opt/sclate/proxy/capture.py"


def mitmdump_command() -> str:
    """The shell command that starts the proxy in the background (the container's main command)."""
    modes = " ".join(
        f"--mode reverse:http://127.0.0.1:{FORWARDER_PORT}@127.0.0.1:{port}" for port in ROLE_PORTS.values()
    )
    roles = ",".join(f"{port}={role}" for role, port in ROLE_PORTS.items())
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
        api_key=f"sk-sclate-{run_id}-{secret}",
        model=model or "default",
        openai_prefix=path_prefix.rstrip("/") or "/v1",
    )
