"""Which verdict decides a command's result: the one rule ``audit``, ``explain``, ``patch`` and ``check`` share for
their exit codes (docs/errors.md, "Which verdict decides").

A verdict is a claim about a loop: what sits between each completion and the next prompt. Without an engine's
parser (``--parser template``, or ``auto`` where none is documented or installed) the loop is the template's
perfect inverse, and the template's verdict decides. With the parsers of engines audited, the loops are those
engines': the worst of the verdicts with the parsers audited decides, or the verdict of the engine the user names.
The template's verdict is then reported beside, never deciding.

``check``'s rollout requirements read the same loop (:func:`variant_loop`): with an engine's parser, the steps of the
rollout walked with that parser.
"""

from __future__ import annotations

from dataclasses import dataclass

from tito_audit.audit.results import (
    READY,
    READY_TOOL_ONLY,
    AuditReport,
    Failure,
    ParseResult,
    VariantResult,
    worst_verdict,
)

TEMPLATE = "template"
"""The loop without an engine's parser: the template's perfect inverse."""


def good_verdict(verdict: str) -> bool:
    """``ready`` and ``ready-tool-only``: an append-only loop can follow the template's tool steps."""
    return verdict in (READY, READY_TOOL_ONLY)


def loop_verdicts(report: AuditReport) -> dict[str, str]:
    """The verdict of each loop audited, by what parses the completions: the engines' parsers when any ran (their
    names, ``sglang qwen25+qwen3``), else ``{"template": verdict}``."""
    if report.parser_verdict is not None:
        name = str((report.parser or {}).get("name") or report.settings.parser)
        return {name: report.parser_verdict}
    return {TEMPLATE: report.verdict}


def deciding_verdict(report: AuditReport, engine: str | None = None) -> tuple[str, str]:
    """(loop, verdict) that decides ``report``'s result: the loop ``engine`` names when it was audited, else the
    worst of the loops audited (the first of them on a tie)."""
    verdicts = loop_verdicts(report)
    if engine is not None and engine in verdicts:
        return engine, verdicts[engine]
    worst = worst_verdict(list(verdicts.values()))
    return next((name, verdict) for name, verdict in verdicts.items() if verdict == worst)


@dataclass(frozen=True)
class VariantLoop:
    """One variant as the deciding loop sees it: its verdict, why, and the rollout steps that failed in it."""

    loop: str
    verdict: str
    reason: str
    rollout_failures: list[Failure]
    parse: ParseResult | None


def variant_loop(variant: VariantResult) -> VariantLoop:
    """The variant under the loop that decides (the engine's parser's walk when one ran, else the template's)."""
    if variant.parse is not None:
        parse = variant.parse
        return VariantLoop(parse.parser, parse.verdict, parse.verdict_reason, list(parse.failures), parse)
    failures = [failure for failure in variant.failures if failure.check == "rollout"]
    return VariantLoop(TEMPLATE, variant.verdict, variant.verdict_reason, failures, None)
