"""The sclated process: configuration, listeners, signals, systemd integration."""

from sclated.daemon._config import DaemonConfig, build_parser, check_data_roots, check_startup, load_config
from sclated.daemon._daemon import Daemon, data_roots_for, run_daemon

__all__ = [
    "Daemon",
    "DaemonConfig",
    "build_parser",
    "check_data_roots",
    "check_startup",
    "data_roots_for",
    "load_config",
    "run_daemon",
]
