"""The formats of an audit report, by name: what ``--json``, ``--markdown``, ``--html`` write.

Each entry implements :class:`~tito_audit.formatters.interface.ReportFormat`; the command line's output options are
read from this tuple (:class:`tito_audit.cli.options.ReportOutputs`), in its order. A new format is its module and
one entry here.
"""

from __future__ import annotations

from tito_audit.formatters.interface import ReportFormat
from tito_audit.formatters.json_report import JsonFormat
from tito_audit.formatters.markdown import MarkdownFormat
from tito_audit.formatters.site.model_page import HtmlFormat

REPORT_FORMATS: tuple[ReportFormat, ...] = (JsonFormat(), MarkdownFormat(), HtmlFormat())
"""Every format of an audit report, in the order the help lists their options."""


def report_format(name: str) -> ReportFormat:
    """The format called ``name`` (a name of :data:`REPORT_FORMATS`)."""
    return next(f for f in REPORT_FORMATS if f.name == name)
