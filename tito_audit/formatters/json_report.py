"""JSON report: the :class:`~tito_audit.audit.results.AuditReport` dataclasses, as a stable document.

Keys keep the dataclass field order; only ``generated_at`` and ``duration_seconds`` change between two
runs with the same model, settings and seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tito_audit.audit.results import AuditReport, plain
from tito_audit.formatters.interface import FormatContext, ReportFormat
from tito_audit.outputs import write_atomically

VOLATILE_KEYS = ("generated_at", "duration_seconds")


def report_to_dict(report: AuditReport) -> dict[str, Any]:
    return plain(report)


def to_json(report: AuditReport) -> str:
    return json.dumps(report_to_dict(report), ensure_ascii=False, indent=2, allow_nan=False) + "\n"


class JsonFormat(ReportFormat):
    name = "json"
    help = "Write the report as JSON here."

    def render(self, report: AuditReport, context: FormatContext) -> str:
        return to_json(report)


def write_json(report: AuditReport, path: Path) -> None:
    """The JSON report written to ``path`` atomically."""
    write_atomically(path, to_json(report))
