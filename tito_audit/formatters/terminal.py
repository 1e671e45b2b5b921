"""Terminal report with rich: verdicts, a table per variant, coloured side-by-side token diffs."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group, JustifyMethod
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from tito_audit.audit.results import (
    BROKEN,
    READY,
    READY_TOOL_ONLY,
    UNSUPPORTED,
    AuditReport,
    Failure,
    VariantResult,
)
from tito_audit.formatters.commands import next_commands
from tito_audit.formatters.common import (
    differing_positions,
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
from tito_audit.formatters.parse_lines import (
    beside_the_verdict,
    engine_verdict_line,
    parse_examples,
    variant_parse_lines,
)
from tito_audit.parse.engines import engine_words
from tito_audit.repair.explanations import first_example_per_cause

VERDICT_STYLE = {
    READY: "bold green",
    READY_TOOL_ONLY: "bold yellow",
    BROKEN: "bold red",
    UNSUPPORTED: "bold magenta",
}


def verdict_text(verdict: str) -> Text:
    return Text(verdict, style=VERDICT_STYLE.get(verdict, "bold"))


def _tokens(failure: Failure, side: str) -> Text:
    window = failure.expected if side == "expected" else failure.actual
    differs = differing_positions(failure.expected, failure.actual)
    text = Text()
    highlight = "bold white on red" if side == "expected" else "bold white on dark_green"
    for position, token in enumerate(window_tokens(window)):
        if position:
            text.append("│", style="dim")
        text.append(token or "∅", style=highlight if position in differs else "")
    return text


def token_diff(failure: Failure) -> Table:
    """Side by side: the earlier side (buffer or earlier render) and the later render, differing tokens coloured."""
    table = Table(show_header=True, header_style="bold", expand=True, box=None, padding=(0, 1))
    start = failure.expected.start if failure.expected is not None else 0
    left, right = side_labels(failure)
    table.add_column(f"{left} (from token {start})", ratio=1, overflow="fold")
    table.add_column(right, ratio=1, overflow="fold")
    table.add_row(_tokens(failure, "expected"), _tokens(failure, "actual"))
    texts = texts_at_difference(failure, after=90)
    if texts is not None:
        table.add_row(Text("…" + visible(texts[0]), style="dim"), Text("…" + visible(texts[1]), style="dim"))
    return table


def _checks_table(variant: VariantResult) -> Table:
    table = Table(title=None, show_lines=False, header_style="bold")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("check", "left"),
        ("category", "left"),
        ("cases", "right"),
        ("passed", "right"),
        ("failed", "right"),
        ("refused", "right"),
    )
    for column, justify in columns:
        table.add_column(column, justify=justify)
    for name, check in variant.checks.items():
        for number, row in enumerate(check.rows):
            table.add_row(
                name if number == 0 else "",
                row.category,
                str(row.cases),
                str(row.passed),
                Text(str(row.failed), style="red" if row.failed else ""),
                Text(str(row.refused), style="magenta" if row.refused else ""),
            )
    return table


def _variant_panel(variant: VariantResult) -> Panel:
    parts: list = [
        Text.assemble("verdict: ", verdict_text(variant.verdict), f" — {variant.verdict_reason}"),
        *[Text(line, style="bold") for line in variant_condition_lines(variant)],
        Text(f"conversations audited: {variant.conversations_audited} of {variant.conversations}", style="dim"),
        _checks_table(variant),
        *[
            Text(f"{name} causes: " + ", ".join(f"{c} ×{n}" for c, n in sorted(check.cause_counts.items())))
            for name, check in variant.checks.items()
            if check.cause_counts
        ],
        *[Text(line, style="bold blue") for line in variant_parse_lines(variant)],
        *[Text(line, style="blue") for line in beside_the_verdict(variant)],
        Text("re-render drift (beside the verdict): " + drift_line(variant), style="cyan"),
        Text("stop tokens: " + stop_tokens_line(variant), style="dim"),
    ]
    for finding in variant.findings:
        parts.append(
            Text(
                f"finding {finding.cause}: {finding.summary}" + (f"  {finding.evidence}" if finding.evidence else ""),
                style="yellow",
            )
        )
    for refused in variant.refused:
        after = ", ".join(refused.accepted_after) if refused.accepted_after else "nothing accepted"
        parts.append(Text(f"refused ×{refused.count}: {refused.reason} → retried as: {after}", style="magenta"))
    for group in variant.unrealizable:
        parts.append(Text(unrealizable_line(group), style="magenta"))
    for check in variant.checks.values():
        parts += [Text(f"note: {note}", style="dim") for note in check.notes]
    examples = first_example_per_cause(variant)
    examples += parse_examples(variant)
    for cause, failure in examples:
        parts.append(
            Text.assemble((f"\n{cause}", "bold red"), f"  {failure.check}/{failure.aspect} at {location(failure)}")
        )
        if rewritten_message(failure):
            parts.append(Text(rewritten_message(failure), style="bold"))
        if failure.detail:
            parts.append(Text(failure.detail, style="dim"))
        parts.append(token_diff(failure))
    return Panel(Group(*parts), title=f"variant {variant.name}", title_align="left")


def render_report(
    report: AuditReport, console: Console | None = None, model_words: Sequence[str] | None = None
) -> None:
    """The report on a terminal; ``model_words``: the model and the options that found it, for the commands it
    suggests (:mod:`tito_audit.formatters.commands`)."""
    console = console or Console()
    model = report.model
    header = Table.grid(padding=(0, 2))
    header.add_row("model", f"{model.model_id}  [dim]({model.source}: {model.path})[/dim]")
    header.add_row("backend", f"{model.backend} ({model.tokenizer_class})")
    header.add_row(
        "template",
        f"{model.template_name or model.template_origin}  sha256 {(model.template_sha256 or '-')[:16]}",
    )
    header.add_row(
        "settings",
        f"seed {report.settings.seed}, {report.settings.count} conversations "
        f"({report.settings.conversations_source}), max {report.settings.max_turns} assistant turns",
    )
    tools = tools_line(report)
    if tools is not None:
        header.add_row("tools", tools)
    header.add_row("verdict", verdict_text(report.verdict))
    for engine_verdict in report.parsers:
        header.add_row("engine parser", Text(engine_verdict_line(engine_verdict), style="bold blue"))
    for line in report_condition_lines(report):
        label = "when it breaks" if line.startswith("when it breaks") else "refused setting"
        header.add_row(label, Text(line.removeprefix(label).removeprefix(": ").strip(), style="bold"))
    if report.recommendation is not None:
        header.add_row("way out", Text(report.recommendation.line(), style="bold cyan"))
    console.print(Panel(header, title="tito-audit", title_align="left"))
    summary = Table(header_style="bold")
    summary.add_column("variant")
    summary.add_column("verdict")
    summary.add_column("why")
    for variant in report.variants:
        summary.add_row(variant.name, verdict_text(variant.verdict), variant.verdict_reason)
    console.print(summary)
    for note in report.notes:
        console.print(Text(note, style="yellow"))
    for variant in report.variants:
        console.print(_variant_panel(variant))
    if report.explanations:
        console.print(Text("template lines behind each cause:", style="bold"))
        for explanation in report.explanations:
            console.print(Text("  " + str(explanation.get("summary", "")), style="cyan"))
    closing = Text.assemble("overall verdict: ", verdict_text(report.verdict))
    for engine_verdict in report.parsers:
        closing.append_text(
            Text.assemble(
                f"; with {engine_words(engine_verdict.engine, engine_verdict.parser)}: ",
                verdict_text(engine_verdict.verdict),
            )
        )
    closing.append(f"  ({report.duration_seconds:.1f}s)")
    console.print(closing)
    for what, command in next_commands(report, model_words):
        console.print(f"{what}: {command}", highlight=False, soft_wrap=True, markup=False)
