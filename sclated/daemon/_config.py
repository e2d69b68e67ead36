"""Daemon configuration: a TOML file, every key also a flag (flags win)."""

from __future__ import annotations

import argparse
import errno
import ipaddress
import os
import re
import socket
import ssl
import stat
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

from sclated.errors import ConfigError, InvalidArgument
from sclated.runs import parse_duration, validate_tenant

__all__ = [
    "DaemonConfig",
    "build_parser",
    "check_data_roots",
    "check_executor",
    "check_startup",
    "listen_address_problem",
    "load_config",
    "tcp_listen_problem",
]

DEFAULT_PORT = 7431
EXECUTORS = ("local", "ray")
RAY_PLACEMENTS = ("spread", "pack")


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    state_dir: Path
    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    """TCP "HOST:PORT" (port 0 picks one); empty: no TCP listener."""
    http_listen: str = ""
    """TCP "HOST:PORT" of the HTTP listener (the run viewer, /metrics, /healthz; port 0
    picks one); empty: none."""
    metrics_readers: tuple[str, ...] = ()
    """With a tokens file, the tenants whose tokens may read ``/metrics`` (it names every
    tenant and counts their runs, so it is an operator's read); without one, the single
    ``local`` tenant may. Empty with a tokens file: nobody."""
    unix_socket: str = ""
    """Empty: sclated.sock in $RUNTIME_DIRECTORY (systemd) or the state directory; "-": none."""
    tokens_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    max_running: int = 64
    tenant_max_running: int = 64
    tenant_max_active: int = 10_000
    drain_grace_s: float = 30.0
    ready_file: Path | None = None
    log_level: str = "info"
    max_message_bytes: int = 4 * 1024 * 1024
    reports: bool = True
    """Write each finished run's report and timeline plot under state_dir/runs."""
    model_n_ctx: int = 8192
    """The embedded model's context in tokens; past the model's trained context
    its RoPE is stretched (YaRN). Harnesses such as OpenClaw and Hermes send
    prompts of 8-14k tokens; the KV cache costs ~23 kB per token for SmolLM2-135M."""
    data_roots: tuple[Path, ...] = ()
    """The directories whose files runs may name (``data_dir``, options that are paths);
    empty: ``<state_dir>/data``. The benchmarks' built-in data is always readable, the
    state directory never (but its ``data``). See sclated.runs.DataRoots."""
    tenant_data_roots: Mapping[str, tuple[Path, ...]] = dataclass_field(default_factory=dict)
    """A tenant's own roots: they replace ``data_roots`` for it, and no other tenant may
    read inside them."""
    retention: str = ""
    """How long after a run ended (SUCCEEDED, FAILED, CANCELLED; wall time) its history
    (events, journal, captured calls) is expired: ``7d``, ``12h``, ``1d12h``; empty or
    ``off`` keeps it forever. Its state, results and snapshots stay."""
    executor: str = "local"
    """Where admitted runs' workers execute: ``local`` (this process) or ``ray`` (actors
    on the Ray cluster at ``ray_address``; needs ``pip install sclate[ray]``)."""
    ray_address: str = ""
    """The Ray cluster for ``executor = "ray"``: its head's HOST:PORT, or ``auto``."""
    ray_placement: str = "spread"
    """How runs go over the cluster's nodes: ``spread`` (as many nodes as possible) or
    ``pack`` (fill a node first)."""
    cluster_snapshot_dir: Path | None = None
    """A directory every cluster node reads and writes, where snapshots of runs that
    may move between nodes live (executor ``ray``)."""

    @property
    def retention_s(self) -> float:
        return parse_duration(self.retention)

    @property
    def effective_data_roots(self) -> tuple[Path, ...]:
        """``data_roots``, or the default ``<state_dir>/data``."""
        return self.data_roots or (self.state_dir / "data",)

    @property
    def unix_socket_path(self) -> Path | None:
        if self.unix_socket == "-":
            return None
        if self.unix_socket:
            return Path(self.unix_socket)
        runtime = os.environ.get("RUNTIME_DIRECTORY")
        return Path(runtime.split(":")[0]) / "sclated.sock" if runtime else self.state_dir / "sclated.sock"

    def validate(self) -> DaemonConfig:
        """Raises :class:`ConfigError` naming the key (``field``) that is wrong."""
        for key in ("listen", "http_listen"):
            address = getattr(self, key)
            if address:
                problem = listen_address_problem(address, authenticated=self.tokens_file is not None)
                if problem is not None:
                    raise ConfigError(f"{key} {address!r} {problem}", field=key)
        for tenant in self.metrics_readers:
            try:
                validate_tenant(tenant)
            except InvalidArgument as exc:
                raise ConfigError(f"metrics_readers: {exc.message}", field="metrics_readers") from None
        if not self.listen and self.unix_socket == "-":
            raise ConfigError("no listener: set listen or unix_socket", field="listen")
        if self.tls_cert is not None and self.tls_key is None:
            raise ConfigError(
                "tls_cert is set without tls_key: TLS needs the certificate's private key", field="tls_cert"
            )
        if self.tls_key is not None and self.tls_cert is None:
            raise ConfigError("tls_key is set without tls_cert: TLS needs the key's certificate", field="tls_key")
        if not 256 <= self.model_n_ctx <= 131_072:
            raise ConfigError(f"model_n_ctx must be in [256, 131072], got {self.model_n_ctx}", field="model_n_ctx")
        for name in ("max_running", "tenant_max_running", "tenant_max_active", "max_message_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}", field=name)
        if not isinstance(self.drain_grace_s, int | float) or self.drain_grace_s < 0:
            raise ConfigError(f"drain_grace_s must not be negative, got {self.drain_grace_s}", field="drain_grace_s")
        try:
            parse_duration(self.retention)
        except InvalidArgument as exc:
            raise ConfigError(exc.message, field="retention") from None
        if self.executor not in EXECUTORS:
            raise ConfigError(f"executor {self.executor!r} is not one of {', '.join(EXECUTORS)}", field="executor")
        if self.executor == "ray" and not self.ray_address:
            raise ConfigError(
                "executor is 'ray' but ray_address is empty: name the cluster's head (HOST:PORT) or 'auto'",
                field="ray_address",
            )
        if self.ray_address and self.executor != "ray":
            raise ConfigError(
                f"ray_address is set but executor is {self.executor!r}: set executor = 'ray' to use the cluster",
                field="ray_address",
            )
        if self.ray_placement not in RAY_PLACEMENTS:
            raise ConfigError(
                f"ray_placement {self.ray_placement!r} is not one of {', '.join(RAY_PLACEMENTS)}",
                field="ray_placement",
            )
        if self.cluster_snapshot_dir is not None and not self.cluster_snapshot_dir.is_absolute():
            raise ConfigError(
                f"cluster_snapshot_dir {str(self.cluster_snapshot_dir)!r} is not an absolute path",
                field="cluster_snapshot_dir",
            )
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise ConfigError(f"log_level {self.log_level!r} is not debug/info/warning/error", field="log_level")
        for root in self.data_roots:
            if not root.is_absolute():
                raise ConfigError(f"data root {str(root)!r} is not an absolute path", field="data_roots")
        for tenant, roots in self.tenant_data_roots.items():
            try:
                validate_tenant(tenant)
            except InvalidArgument as exc:
                raise ConfigError(exc.message, field="tenant_data_roots") from None
            if not roots:
                raise ConfigError(f"tenant {tenant!r} has an empty list of data roots", field="tenant_data_roots")
            for root in roots:
                if not root.is_absolute():
                    raise ConfigError(
                        f"data root {str(root)!r} of tenant {tenant!r} is not an absolute path",
                        field="tenant_data_roots",
                    )
        return self


