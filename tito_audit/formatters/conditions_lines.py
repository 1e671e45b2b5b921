"""When a verdict breaks, in the words every format prints (docs/contract.md, Verdicts: "Conditions"): the plain loop's
verdict, the forms, shapes and settings that cause its failures (of the failing steps drawn under each, those that
hold once it is undone, each count saying what it counts), what was drawn, the refused settings, and the rare form of
a family's habit with the parser.

>>> from tito_audit.audit.result_conditions import Condition, Conditions
>>> found = Conditions("broken", "ready", "tool", 40, 0, [Condition("shape", "when two runs", 12, 10, 10, 10)])
>>> conditions_line(found)
'plain loop ready; breaks when two runs (10 of 10 failing tool steps hold without it)'
"""

from __future__ import annotations

from tito_audit.audit.conditions.step_conditions import RARE_FORM, SETTING
from tito_audit.audit.result_conditions import Condition, Conditions
from tito_audit.audit.results import READY, UNSUPPORTED, AuditReport, ParseResult, VariantResult
from tito_audit.parse.engines import engine_words


def _counted(condition: Condition, counted: str) -> str:
    """``10 of 10 failing tool steps hold without it`` (``… under the default settings`` for a setting)."""
    if condition.kind == SETTING and not condition.steps:
        return "the template refuses tool conversations"
    where = "under the default settings" if condition.kind == SETTING else "without it"
    line = f"{condition.held} of {condition.tried} failing {counted or 'tool'} steps hold {where}"
    return line if condition.tried == condition.failed else f"{line}; {condition.tried} of {condition.failed} tried"


def conditions_line(conditions: Conditions | None, plain: str = "plain loop", limit: int | None = None) -> str:
    """``plain loop ready; breaks when … (10 of 10 tool steps); …`` (empty for a ready verdict, and for an unsupported
    one no setting makes so); ``limit``: at most that many conditions, then how many more."""
    if conditions is None or (conditions.verdict in (READY, UNSUPPORTED) and not conditions.breaking):
        return ""  # ready breaks nowhere; unsupported has no tool step to break (its refusals say why)
    line = f"{plain} {conditions.plain_verdict}" if conditions.plain_verdict else f"no {plain} step drawn"
    shown = conditions.breaking if limit is None else conditions.breaking[:limit]
    if shown:
        line += "; breaks " + "; ".join(f"{c.name} ({_counted(c, conditions.counted)})" for c in shown)
        if len(conditions.breaking) > len(shown):
            line += f"; {len(conditions.breaking) - len(shown)} more"
    elif conditions.plain_verdict == conditions.verdict:
        line += "; no failing step holds once a form, shape or setting is undone"
    return line


def rare_forms_line(conditions: Conditions | None) -> str:
    """The rare forms drawn (the harness shapes have lines of their own), failing or not: ``rare forms drawn: the
    model calls with no analysis message first (1 of the 3 steps after such turns fail)`` (empty when none was)."""
    rare = [c for c in conditions.drawn if c.kind == RARE_FORM] if conditions is not None else []
    if conditions is None or not rare:
        return ""
    return "rare forms drawn: " + "; ".join(
        f"{c.name.removeprefix('when ')} ({c.failed} of the {c.steps} steps after such turns fail)" for c in rare
    )


def variant_condition_lines(variant: VariantResult) -> list[str]:
    """When the variant's verdict (the perfect inverse) breaks, and the rare forms drawn."""
    line = conditions_line(variant.conditions)
    return [*([f"when it breaks: {line}"] if line else []), *filter(None, [rare_forms_line(variant.conditions)])]


def parse_condition_lines(parse: ParseResult) -> list[str]:
    """The same for one engine's rollout with its parser, and its rare form's calls."""
    line = conditions_line(parse.conditions)
    lines = [f"when it breaks with {engine_words(parse.engine, parse.parser)}: {line}"] if line else []
    return [*lines, *filter(None, [rare_forms_line(parse.conditions), rare_form_line(parse)])]


def rare_form_line(parse: ParseResult) -> str:
    """The rare form of the family's habit through the parser: how often it was drawn and the calls lost with it."""
    calls = parse.calls
    if calls is None or not calls.rare_form:
        return ""
    return (
        f"{calls.rare_form} (against its habit of text before each call, drawn for a small share): "
        f"{calls.rare_turns} of {calls.turns} parsed call turns; the parser lost the calls of {calls.rare_lost} of "
        f"them, and of {calls.lost - calls.rare_lost} other call turns"
    )


def report_condition_lines(report: AuditReport) -> list[str]:
    """The model's conditions with the perfect inverse and with each engine's parser (one line each, in the order
    of the engines' verdicts), and its refused settings."""
    plain = "plain loop" if len(report.variants) < 2 else f"plain loop ({_first_setting(report)})"
    lines = []
    main = conditions_line(report.conditions, plain)
    if main:
        lines.append(f"when it breaks: {main}")
    for engine in report.parsers:
        parsed = conditions_line(engine.conditions, plain)
        if parsed:
            lines.append(f"when it breaks with {engine_words(engine.engine, engine.parser)}: {parsed}")
    lines += refused_setting_lines(report)
    return lines


def _first_setting(report: AuditReport) -> str:
    name = report.variants[0].name
    return "default settings" if name == "default" else name


def refused_setting_lines(report: AuditReport) -> list[str]:
    return [
        f"refused setting {item.setting} (not audited; decides no verdict): {item.error}"
        for item in report.refused_settings
    ]
