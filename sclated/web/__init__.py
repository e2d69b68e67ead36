"""The daemon's HTTP listener: the run viewer (static files and JSON reads), /metrics (the
daemon's Prometheus metrics), /healthz."""

from sclated.web._http import HttpListener, MetricsSource, build_app
from sclated.web._metrics import MAX_LABEL_VALUES, RUN_STATES, DaemonMetrics, RunsView

__all__ = ["MAX_LABEL_VALUES", "RUN_STATES", "DaemonMetrics", "HttpListener", "MetricsSource", "RunsView", "build_app"]