def listen_address_problem(address: str, *, authenticated: bool) -> str | None:
    """What is wrong with ``address`` as a TCP listener's "HOST:PORT", or None: the
    gRPC ``listen`` and the HTTP ``http_listen`` take the same rule."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        return "must be HOST:PORT (port 0-65535)"
    if not authenticated and not _is_loopback(host.strip("[]")):
        return (
            "is not a loopback address: without a tokens_file the daemon serves one tenant without "
            "authentication, so it only listens on loopback (set tokens_file)"
        )
    return None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_TYPES: dict[str, tuple[type, ...]] = {
    "listen": (str,),
    "http_listen": (str,),
    "unix_socket": (str,),
    "max_running": (int,),
    "tenant_max_running": (int,),
    "tenant_max_active": (int,),
    "drain_grace_s": (int, float),
    "log_level": (str,),
    "max_message_bytes": (int,),
    "reports": (bool,),
    "model_n_ctx": (int,),
    "retention": (str,),
    "executor": (str,),
    "ray_address": (str,),
    "ray_placement": (str,),
}
_PATH_LISTS = {"data_roots"}
_STR_LISTS = {"metrics_readers"}
_TENANT_PATHS = {"tenant_data_roots"}
_PATHS = {"state_dir", "tokens_file", "tls_cert", "tls_key", "ready_file", "cluster_snapshot_dir"}
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sclated", description="The sclate daemon (gRPC API sclate.v1).")
    p.add_argument("--config", type=Path, help="TOML file; flags override its keys")
    p.add_argument(
        "--listen",
        help=f"TCP HOST:PORT (default 127.0.0.1:{DEFAULT_PORT}; port 0 picks one; '' for none)",
    )
    p.add_argument(
        "--http-listen",
        metavar="HOST:PORT",
        help="the HTTP listener: the run viewer, /metrics and /healthz (port 0 picks one; default none)",
    )
    p.add_argument(
        "--metrics-reader",
        dest="metrics_readers",
        action="append",
        metavar="TENANT",
        help="a tenant whose token may read /metrics (with a tokens file); repeatable",
    )
    p.add_argument("--unix-socket", help="Unix socket path ('-' for none)")
    p.add_argument("--state-dir", type=Path, help="where the database and run files live")
    p.add_argument("--tokens-file", type=Path, help="'TOKEN TENANT' per line; re-read on SIGHUP")
    p.add_argument("--tls-cert", type=Path)
    p.add_argument("--tls-key", type=Path)
    p.add_argument("--max-running", type=int, help="runs executing at once (the rest wait PENDING)")
    p.add_argument("--tenant-max-running", type=int)
    p.add_argument("--tenant-max-active", type=int, help="PENDING+RUNNING runs per tenant")
    p.add_argument("--drain-grace-s", type=float, help="on SIGTERM, how long running runs may finish")
    p.add_argument("--ready-file", type=Path, help="written with the bound addresses once listening")
    p.add_argument("--log-level")
    p.add_argument(
        "--reports",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write a report and timeline plot per finished run (default on)",
    )
    p.add_argument(
        "--model-n-ctx", type=int, help="the embedded model's context in tokens (default 8192; more is stretched)"
    )
    p.add_argument(
        "--retention",
        metavar="DURATION",
        help="expire a finished run's history (events, journal, captured calls) this long after it ended: "
        "7d, 12h, 1d12h (default off: kept forever); its state and results stay",
    )
    p.add_argument(
        "--executor",
        help="where runs' workers execute: local (this process, the default) or ray (a Ray cluster)",
    )
    p.add_argument("--ray-address", help="the Ray cluster for --executor ray: its head's HOST:PORT, or auto")
    p.add_argument("--ray-placement", help="spread (the default) or pack runs over the cluster's nodes")
    p.add_argument(
        "--cluster-snapshot-dir",
        type=Path,
        help="a directory every cluster node shares, for snapshots of runs that may move (--executor ray)",
    )
    p.add_argument(
        "--data-root",
        dest="data_roots",
        action="append",
        type=Path,
        metavar="DIR",
        help="a directory whose files runs may name (data_dir, path options); repeatable; default <state_dir>/data",
    )
    p.add_argument(
        "--tenant-data-root",
        dest="tenant_data_roots",
        action="append",
        metavar="TENANT=DIR",
        help="a root of one tenant's own (replaces the --data-root ones for it); repeatable",
    )
    return p


def load_config(args: argparse.Namespace) -> DaemonConfig:
    """The configuration from ``--config`` and the flags (flags win).

    Every problem is a :class:`ConfigError` whose message says where it is: the
    config file and line for a key from the file, else the flag."""
    values: dict[str, Any] = {}
    known = {f.name for f in fields(DaemonConfig)}
    from_file: dict[str, int | None] = {}  # key -> its line in the config file
    config: Path | None = args.config
    if config is not None:
        text = _read_config(config)
        data = _parse_toml(text, config)
        for key, value in data.items():
            line = _key_line(text, key)
            if key not in known:
                raise ConfigError(
                    f"unknown key {key!r} (known keys: {', '.join(sorted(known))})", path=config, line=line, field=key
                )
            try:
                values[key] = _checked(key, value)
            except ConfigError as exc:
                raise ConfigError(exc.problem, path=config, line=line, field=key) from None
            from_file[key] = line
    for key in known:
        flag = getattr(args, key, None)
        if flag is not None:
            values[key] = _checked(key, flag)  # argparse gave it its type
            from_file.pop(key, None)
    if "state_dir" not in values:
        raise ConfigError("state_dir is required (--state-dir or state_dir in the config)", field="state_dir")
    try:
        return replace(DaemonConfig(**values)).validate()
    except ConfigError as exc:
        if config is None or exc.field not in from_file:
            raise
        raise ConfigError(exc.problem, path=config, line=from_file[exc.field], field=exc.field) from None


def _read_config(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror or exc}", path=path, field="config") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the config file is not UTF-8 text (byte {exc.start})", path=path, field="config") from None


_TOML_WHERE = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def _parse_toml(text: str, path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        where = _TOML_WHERE.search(message)
        if where is None:
            problem = message.replace("(at end of document)", "(at the end of the file)")
            raise ConfigError(f"not valid TOML: {problem}", path=path, field="config") from None
        raise ConfigError(
            f"not valid TOML: {message[: where.start()]}",
            path=path,
            line=int(where.group(1)),
            column=int(where.group(2)),
            field="config",
        ) from None


def _key_line(text: str, key: str) -> int | None:
    """The line of top-level ``key = ...`` or of table ``[key]`` (tomllib does
    not say where a key was)."""
    name = rf"""\s*(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')\s*"""
    assignment = re.compile(rf"^{name}[=.]")
    table = re.compile(rf"^\s*\[\[?{name}[\].]")
    in_tables = False
    for n, line in enumerate(text.splitlines(), 1):
        if table.match(line) or (not in_tables and assignment.match(line)):
            return n
        in_tables = in_tables or line.lstrip().startswith("[")
    return None


def _checked(key: str, value: Any) -> Any:
    """``value`` for ``key`` if it has the key's type (a Path for a path key)."""
    if key in _PATH_LISTS:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key} must be a list of paths, got {value!r}", field=key)
        return tuple(_checked_path(key, v) for v in value)
    if key in _STR_LISTS:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key} must be a list of strings, got {value!r}", field=key)
        return tuple(value)
    if key in _TENANT_PATHS:
        return _tenant_paths(key, value)
    if key in _PATHS:
        if isinstance(value, Path):
            return value
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key} must be a path (a non-empty string), got {value!r}", field=key)
        return Path(value)
    expected = _TYPES.get(key)
    if expected is not None and (not isinstance(value, expected) or (bool not in expected and isinstance(value, bool))):
        names = " or ".join(_TYPE_NAMES[t] for t in expected)
        raise ConfigError(f"{key} must be {names}, got {value!r}", field=key)
    return value


