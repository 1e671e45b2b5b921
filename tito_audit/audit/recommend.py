"""Recommended settings: the variant of the template's keyword arguments with the best verdict, when it is
better than the model's verdict (its worst variant).

A setting that changes only how history renders (``preserve_thinking``, ``clear_thinking=false``,
``truncate_history_thinking=false``) is preferred to one that also changes the generation prompt (thinking
off), which changes how the model runs; the report says which kind it is. Example: Qwen3.6 is
``ready-tool-only`` by default and ``ready`` with ``preserve_thinking=true``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tito_audit.audit.results import VERDICT_ORDER, Recommendation, VariantResult
from tito_audit.conversations.conversation import TOOL
from tito_audit.model.variants import DEFAULT


def recommend(variants: Sequence[VariantResult], prompts: Mapping[str, str | None]) -> Recommendation | None:
    """``prompts``: the generation prompt each variant writes for a one-message conversation (None when the
    template refuses it)."""
    if len(variants) < 2:
        return None
    worst = max(VERDICT_ORDER.index(v.verdict) for v in variants)
    default_prompt = prompts.get(DEFAULT)

    def changes_prompt(variant: VariantResult) -> bool:
        return variant.name != DEFAULT and prompts.get(variant.name) != default_prompt

    def key(variant: VariantResult) -> tuple:
        return (
            VERDICT_ORDER.index(variant.verdict),
            variant.name != DEFAULT,
            changes_prompt(variant),
            _failed_steps(variant),
            variant.name,
        )

    best = min(variants, key=key)
    if VERDICT_ORDER.index(best.verdict) >= worst:
        return None
    return Recommendation(
        setting=best.name,
        kwargs=dict(best.kwargs),
        verdict=best.verdict,
        evidence=_evidence(best),
        changes_generation_prompt=changes_prompt(best),
        avoid=[v.name for v in variants if VERDICT_ORDER.index(v.verdict) > VERDICT_ORDER.index(best.verdict)]
        if best.name == DEFAULT
        else [],
    )


def _failed_steps(variant: VariantResult) -> int:
    return sum(row.failed for row in variant.checks["rollout"].rows)


def _evidence(variant: VariantResult) -> str:
    rows = variant.checks["rollout"].rows
    tool = [r for r in rows if r.category == TOOL]
    tool_part = f"{sum(r.failed for r in tool)} of {sum(r.cases - r.refused for r in tool)} tool-only steps"
    all_part = f"{_failed_steps(variant)} of {sum(r.cases - r.refused for r in rows)} appended steps"
    return f"{tool_part} and {all_part} fail"


def parser_way_out(verdict: str, parser_verdict: str | None, results: list[VariantResult]) -> str | None:
    """When the engine's parser makes the verdict worse: the bridging mode that is safe whatever the parser (the
    history-free bridge, where the bridge check holds on every tool step), else keeping the sampled ids and the
    template's bridge without re-rendering parsed messages."""
    if parser_verdict is None or VERDICT_ORDER.index(parser_verdict) <= VERDICT_ORDER.index(verdict):
        return None
    cases = failed = 0
    for result in results:
        for row in result.checks["bridge"].rows:
            cases += row.cases - row.refused
            failed += row.failed
    if cases and not failed:
        return (
            f"bridge='history-free' (the stand-in suffix after each completion; no parsed message is ever rendered): "
            f"the bridge check holds on all {cases} tool steps, so the buffer holds whatever the parser returns"
        )
    return (
        "keep the sampled ids and never render the next prompt from a parsed message; the history-free bridge is "
        f"not sound here ({failed} of {cases} tool steps: history-dependent-suffix)"
        if cases
        else None
    )
