"""What a loop at run time reads of the audit: the names :class:`~tito_audit.TitoSession` decides and labels a buffer
with, so that it decides exactly as the audit does (``session/`` imports the audit through this module only;
``tests/test_layout.py`` checks it). The audit's other modules may move; these names stay.

- **the join and its diagnosis** (``core/``): :func:`join` decides a buffer against the next prompt (:class:`Join`);
  the diff helpers locate where two sequences part and cut the window a report shows (:class:`TokenWindow`);
  :func:`token_boundary` finds where a text's token boundary falls; the causes a loop reports itself
  (``history_dependent_suffix.NAME``, ``template_error.NAME``: read as every cause is, by module);
- **the per-step checks that label a break** (``checks/``): a step's :class:`RolloutContext` over a
  :class:`CheckSetup`, the rollout check's :func:`text_break` and :func:`seam_break` (their :class:`Failure`), and the
  history-free bridge (:func:`stand_in_bridge`);
- **the proof of which steps a template writes the same after any history**: the audit's conversations for one
  variant (:class:`AuditOptions`, :func:`conversation_source`), accepted and realized as the audit does
  (:class:`VariantAudit`) and walked by the simulated rollout (:func:`trace_of`);
- **the stop tokens and the reasoning block** (``realization/``): :func:`collect_stop_tokens` (:class:`StopToken`),
  :func:`variant_reasoning`.

A module of its own rather than exports of ``tito_audit/audit/__init__.py``: every import of an audit module runs the
package's ``__init__``, so exports there would load the whole audit for a reader of ``results.py``, or be lazy and
then invisible to mypy and to the import graph the layout test reads.
"""

from __future__ import annotations

from tito_audit.audit.audit_options import AuditOptions, conversation_source
from tito_audit.audit.checks.bridge import stand_in_bridge
from tito_audit.audit.checks.rollout import seam_break, text_break
from tito_audit.audit.checks.rollout_context import CheckSetup, RolloutContext
from tito_audit.audit.checks.trace import trace_of
from tito_audit.audit.core.causes import history_dependent_suffix, template_error, token_boundary
from tito_audit.audit.core.diff import (
    common_prefix_length,
    first_difference,
    mismatched_positions,
    text_window,
    token_window,
)
from tito_audit.audit.core.join import Join, join
from tito_audit.audit.realization.reasoning_block import variant_reasoning
from tito_audit.audit.realization.stops import collect_stop_tokens
from tito_audit.audit.results import Failure, StopToken, TokenWindow
from tito_audit.audit.variant import VariantAudit

__all__ = [
    "AuditOptions",
    "CheckSetup",
    "Failure",
    "Join",
    "RolloutContext",
    "StopToken",
    "TokenWindow",
    "VariantAudit",
    "collect_stop_tokens",
    "common_prefix_length",
    "conversation_source",
    "first_difference",
    "history_dependent_suffix",
    "join",
    "mismatched_positions",
    "seam_break",
    "stand_in_bridge",
    "template_error",
    "text_break",
    "text_window",
    "token_boundary",
    "token_window",
    "trace_of",
    "variant_reasoning",
]
