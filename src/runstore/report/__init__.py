"""An HTML report of a project's recorded runs: one self-contained file (``runstore report``).

``collect_report`` reads a :class:`~runstore.report.ReportData` out of a ``DataReader``;
``render_html`` turns one into the HTML text. Both are separate so that a host can collect
from any layer and render, or test either half, on its own.
"""

from __future__ import annotations

from runstore.report._collect import collect_report
from runstore.report._html import render_html
from runstore.report._model import (
    DEFAULT_REPORT_CAPS,
    DEFAULT_REPORT_RUNS,
    MAX_REPORT_FRAMES,
    MAX_REPORT_MESSAGE_CHARS,
    MAX_REPORT_RUNS,
    MAX_REPORT_TEXT_CHARS,
    MAX_STRIP_RUNS,
    FailingTest,
    HistoryStrip,
    MatrixCell,
    MatrixRow,
    ReportCaps,
    ReportData,
    RunPoint,
    SignatureGroup,
    SlowTest,
    StripEntry,
)

__all__ = [
    "DEFAULT_REPORT_CAPS",
    "DEFAULT_REPORT_RUNS",
    "MAX_REPORT_FRAMES",
    "MAX_REPORT_MESSAGE_CHARS",
    "MAX_REPORT_RUNS",
    "MAX_REPORT_TEXT_CHARS",
    "MAX_STRIP_RUNS",
    "FailingTest",
    "HistoryStrip",
    "MatrixCell",
    "MatrixRow",
    "ReportCaps",
    "ReportData",
    "RunPoint",
    "SignatureGroup",
    "SlowTest",
    "StripEntry",
    "collect_report",
    "render_html",
]
