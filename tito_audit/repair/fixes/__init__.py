"""Fixes for chat templates: small edits of the model's own template that remove a cause of instability.

Each fix is a module declaring its :class:`~tito_audit.repair.fixes.interface.Fix` as ``FIX``: its ``NAME``, the
``CAUSES`` it addresses, ``CHANGES`` (what it changes, one line), ``AT_INFERENCE`` (what the model sees differently
at inference), the edits it makes in a :class:`~tito_audit.repair.fixes.source.TemplateSource` (none when the
template lacks the construct) and ``touches(messages, k, gp)`` (which renders it may change: every other render must
stay byte-identical). :mod:`tito_audit.repair.fixes.search` applies them, audits the result and keeps only what the
audit verifies.

Adding a fix: a module beside these and its ``FIX`` in :data:`REGISTRY`.
"""

from __future__ import annotations

from tito_audit.repair.fixes import (
    as_sampled,
    closing_as_followed,
    empty_block_always,
    empty_block_kept,
    frozen_date,
    history_boundary,
    reasoning_kept,
)
from tito_audit.repair.fixes.interface import Fix

REGISTRY: tuple[Fix, ...] = (
    as_sampled.FIX,
    history_boundary.FIX,
    reasoning_kept.FIX,
    empty_block_kept.FIX,
    empty_block_always.FIX,
    closing_as_followed.FIX,
    frozen_date.FIX,
)
"""Every fix, in the order the search tries them."""

RULES = {rule.name: rule for rule in REGISTRY}
