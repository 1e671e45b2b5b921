"""The job summary ``tito-audit check --summary FILE`` writes (Markdown; the GitHub Action appends it to
``$GITHUB_STEP_SUMMARY``): the verdict and why, the verdict with each engine's parser, the verdict per variant, each
requirement with PASS or FAIL."""

from __future__ import annotations

from collections.abc import Sequence

from tito_audit.audit.results import BROKEN, READY, READY_TOOL_ONLY, UNSUPPORTED, AuditReport
from tito_audit.formatters.parse_lines import report_parser_lines
from tito_audit.formatters.site.model_page import worst_reason
from tito_audit.gate.policy import RequirementResult

MARKS = {READY: "🟢", READY_TOOL_ONLY: "🟡", BROKEN: "🔴", UNSUPPORTED: "🟣"}


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").replace("`", "'")


def to_summary(report: AuditReport, results: Sequence[RequirementResult], page: str | None = None) -> str:
    """The summary of one check: ``page`` names the model page when one was written (an artifact of the job)."""
    model = report.model
    passed = all(r.passed for r in results)
    lines = [
        f"### tito-audit: `{_cell(model.model_id)}` — {MARKS.get(report.verdict, '')} **{report.verdict}**"
        f" — {'every requirement holds' if passed else 'a requirement fails'}",
        "",
        _cell(worst_reason(report)),
        "",
    ]
    lines += [part for line in report_parser_lines(report) for part in (_cell(f"Verdict {line}"), "")]
    if report.recommendation is not None:
        lines += [f"**{_cell(report.recommendation.line())}**", ""]
    lines += ["| variant | verdict | why |", "|---|---|---|"]
    lines += [
        f"| `{_cell(v.name)}` | {MARKS.get(v.verdict, '')} {v.verdict} | {_cell(v.verdict_reason)} |"
        for v in report.variants
    ]
    lines += ["", "| requirement | result | why |", "|---|---|---|"]
    lines += [
        f"| `{_cell(r.requirement)}` | {'✅ PASS' if r.passed else '❌ FAIL'} | {_cell(r.reason)} |" for r in results
    ]
    level = "text level (no vocabulary)" if report.text_level_only else "full (real tokenizer)"
    lines += [
        "",
        f"Audited {level}; seed {report.settings.seed}, {report.settings.count} conversations per variant; "
        f"template sha256 `{model.template_sha256 or '-'}`; tito-audit {report.tool_version}."
        + (f" The model page (token diffs of each break) is the job's artifact `{_cell(page)}`." if page else ""),
    ]
    return "\n".join(lines) + "\n"
