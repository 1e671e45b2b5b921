"""The lines every format shows for the rollout with the engine's parser (SPEC "The parse step"): the verdict with
the parser beside the perfect-inverse verdict, what the parse changed, and the written-layout rates."""

from __future__ import annotations

from tito_audit.audit.results import AuditReport, ParseResult, VariantResult


def parser_name(report: AuditReport) -> str | None:
    return str(report.parser.get("name")) if report.parser else None


def report_parser_line(report: AuditReport) -> str | None:
    """``broken with sglang qwen25+qwen3 (default: the SGLang parsers documented for …)``; None when only the
    perfect inverse ran."""
    if report.parser is None or report.parser_verdict is None:
        return None
    why = report.parser.get("why") or ""
    line = f"{report.parser_verdict} with {parser_name(report)}" + (f" ({why})" if why else "")
    return line + (f"; way out: {report.parser_way_out}" if report.parser_way_out else "")


def fields_line(parse: ParseResult) -> str:
    """``parse-lossy steps by field: content whitespace ×4, call lost ×1`` (empty when the parse lost nothing)."""
    if not parse.fields:
        return ""
    return "parse-lossy steps by field: " + ", ".join(f"{name} ×{count}" for name, count in parse.fields.items())


def written_lines(parse: ParseResult) -> list[str]:
    """One line per layout: how often the next prompt no longer continues what the model wrote."""
    return [
        f"the next prompt differs when the model writes {layout.layout}: {layout.differing} of {layout.steps} tool "
        "steps (beside the verdict: a reason never to re-render)"
        for layout in parse.written
        if layout.steps
    ]


def variant_parse_lines(variant: VariantResult) -> list[str]:
    """Everything a format prints about one variant's rollout with the parser (nothing under the perfect inverse)."""
    parse = variant.parse
    if parse is None:
        return []
    lines = [f"with {parse.parser}: {parse.verdict} — {parse.verdict_reason}"]
    lines.append(f"{parse.turns_changed} of {parse.turns_parsed} parsed turns differ from the template's message")
    if parse.conversations_skipped:
        lines.append(
            f"{parse.conversations_skipped} conversations are left out: the template quotes tool-call arguments given "
            "as JSON strings, which no model behind an engine writes (it renders arguments as objects)"
        )
    fields = fields_line(parse)
    if fields:
        lines.append(fields)
    return lines + written_lines(parse)