def _checked_path(key: str, value: Any) -> Path:
    if isinstance(value, Path):
        return value
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key} must hold paths (non-empty strings), got {value!r}", field=key)
    return Path(value)


def _tenant_paths(key: str, value: Any) -> dict[str, tuple[Path, ...]]:
    """A TOML table ``tenant = ["/dir", ...]``, or the flags' ``TENANT=DIR`` list."""
    out: dict[str, tuple[Path, ...]] = {}
    if isinstance(value, list | tuple):  # --tenant-data-root TENANT=DIR ...
        for item in value:
            tenant, sep, path = str(item).partition("=")
            if not sep or not tenant or not path:
                raise ConfigError(f"{key}: expected TENANT=DIR, got {item!r}", field=key)
            out[tenant] = (*out.get(tenant, ()), Path(path))
        return out
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be a table of tenant = [paths], got {value!r}", field=key)
    for tenant, paths in value.items():
        if not isinstance(paths, list):
            raise ConfigError(f"{key}.{tenant} must be a list of paths, got {paths!r}", field=key)
        out[str(tenant)] = tuple(_checked_path(key, p) for p in paths)
    return out


# -- what the configuration points at -------------------------------------------------
def check_startup(config: DaemonConfig) -> None:
    """Checks what a configuration points at before the daemon starts anything
    (its store, its runs, its listeners), so that a mistake is one
    :class:`ConfigError` naming the file or address, not a failure halfway in."""
    _check_state_dir(config.state_dir)
    if config.tls_cert is not None and config.tls_key is not None:
        _check_tls(config.tls_cert, config.tls_key)
    if config.listen:
        _check_tcp(config.listen, "listen")
    if config.http_listen:
        _check_tcp(config.http_listen, "http_listen")
    socket_path = config.unix_socket_path
    if socket_path is not None:
        _check_unix_socket(socket_path)
    if config.ready_file is not None:
        _check_can_write_in(config.ready_file.parent, config.ready_file, "ready file", "ready_file")
    check_data_roots(config)
    check_executor(config)


