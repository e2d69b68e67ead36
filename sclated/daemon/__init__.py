"""The sclated process: configuration, listeners, signals, systemd integration."""

from sclated.daemon._config import DaemonConfig, build_parser, check_startup, load_config
from sclated.daemon._daemon import Daemon, run_daemon

__all__ = ["Daemon", "DaemonConfig", "build_parser", "check_startup", "load_config", "run_daemon"]
