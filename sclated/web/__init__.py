"""The daemon's HTTP listener: the run viewer (static files and JSON reads), /metrics, /healthz."""

from sclated.web._http import HttpListener, MetricsSource, build_app

__all__ = ["HttpListener", "MetricsSource", "build_app"]
