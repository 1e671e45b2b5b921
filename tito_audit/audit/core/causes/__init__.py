"""Cause labels as data: one module per cause, each with its name (``NAME``), its contract line (``LINE``: the
sentence docs/contract.md and the pages give), where the audit detects it (its docstring, and ``detect`` for the text
causes :mod:`.classify` asks in order) and a confirmation written from its definition (``confirm``: re-render with
the change undone, or check what the definition says on the texts; :mod:`.case`). A module may add what the fix
search says of the cause: ``FIXED`` (what a fix that removes it does for the model) and ``UNFIXED`` (why it stays
when no fix removes it), and ``QUIET`` for a cause every BPE model shows (counted, never an example of its own).

:data:`CAUSES` is the table every reader uses (the checks and the parse step name causes by their modules'
``NAME``; the fix search, the glossaries and the contract's test read the table). Adding a cause: a module here, one
line in :data:`CAUSES`, its entry in docs/contract.md ("Cause labels").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType

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


@dataclass(frozen=True)
class Cause:
    """One cause label's definition."""

    name: str
    line: str
    """Its definition in one sentence (docs/contract.md, "Cause labels"; the pages' glossary)."""
    confirm: Callable[[Case], Confirmation]
    """A check written from the definition that the label holds on one failure."""
    quiet: bool = False
    """Every BPE model shows it: counted, never an example of its own."""
    fixed: str | None = None
    """What a fix that removes it does for the model (the way-out column), when a fix can."""
    unfixed: str | None = None
    """Why it stays when the fix search finds nothing that removes it."""

    @classmethod
    def of(cls, module: ModuleType) -> Cause:
        return cls(
            module.NAME,
            module.LINE,
            module.confirm,
            getattr(module, "QUIET", False),
            getattr(module, "FIXED", None),
            getattr(module, "UNFIXED", None),
        )


CAUSES: dict[str, Cause] = {
    cause.name: cause
    for cause in map(
        Cause.of,
        (
            reasoning_pruned,
            empty_think_dropped,
            gen_prompt_mismatch,
            stop_token_swap,
            tail_after_stop,
            closing_rewritten,
            bpe_seam,
            content_rewritten,
            tool_call_reformatted,
            history_dependent_suffix,
            nondeterministic_template,
            template_error,
            special_token_literal,
            normalization,
            noncanonical_split,
            bos_duplication,
            utf8_split,
            parse_lossy,
            value_rewritten,
        ),
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