def check_executor(config: DaemonConfig) -> None:
    """executor = "ray" needs Ray installed (the optional extra) and the shared snapshot
    directory to be one; found before anything starts."""
    if config.executor != "ray":
        return
    try:
        import ray  # noqa: F401 - only to know it is there (the executor imports it next)
    except ImportError:
        raise ConfigError(
            "executor is 'ray' but Ray is not installed in this environment: pip install 'sclated[ray]' "
            "(the daemon's ray extra; from a checkout: pip install -e '.[ray]')",
            field="executor",
        ) from None
    snapshots = config.cluster_snapshot_dir
    if snapshots is not None and not snapshots.is_dir():
        raise ConfigError(
            f"cluster_snapshot_dir {str(snapshots)!r} is not a directory (it must be shared by every node)",
            field="cluster_snapshot_dir",
        )


def check_data_roots(config: DaemonConfig) -> None:
    """Each configured root is a directory (after symlinks), and none hands out the state
    directory: a root inside it must be inside its ``data``."""
    state = Path(os.path.realpath(config.state_dir))
    given = [(root, "data_roots") for root in config.data_roots]
    given += [(root, "tenant_data_roots") for roots in config.tenant_data_roots.values() for root in roots]
    for root, key in given:
        if not root.is_dir():
            problem = "does not exist" if not root.exists() else "is not a directory"
            raise ConfigError(f"the data root {problem}", path=root, field=key)
        real = Path(os.path.realpath(root))
        if (real == state or state in real.parents) and not (real == state / "data" or state / "data" in real.parents):
            raise ConfigError(
                "the data root is inside the state directory (it holds every tenant's runs); "
                f"put data in {state / 'data'} or outside it",
                path=root,
                field=key,
            )


