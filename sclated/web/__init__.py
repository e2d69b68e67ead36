"""The daemon's HTTP face: Prometheus metrics (``/metrics``) on the ``http_listen`` listener."""

from sclated.web._metrics import MAX_LABEL_VALUES, RUN_STATES, DaemonMetrics, RunsView

__all__ = ["MAX_LABEL_VALUES", "RUN_STATES", "DaemonMetrics", "RunsView"]
