"""Findings beside the verdict: model-level observations that never change a verdict.

Each finding is a module with a ``find(context) -> list[Finding]`` function reading a
:class:`FindingContext` (the variant's model, codec and renderer, the accepted conversations with their full
renders, and the per-turn totals of the rollout). They run in :data:`REGISTRY` order after the checks.

Adding a finding: a module beside these and one line in :data:`REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from tito_audit.conversation import Conversation
from tito_audit.model import LoadedModel
from tito_audit.render import Renderer
from tito_audit.results import Finding
from tito_audit.tokens import TokenCodec


@dataclass(frozen=True)
class FindingContext:
    model: LoadedModel
    codec: TokenCodec
    renderer: Renderer
    clock: datetime
    accepted: Sequence[tuple[Conversation, str]]
    """Audited conversations with ``render(M)`` (as rendered during the audit, under ``clock``)."""
    completions: int
    gen_prompt_mismatches: int


@dataclass(frozen=True)
class FindingRule:
    name: str
    find: Callable[[FindingContext], list[Finding]]


def _registry() -> tuple[FindingRule, ...]:
    from tito_audit.findings import bos_duplication, gen_prompt_mismatch, nondeterminism

    return (
        FindingRule(nondeterminism.NAME, nondeterminism.find),
        FindingRule(bos_duplication.NAME, bos_duplication.find),
        FindingRule(gen_prompt_mismatch.NAME, gen_prompt_mismatch.find),
    )


REGISTRY: tuple[FindingRule, ...] = _registry()


def run_findings(context: FindingContext, rules: Sequence[FindingRule] = REGISTRY) -> list[Finding]:
    return [finding for rule in rules for finding in rule.find(context)]
