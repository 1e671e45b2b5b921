"""The lines every format shows for the rollout with each engine's parser (docs/contract.md "The parse step", "Engines
differ"): the verdict with each engine's parser beside the perfect-inverse verdict, what the parse changed, the
written-layout rates, the written values and the calls written inside the reasoning (rates beside the verdict), and
the steps by the shapes harnesses send."""

from __future__ import annotations

from tito_audit.audit.results import AuditReport, EngineVerdict, Failure, ParseResult, VariantResult, WrittenValue
from tito_audit.formatters.common import texts_at_difference
from tito_audit.formatters.conditions_lines import parse_condition_lines
from tito_audit.parse.engines import engine_words


def engine_verdict_line(verdict: EngineVerdict) -> str:
    """``with SGLang's parser qwen25+qwen3: broken (default: …); way out: …``."""
    line = f"with {engine_words(verdict.engine, verdict.parser)}: {verdict.verdict}"
    line += f" ({verdict.why})" if verdict.why else ""
    return line + (f"; way out: {verdict.way_out}" if verdict.way_out else "")


def report_parser_lines(report: AuditReport) -> list[str]:
    """One line per engine audited (:func:`engine_verdict_line`); none when only the perfect inverse ran."""
    return [engine_verdict_line(verdict) for verdict in report.parsers]


def verdicts_in_short(report: AuditReport) -> str:
    """``; with SGLang's parser: broken; with vLLM's parser: ready`` (empty when only the perfect inverse ran)."""
    return "".join(f"; with {engine_words(v.engine, v.parser)}: {v.verdict}" for v in report.parsers)


def parse_examples(variant: VariantResult) -> list[tuple[str, Failure]]:
    """The first failure of each engine's rollout with its parser, labelled with the parser."""
    return [(f"with {parse.parser}", parse.failures[0]) for parse in variant.parses if parse.failures]


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
    """Everything a format prints about one variant's rollouts with the engines' parsers, engine by engine (nothing
    under the perfect inverse)."""
    return [line for parse in variant.parses for line in parse_result_lines(parse)]


def parse_result_lines(parse: ParseResult) -> list[str]:
    """One engine's rollout with its parser: its verdict and reason, when it breaks, then what the parse changed and
    the rates."""
    lines = [
        f"with {engine_words(parse.engine, parse.parser)}: {parse.verdict} — {parse.verdict_reason}",
        *parse_condition_lines(parse),
    ]
    lines.append(f"{parse.turns_changed} of {parse.turns_parsed} parsed turns differ from the template's message")
    if parse.conversations_skipped:
        lines.append(
            f"{parse.conversations_skipped} conversations are left out: the template quotes tool-call arguments given "
            "as JSON strings, which no model behind an engine writes (it renders arguments as objects)"
        )
    if parse.conversations_without_tools:
        lines.append(
            f"{parse.conversations_without_tools} conversations with tool calls but no declared tools are left out: an "
            "engine parses calls only when the request declares tools"
        )
    if parse.turns_in_model_layout:
        lines.append(
            f"{parse.turns_in_model_layout} turns were written in the layout the family's model writes, which its "
            "template's history does not (re-rendered in the template's: tool-call-reformatted)"
        )
    fields = fields_line(parse)
    if fields:
        lines.append(fields)
    lines += written_lines(parse)
    lines += rewritten_lines(parse)
    if parse.calls_in_reasoning:
        lines.append(
            f"calls written inside the reasoning: {parse.calls_in_reasoning_lost} of {parse.calls_in_reasoning} lost "
            "by the parser (beside the verdict: a model that does this loses its call)"
        )
    return lines


def rewritten_lines(parse: ParseResult) -> list[str]:
    """Values the parser read back as other values, per type (written values, beside the verdict), with the first
    step each broke."""
    lines = []
    for value in parse.rewritten_values:
        line = (
            f"{value.value_type} values written {_literal(value.written)} are read back by the parser as "
            f"{_literal(value.read)}: "
        )
        if value.differing:
            line += (
                f"the next prompt differs on {value.differing} of the {value.steps} steps after them (a written value: "
                "beside the verdict, the steps hold with the value written as read back)"
            )
        else:
            line += (
                f"the next prompt holds on {value.steps} step{'s' * (value.steps != 1)} after them (the tool receives "
                "another value)"
            )
        lines.append(line)
    return lines + [f"e.g. {line}" for line in example_lines(parse.rewrite_failures)]


LITERAL_LIMIT = 40
"""Characters of a rewritten value shown (an array or object is not quoted whole)."""


def _literal(text: str) -> str:
    return text if len(text) <= LITERAL_LIMIT else f"{text[:LITERAL_LIMIT]}…"


def value_line(value: WrittenValue) -> list[str]:
    """What one value type does through the parser: the JSON literal re-rendered in the template's, and values read
    back as other values."""
    lines = []
    if value.steps:
        line = (
            f"{value.value_type} values written {value.json_literal!s:.40} where the template writes "
            f"{value.template_literal!s:.40}: the next prompt differs on {value.differing} of {value.steps} tool "
            "steps (value-rewritten)"
        )
        if value.steps_changed:
            line += f"; the parser reads another value back on {value.steps_changed}"
        lines.append(line)
    if value.values_changed:
        lines.append(
            f"{value.value_type} values as the template writes them are read back as another value: "
            f"{value.values_changed} of {value.values} (the tokens hold; the tool receives another value)"
        )
    return lines


def variant_value_lines(variant: VariantResult, parser: str | None) -> list[str]:
    """The written values of one variant (beside the verdict), with the parser they went through."""
    lines = [line for value in variant.values for line in value_line(value)]
    if not lines:
        return []
    return [f"written values (with {parser or 'the perfect inverse'}, beside the verdict):", *lines]


def variant_shape_lines(variant: VariantResult) -> list[str]:
    """``result names: absent 3 of 40 steps fail (12 conversations), kept 0 of 120 (40)``, one line per shape."""
    by_shape: dict[str, list[str]] = {}
    for row in variant.steps_by_shape:
        by_shape.setdefault(row.shape, []).append(
            f"{row.form} {row.failed} of {row.steps} steps fail ({row.conversations} conversations)"
        )
    return [
        f"shapes harnesses send, {shape}: " + "; ".join(cells) for shape, cells in by_shape.items() if len(cells) > 1
    ]


def value_example_lines(variant: VariantResult) -> list[str]:
    """The first ``value-rewritten`` step of each value type: what the model wrote, and the next prompt."""
    return example_lines(variant.value_failures)


def example_lines(failures: list[Failure]) -> list[str]:
    """The first of ``failures`` of each value type (their category): what the model wrote, and the next prompt."""
    first_of_each_type: dict[str, Failure] = {}
    for failure in failures:
        first_of_each_type.setdefault(failure.category, failure)
    lines = []
    for failure in first_of_each_type.values():
        texts = texts_at_difference(failure, before=40, after=30)
        line = f"{failure.category}: {failure.detail}"
        if texts is not None:
            line += f" — buffer …{texts[0]!r}… / next prompt …{texts[1]!r}…"
        lines.append(line)
    return lines


def beside_the_verdict(variant: VariantResult) -> list[str]:
    """The value and shape lines every format prints after the parse lines."""
    parser = variant.values_parser if variant.parses else None
    values = variant_value_lines(variant, parser)
    examples = [f"e.g. {line}" for line in value_example_lines(variant)] if values else []
    return [*values, *examples, *variant_shape_lines(variant)]
