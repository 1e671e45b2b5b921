"""Markdown report: the same content as the terminal report, for files and pull requests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tito_audit.audit.results import AuditReport, Failure, VariantResult
from tito_audit.formatters.commands import next_commands
from tito_audit.formatters.common import (
    drift_line,
    location,
    rewritten_message,
    side_labels,
    stop_tokens_line,
    texts_at_difference,
    tools_line,
    unrealizable_line,
    visible,
    window_tokens,
)
from tito_audit.formatters.conditions_lines import report_condition_lines, variant_condition_lines
from tito_audit.formatters.interface import FormatContext, ReportFormat
from tito_audit.formatters.parse_lines import (
    beside_the_verdict,
    parse_examples,
    parse_result_lines,
    report_parser_lines,
)
from tito_audit.formatters.site.glossary import CAUSES, VERDICTS
from tito_audit.outputs import write_atomically
from tito_audit.repair.explanations import first_example_per_cause

if TYPE_CHECKING:
    from tito_audit.formatters.fix_report import FixPage


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _example(cause: str, failure: Failure) -> list[str]:
    left, right = side_labels(failure)
    lines = [f"- **{cause}** — {failure.check}/{failure.aspect}, {_cell(location(failure))}"]
    if rewritten_message(failure):
        lines.append(f"  {rewritten_message(failure)}")
    if failure.detail:
        lines.append(f"  {failure.detail}")
    texts = texts_at_difference(failure)
    if texts is not None:
        lines += ["  ```text", f"  {left}: …{visible(texts[0])}", f"  {right}: …{visible(texts[1])}", "  ```"]
    if failure.expected is not None and failure.actual is not None:
        lines += [
            "  ```text",
            f"  {left} @{failure.expected.start}: " + " | ".join(window_tokens(failure.expected)),
            f"  {right} @{failure.actual.start}: " + " | ".join(window_tokens(failure.actual)),
            "  ```",
        ]
    return lines


def _variant(variant: VariantResult) -> list[str]:
    lines = [
        f"### Variant `{variant.name}`: **{variant.verdict}**",
        "",
        variant.verdict_reason + ".",
        "",
        *([*(f"- {line}" for line in conditions), ""] if (conditions := variant_condition_lines(variant)) else []),
        f"Conversations audited: {variant.conversations_audited} of {variant.conversations}.",
        "",
        "| check | category | cases | passed | failed | refused |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, check in variant.checks.items():
        for row in check.rows:
            lines.append(
                f"| {name} | {_cell(row.category)} | {row.cases} | {row.passed} | {row.failed} | {row.refused} |"
            )
    lines.append("")
    causes = {name: check.cause_counts for name, check in variant.checks.items() if check.cause_counts}
    if causes:
        lines.append(
            "Causes: "
            + "; ".join(
                f"{name}: " + ", ".join(f"{c} ×{n}" for c, n in sorted(counts.items()))
                for name, counts in causes.items()
            )
        )
        lines.append("")
    for parse in variant.parses:
        parse_lines = parse_result_lines(parse)
        lines += [f"**{_cell(parse_lines[0])}**", "", *(f"- {_cell(line)}" for line in parse_lines[1:]), ""]
    beside = beside_the_verdict(variant)
    if beside:
        lines += [f"- {_cell(line)}" for line in beside] + [""]
    lines += [f"Re-render drift: {drift_line(variant)}.", ""]
    lines.append("Stop tokens: " + stop_tokens_line(variant, code=True))
    lines.append("")
    for finding in variant.findings:
        lines.append(
            f"- finding **{finding.cause}**: {_cell(finding.summary)}"
            + (f" — `{finding.evidence}`" if finding.evidence else "")
        )
    for refused in variant.refused:
        after = ", ".join(refused.accepted_after) if refused.accepted_after else "no shape accepted"
        lines.append(
            f"- refused ×{refused.count}: {_cell(refused.reason)} — retried as: {after}"
            f" (e.g. {refused.example_conversation})"
        )
    lines += [f"- {_cell(unrealizable_line(group))}" for group in variant.unrealizable]
    for check in variant.checks.values():
        lines += [f"- note: {note}" for note in check.notes]
    examples = first_example_per_cause(variant)
    examples += parse_examples(variant)
    if examples:
        lines += ["", "First example of each cause:", ""]
        for cause, failure in examples:
            lines += _example(cause, failure)
    lines.append("")
    return lines


def to_markdown(
    report: AuditReport,
    way_out: FixPage | None = None,
    fix_link: str | None = None,
    model_words: Sequence[str] | None = None,
) -> str:
    """The report as Markdown; the matrix adds the model's way out and the link to its way-out page, the command
    line the model and options its suggested commands carry (:mod:`tito_audit.formatters.commands`)."""
    model = report.model
    way = f"**Way out: {_cell(way_out.summary)}**" if way_out is not None else ""
    if way and fix_link:
        way += f" ([its page]({fix_link}))"
    lines = [
        f"# tito-audit: {model.model_id} — **{report.verdict}**",
        "",
        *[part for line in report_parser_lines(report) for part in (f"**Verdict {line}**", "")],
        *([f"**{report.recommendation.line()}**", ""] if report.recommendation is not None else []),
        *([way, ""] if way else []),
        *([*(f"- {line}" for line in conditions), ""] if (conditions := report_condition_lines(report)) else []),
        "| | |",
        "|---|---|",
        f"| source | {model.source} ({_cell(model.path)}) |",
        f"| revision | {model.revision or '-'} |",
        f"| backend | {model.backend} ({model.tokenizer_class}) |",
        f"| template | {model.template_name or model.template_origin} (sha256 {model.template_sha256 or '-'}) |",
        f"| seed / conversations / max turns | {report.settings.seed} / {report.settings.count}"
        f" / {report.settings.max_turns} |",
        f"| conversations | {report.settings.conversations_source} |",
        *([f"| tools | {_cell(tools)} |"] if (tools := tools_line(report)) else []),
        f"| tool / libraries | tito-audit {report.tool_version}; "
        + ", ".join(f"{k} {v}" for k, v in report.library_versions.items())
        + " |",
        "",
        "| variant | verdict | why |",
        "|---|---|---|",
    ]
    lines += [f"| `{v.name}` | {v.verdict} | {_cell(v.verdict_reason)} |" for v in report.variants]
    lines.append("")
    lines += [f"- {note}" for note in report.notes]
    if report.template_inputs:
        lines.append(
            "Template keyword arguments found: "
            + ", ".join(
                f"`{k}`" + (f" ({', '.join(map(str, v))})" if v else "") for k, v in report.template_inputs.items()
            )
        )
    lines.append("")
    for variant in report.variants:
        lines += _variant(variant)
    if report.explanations:
        lines += ["## Template lines behind each cause", ""]
        lines += [f"- {_cell(e.get('summary', ''))}" for e in report.explanations]
        lines.append("")
    commands = next_commands(report, model_words, way_out.fix_offered if way_out is not None else None)
    if commands:
        lines += ["## Next", ""]
        lines += [f"- {what}: `{command}`" for what, command in commands]
        lines.append("")
    lines += _glossary(report)
    return "\n".join(lines).rstrip() + "\n"


def _glossary(report: AuditReport) -> list[str]:
    """What each verdict and cause label on this page means (the HTML page's glossary, in Markdown)."""
    verdicts = [report.verdict, *(e.verdict for e in report.parsers), *(v.verdict for v in report.variants)]
    causes: list[str] = []
    for variant in report.variants:
        causes += [cause for check in variant.checks.values() for cause in check.cause_counts]
        causes += [finding.cause for finding in variant.findings]
        causes += [cause for parse in variant.parses for failure in parse.failures for cause in failure.causes]
    terms = [f"- **{v}**: {VERDICTS[v]}" for v in dict.fromkeys(verdicts) if v in VERDICTS]
    terms += [f"- `{c}`: {CAUSES[c]}" for c in dict.fromkeys(causes) if c in CAUSES]
    return ["## Glossary", "", *terms, ""]


class MarkdownFormat(ReportFormat):
    name = "markdown"
    help = "Write the report as Markdown here."

    def render(self, report: AuditReport, context: FormatContext) -> str:
        return to_markdown(report, model_words=context.model_words)


def write_markdown(report: AuditReport, path: Path) -> None:
    """The Markdown report written to ``path`` atomically."""
    write_atomically(path, to_markdown(report))