def _check_can_write_in(directory: Path, path: Path, what: str, field: str) -> None:
    """Creates ``directory`` if need be and writes (then removes) a file in it."""
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"cannot create the {what}: {str(directory)!r} is not a directory", path=path, field=field)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".sclated-write-test-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        doing = "create" if not directory.is_dir() else "write in"
        raise ConfigError(
            f"cannot {doing} the {what}'s directory {str(directory)!r}: {exc.strerror or exc}", path=path, field=field
        ) from None


def _check_state_dir(state_dir: Path) -> None:
    if state_dir.exists() and not state_dir.is_dir():
        raise ConfigError("the state directory is not a directory", path=state_dir, field="state_dir")
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the state directory: {exc.strerror or exc}", path=state_dir, field="state_dir"
        ) from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".sclated-write-test-", dir=state_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(
            f"cannot write in the state directory: {exc.strerror or exc}", path=state_dir, field="state_dir"
        ) from None


def _check_tls(cert: Path, key: Path) -> None:
    for path, what, field in ((cert, "TLS certificate", "tls_cert"), (key, "TLS private key", "tls_key")):
        try:
            path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read the {what}: {exc.strerror or exc}", path=path, field=field) from None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_verify_locations(cafile=str(cert))
    except (ssl.SSLError, ValueError):
        raise ConfigError("not a PEM certificate", path=cert, field="tls_cert") from None
    try:
        # An encrypted key gets an empty password (and fails) instead of a prompt.
        ctx.load_cert_chain(str(cert), str(key), password=lambda: b"")
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(
                f"not the private key of the certificate {str(cert)!r}", path=key, field="tls_key"
            ) from None
        raise ConfigError("not an unencrypted PEM private key", path=key, field="tls_key") from None


def _check_tcp(listen: str, key: str) -> None:
    problem = tcp_listen_problem(listen)
    if problem is not None:
        raise ConfigError(f"{key} {listen!r}: {problem}", field=key)


def tcp_listen_problem(listen: str) -> str | None:
    """What stops ``listen`` from being bound now, or None: binds every address
    it resolves to, as gRPC will (SO_REUSEADDR), and lets go."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"cannot resolve {host!r}: {exc.strerror}"
    failures: list[OSError] = []
    bound = 0
    for family, kind, proto, _, address in dict.fromkeys(infos):
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
                bound += 1
            except OSError as exc:
                failures.append(exc)
    if any(exc.errno == errno.EADDRINUSE for exc in failures):
        return "address already in use (is another sclated running?)"
    if not bound:
        reason = failures[0].strerror if failures else "no address"
        return f"cannot listen there: {reason}"
    return None


_SUN_PATH_MAX = 107
"""Bytes of a unix socket path (sockaddr_un.sun_path holds 108, the last a NUL)."""


def _check_unix_socket(path: Path) -> None:
    size = len(os.fsencode(path))
    if size > _SUN_PATH_MAX:
        raise ConfigError(
            f"the unix socket path is {size} bytes long; the system allows at most {_SUN_PATH_MAX}",
            path=path,
            field="unix_socket",
        )
    if path.is_symlink() or (path.exists() and not stat.S_ISSOCK(path.stat().st_mode)):
        # The daemon removes a stale socket there: never a file of the user's.
        raise ConfigError("the unix socket path exists and is not a socket", path=path, field="unix_socket")
    _check_can_write_in(path.parent, path, "unix socket", "unix_socket")
