"""One parser verdict per engine (docs/contract.md "Engines differ").

The variants' :class:`~tito_audit.audit.results.ParseResult` of one engine (the i-th of each variant's ``parses``)
sum into that engine's :class:`~tito_audit.audit.results.EngineVerdict`: its worst variant's verdict and reason, the
causes and the fields the parse changed, when that verdict breaks (its conditions:
:func:`~tito_audit.audit.conditions.verdict_conditions.report_conditions` over that engine's parse results), and the way
out when the parser makes things worse.

Which of these verdicts decides a command's result: :mod:`tito_audit.audit.deciding`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tito_audit.audit.conditions.verdict_conditions import report_conditions
from tito_audit.audit.recommend import parser_way_out
from tito_audit.audit.results import EngineVerdict, ParseResult, VariantResult, worst_verdict
from tito_audit.parse.parser import ParserChoice


def engine_verdicts(choices: Sequence[ParserChoice], verdict: str, results: list[VariantResult]) -> list[EngineVerdict]:
    """The verdict with each of ``choices`` (in order; each variant's ``parses`` follow that order), beside the
    perfect-inverse ``verdict``."""
    verdicts = []
    for index, choice in enumerate(choices):
        parses = [(variant.name, variant.parses[index]) for variant in results if len(variant.parses) > index]
        if not parses:
            continue
        verdicts.append(_engine_verdict(choice, verdict, parses, results, index))
    return verdicts


def _engine_verdict(
    choice: ParserChoice,
    verdict: str,
    parses: list[tuple[str, ParseResult]],
    results: list[VariantResult],
    index: int,
) -> EngineVerdict:
    worst = worst_verdict([parse.verdict for _, parse in parses])
    name, deciding = next((name, parse) for name, parse in parses if parse.verdict == worst)
    causes: dict[str, int] = {}
    fields: dict[str, int] = {}
    for _, parse in parses:
        for cause, count in parse.check.cause_counts.items():
            causes[cause] = causes.get(cause, 0) + count
        for field_name, count in parse.fields.items():
            fields[field_name] = fields.get(field_name, 0) + count
    return EngineVerdict(
        engine=choice.engine,
        parser=choice.name,
        tool=choice.tool,
        reasoning=choice.reasoning,
        why=choice.why,
        source=choice.source,
        verdict=worst,
        verdict_reason=f"{name}: {deciding.verdict_reason}" if len(results) > 1 else deciding.verdict_reason,
        causes=dict(sorted(causes.items())),
        fields=dict(sorted(fields.items())),
        way_out=parser_way_out(verdict, worst, results),
        conditions=report_conditions(results, lambda variant: _nth_parse(variant, index)),
    )


def _nth_parse(variant: VariantResult, index: int) -> ParseResult | None:
    return variant.parses[index] if len(variant.parses) > index else None
