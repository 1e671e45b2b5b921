"""Which verdict decides a command's result: the one rule ``audit``, ``explain``, ``patch`` and ``check`` share for
their exit codes (docs/errors.md, "Which verdict decides").

A verdict is a claim about a loop: what sits between each completion and the next prompt. With the parsers of
engines audited (one :class:`~tito_audit.audit.results.EngineVerdict` each, docs/contract.md "Engines differ"), the
loops are those engines': the verdict of the engine the user names decides, or else the worst of the engines' parser
verdicts audited (``--parser auto``: a model ready behind SGLang and broken behind vLLM fails). The template's verdict
(the perfect inverse) is then reported beside them, never deciding. Without any engine's parser (``--parser template``,
or ``auto`` where none is recorded or installed for the model) the loop is the template's perfect inverse, and the
template's verdict decides.

``check``'s ``verdict:`` and ``rollout:`` requirements read the same loops, variant by variant
(:func:`variant_loops`): with engines' parsers, the rollouts walked with each of them.
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
    """The verdict of each loop audited, by what parses the completions: each engine's parsers when any ran (their
    names, ``sglang qwen25+qwen3``, in the report's order), else ``{"template": verdict}``."""
    if report.parsers:
        return {engine.parser: engine.verdict for engine in report.parsers}
    return {TEMPLATE: report.verdict}


def deciding_verdict(report: AuditReport, engine: str | None = None) -> tuple[str, str]:
    """(loop, verdict) that decides ``report``'s result: with ``engine`` (an engine the report audited, by its name,
    ``vllm``, or its parsers', ``vllm hermes``), that engine's parser verdict; else the worst of the loops audited
    (the first of them on a tie). Raises ``ValueError`` for an engine the report did not audit."""
    if engine is not None:
        named = [e for e in report.parsers if engine in (e.engine, e.parser)]
        if not named:
            raise ValueError(f"the report has no verdict with {engine}'s parser")
        verdicts = {e.parser: e.verdict for e in named}
    else:
        verdicts = loop_verdicts(report)
    worst = worst_verdict(list(verdicts.values()))
    return next((name, verdict) for name, verdict in verdicts.items() if verdict == worst)


@dataclass(frozen=True)
class VariantLoop:
    """One variant as one loop sees it: its verdict, why, and the rollout steps that failed in it."""

    loop: str
    """The parsers' name (``sglang qwen25+qwen3``), or ``template``."""
    verdict: str
    reason: str
    rollout_failures: list[Failure]
    parse: ParseResult | None
    """The engine's rollout with its parser (None: the template's perfect inverse)."""


def variant_loops(variant: VariantResult) -> list[VariantLoop]:
    """The variant in each loop audited: one per engine's parser (its walk), else the template's alone."""
    if variant.parses:
        return [
            VariantLoop(parse.parser, parse.verdict, parse.verdict_reason, list(parse.failures), parse)
            for parse in variant.parses
        ]
    failures = [failure for failure in variant.failures if failure.check == "rollout"]
    return [VariantLoop(TEMPLATE, variant.verdict, variant.verdict_reason, failures, None)]


def variant_loop(variant: VariantResult) -> VariantLoop:
    """The variant in the loop that decides it: the worst of its engines' walks (the first on a tie), else the
    template's."""
    loops = variant_loops(variant)
    worst = worst_verdict([loop.verdict for loop in loops])
    return next(loop for loop in loops if loop.verdict == worst)
