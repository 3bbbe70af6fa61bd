"""The HTML report: one offline Bokeh page of every layer on one time axis, incidents shaded."""
from xlayer.report.page import Report, build_report, render_report

__all__ = ["Report", "build_report", "render_report"]
