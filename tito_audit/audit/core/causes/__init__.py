"""Cause labels as data: one module per cause, each declaring its :class:`~.interface.Cause` as ``CAUSE`` (its name
``NAME``, its contract line ``LINE``: the sentence docs/contract.md and the pages give, and a confirmation written
from its definition ``confirm``: re-render with the change undone, or check what the definition says on the texts;
:mod:`.case`), with where the audit detects it in its docstring (and ``detect`` for the text causes :mod:`.classify`
asks in order). A cause may add what the fix search says of it (``fixed``: what a fix that removes it does for the
model; ``unfixed``: why it stays when no fix removes it) and ``quiet`` for a cause every BPE model shows (counted,
never an example of its own).

:data:`CAUSES` is the table every reader uses (the checks and the parse step name causes by their modules'
``NAME``; the fix search, the glossaries and the contract's test read the table). Adding a cause: a module here, its
``CAUSE`` in :data:`CAUSES`, its entry in docs/contract.md ("Cause labels").
"""

from __future__ import annotations

from collections.abc import Iterable

from tito_audit.audit.core.causes import (
    bos_duplication,
    bpe_seam,
    closing_rewritten,
    content_rewritten,
    empty_think_dropped,
    gen_prompt_mismatch,
    history_dependent_suffix,
    noncanonical_split,
    nondeterministic_template,
    normalization,
    parse_lossy,
    reasoning_pruned,
    special_token_literal,
    stop_token_swap,
    tail_after_stop,
    template_error,
    tool_call_reformatted,
    utf8_split,
    value_rewritten,
)
from tito_audit.audit.core.causes.case import Case, Confirmation, ReasoningTags
from tito_audit.audit.core.causes.classify import classify_text_divergence
from tito_audit.audit.core.causes.divergence import MessageRef, TextContext, token_boundary
from tito_audit.audit.core.causes.empty_think_dropped import EMPTY_THINK
from tito_audit.audit.core.causes.interface import Cause

CAUSES: dict[str, Cause] = {
    cause.name: cause
    for cause in (
        reasoning_pruned.CAUSE,
        empty_think_dropped.CAUSE,
        gen_prompt_mismatch.CAUSE,
        stop_token_swap.CAUSE,
        tail_after_stop.CAUSE,
        closing_rewritten.CAUSE,
        bpe_seam.CAUSE,
        content_rewritten.CAUSE,
        tool_call_reformatted.CAUSE,
        history_dependent_suffix.CAUSE,
        nondeterministic_template.CAUSE,
        template_error.CAUSE,
        special_token_literal.CAUSE,
        normalization.CAUSE,
        noncanonical_split.CAUSE,
        bos_duplication.CAUSE,
        utf8_split.CAUSE,
        parse_lossy.CAUSE,
        value_rewritten.CAUSE,
    )
}
"""Every cause label, in the contract's order."""

QUIET = frozenset(cause.name for cause in CAUSES.values() if cause.quiet)


def quiet_only(causes: Iterable[str]) -> bool:
    """Whether ``causes`` are all causes every BPE model shows (and there is one): no example of its own."""
    labels = list(causes)
    return bool(labels) and all(label in QUIET for label in labels)


def confirm(cause: str, case: Case) -> Confirmation:
    """The cause's own confirmation on ``case``; a label this table does not define is not confirmed."""
    if cause not in CAUSES:
        return Confirmation(cause, False, "no mechanical confirmation for this label")
    return CAUSES[cause].confirm(case)


__all__ = [
    "CAUSES",
    "EMPTY_THINK",
    "QUIET",
    "Case",
    "Cause",
    "Confirmation",
    "MessageRef",
    "ReasoningTags",
    "TextContext",
    "classify_text_divergence",
    "confirm",
    "quiet_only",
    "token_boundary",
]
