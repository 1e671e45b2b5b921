"""Findings beside the verdict: model-level observations that never change a verdict.

Each finding is a module declaring its :class:`FindingRule` as ``FINDING``: the ``NAME`` of the cause it counts and a
``find(context) -> list[Finding]`` function reading a
:class:`FindingContext` (the variant's model, codec and renderer, the accepted conversations with their full
renders, and the per-turn totals of the rollout). They run in :data:`REGISTRY` order after the checks.

Adding a finding: a module beside these and its ``FINDING`` in :data:`REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tito_audit.audit.findings import doubled_bos, gen_prompt_turns, nondeterminism, written_literals
from tito_audit.audit.findings.finding_context import FindingContext, FindingRule
from tito_audit.audit.results import Finding

__all__ = ["REGISTRY", "FindingContext", "FindingRule", "run_findings"]

REGISTRY: tuple[FindingRule, ...] = (
    nondeterminism.FINDING,
    doubled_bos.FINDING,
    gen_prompt_turns.FINDING,
    written_literals.FINDING,
)


def run_findings(context: FindingContext, rules: Sequence[FindingRule] = REGISTRY) -> list[Finding]:
    return [finding for rule in rules for finding in rule.find(context)]
