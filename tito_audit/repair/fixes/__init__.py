"""Fixes for chat templates: small edits of the model's own template that remove a cause of instability.

Each fix is a module with ``NAME``, the ``CAUSES`` it addresses, ``CHANGES`` (what it changes, one line),
``AT_INFERENCE`` (what the model sees differently at inference), ``edits(source)`` (the edits it makes in a
:class:`~tito_audit.repair.fixes.source.TemplateSource`; none when the template lacks the construct) and
``touches(messages, k, gp)`` (which renders it may change: every other render must stay byte-identical).
:mod:`tito_audit.repair.fixes.search` applies them, audits the result and keeps only what the audit verifies.

Adding a fix: a module beside these and one line in :data:`REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from tito_audit.conversations.conversation import Message
from tito_audit.repair.fixes import (
    as_sampled,
    closing_as_followed,
    empty_block_always,
    empty_block_kept,
    frozen_date,
    history_boundary,
    reasoning_kept,
)
from tito_audit.repair.fixes.source import Edit, TemplateSource


@dataclass(frozen=True)
class FixContext:
    """What a fix may need beyond the template source."""

    clock: datetime
    """The date the audit renders with (``frozen-date`` writes it as the default)."""
    opening: str | None
    """What the generation prompt writes after the assistant header (``<think>\n``), if anything."""


@dataclass(frozen=True)
class FixRule:
    name: str
    causes: frozenset[str]
    changes: str
    at_inference: str
    find_edits: Callable[[TemplateSource, FixContext], list[Edit]]
    touches: Callable[[Sequence[Message], int, bool], bool]
    scope: str


REGISTRY: tuple[FixRule, ...] = (
    FixRule(
        as_sampled.NAME,
        as_sampled.CAUSES,
        as_sampled.CHANGES,
        as_sampled.AT_INFERENCE,
        lambda source, context: as_sampled.edits(source),
        as_sampled.touches,
        as_sampled.SCOPE,
    ),
    FixRule(
        history_boundary.NAME,
        history_boundary.CAUSES,
        history_boundary.CHANGES,
        history_boundary.AT_INFERENCE,
        lambda source, context: history_boundary.edits(source),
        history_boundary.touches,
        history_boundary.SCOPE,
    ),
    FixRule(
        reasoning_kept.NAME,
        reasoning_kept.CAUSES,
        reasoning_kept.CHANGES,
        reasoning_kept.AT_INFERENCE,
        lambda source, context: reasoning_kept.edits(source, context.opening),
        reasoning_kept.touches,
        reasoning_kept.SCOPE,
    ),
    FixRule(
        empty_block_kept.NAME,
        empty_block_kept.CAUSES,
        empty_block_kept.CHANGES,
        empty_block_kept.AT_INFERENCE,
        lambda source, context: empty_block_kept.edits(source),
        empty_block_kept.touches,
        empty_block_kept.SCOPE,
    ),
    FixRule(
        empty_block_always.NAME,
        empty_block_always.CAUSES,
        empty_block_always.CHANGES,
        empty_block_always.AT_INFERENCE,
        lambda source, context: empty_block_always.edits(source),
        empty_block_always.touches,
        empty_block_always.SCOPE,
    ),
    FixRule(
        closing_as_followed.NAME,
        closing_as_followed.CAUSES,
        closing_as_followed.CHANGES,
        closing_as_followed.AT_INFERENCE,
        lambda source, context: closing_as_followed.edits(source),
        closing_as_followed.touches,
        closing_as_followed.SCOPE,
    ),
    FixRule(
        frozen_date.NAME,
        frozen_date.CAUSES,
        frozen_date.CHANGES,
        frozen_date.AT_INFERENCE,
        lambda source, context: frozen_date.edits(source, context.clock),
        frozen_date.touches,
        frozen_date.SCOPE,
    ),
)

RULES = {rule.name: rule for rule in REGISTRY}
