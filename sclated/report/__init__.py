"""The end-of-run report: ``report.json``, ``report.md`` and the timeline plot."""

from sclated.report._report import REPORT_SCHEMA, ReportPaths, Timeline, finite_json, render_markdown, write_report

__all__ = ["REPORT_SCHEMA", "ReportPaths", "Timeline", "finite_json", "render_markdown", "write_report"]
