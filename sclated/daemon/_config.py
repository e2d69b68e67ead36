"""Daemon configuration: a TOML file, every key also a flag (flags win)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from sclated.errors import InvalidArgument

__all__ = ["DaemonConfig", "build_parser", "load_config"]

DEFAULT_PORT = 7431


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    state_dir: Path
    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    """TCP "HOST:PORT" (port 0 picks one); empty: no TCP listener."""
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

    @property
    def unix_socket_path(self) -> Path | None:
        if self.unix_socket == "-":
            return None
        if self.unix_socket:
            return Path(self.unix_socket)
        runtime = os.environ.get("RUNTIME_DIRECTORY")
        return Path(runtime.split(":")[0]) / "sclated.sock" if runtime else self.state_dir / "sclated.sock"

    def validate(self) -> DaemonConfig:
        if self.listen:
            host, sep, port = self.listen.rpartition(":")
            if not sep or not host or not port.isdigit() or int(port) > 65535:
                raise InvalidArgument(f"listen {self.listen!r} must be HOST:PORT", field="listen")
            if self.tokens_file is None and not _is_loopback(host.strip("[]")):
                raise InvalidArgument(
                    f"listen {self.listen!r} is not a loopback address: without a tokens_file the daemon serves "
                    "one tenant without authentication, so it only listens on loopback (set tokens_file)",
                    field="listen",
                )
        if not self.listen and self.unix_socket == "-":
            raise InvalidArgument("no listener: set listen or unix_socket", field="listen")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise InvalidArgument("tls_cert and tls_key go together", field="tls_cert")
        for name in ("max_running", "tenant_max_running", "tenant_max_active"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"{name} must be at least 1", field=name)
        if not isinstance(self.drain_grace_s, int | float) or self.drain_grace_s < 0:
            raise InvalidArgument("drain_grace_s must not be negative", field="drain_grace_s")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise InvalidArgument(f"log_level {self.log_level!r} is not debug/info/warning/error", field="log_level")
        return self


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_TYPES: dict[str, type] = {
    "listen": str,
    "unix_socket": str,
    "max_running": int,
    "tenant_max_running": int,
    "tenant_max_active": int,
    "log_level": str,
    "max_message_bytes": int,
    "reports": bool,
}
_PATHS = {"state_dir", "tokens_file", "tls_cert", "tls_key", "ready_file"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sclated", description="The sclate daemon (gRPC API sclate.v1).")
    p.add_argument("--config", type=Path, help="TOML file; flags override its keys")
    p.add_argument(
        "--listen",
        help=f"TCP HOST:PORT (default 127.0.0.1:{DEFAULT_PORT}; port 0 picks one; '' for none)",
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
    return p


def load_config(args: argparse.Namespace) -> DaemonConfig:
    values: dict[str, Any] = {}
    known = {f.name for f in fields(DaemonConfig)}
    if args.config is not None:
        try:
            data = tomllib.loads(args.config.read_text())
        except OSError as exc:
            raise InvalidArgument(f"cannot read config {str(args.config)!r}: {exc.strerror}", field="config") from None
        except tomllib.TOMLDecodeError as exc:
            raise InvalidArgument(f"config {str(args.config)!r} is not valid TOML: {exc}", field="config") from None
        for key, value in data.items():
            if key not in known:
                raise InvalidArgument(f"config {str(args.config)!r}: unknown key {key!r}", field=key)
            values[key] = Path(value) if key in _PATHS else value
    for key in known:
        flag = getattr(args, key, None)
        if flag is not None:
            values[key] = flag
    for key, value in values.items():
        expected = _TYPES.get(key)
        if expected is not None and (
            not isinstance(value, expected) or (expected is not bool and isinstance(value, bool))
        ):
            raise InvalidArgument(f"{key} must be of type {expected.__name__}, got {value!r}", field=key)
    if "state_dir" not in values:
        raise InvalidArgument("state_dir is required (--state-dir or state_dir in the config)", field="state_dir")
    try:
        cfg = DaemonConfig(**values)
    except TypeError as exc:
        raise InvalidArgument(f"bad configuration: {exc}", field="config") from None
    return replace(cfg).validate()
