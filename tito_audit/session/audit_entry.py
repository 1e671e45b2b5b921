"""Everything the session reads of the audit, named in one place: the rest of ``session/`` imports the audit only
through this module, and this module only through the audit's public entry for a loop at run time
(:mod:`tito_audit.audit.public`, which says what each name is for); ``tests/test_layout.py`` checks both.

The session decides a buffer exactly as the audit does, so it reuses the audit's parts rather than copies of them: the
join and its diagnosis, the per-step checks that label a break, the proof's conversations, the stop tokens and the
reasoning block.
"""

from __future__ import annotations

from tito_audit.audit.public import (
    AuditOptions,
    CheckSetup,
    Failure,
    Join,
    RolloutContext,
    StopToken,
    TokenWindow,
    VariantAudit,
    collect_stop_tokens,
    common_prefix_length,
    conversation_source,
    first_difference,
    history_dependent_suffix,
    join,
    mismatched_positions,
    seam_break,
    stand_in_bridge,
    template_error,
    text_break,
    text_window,
    token_boundary,
    token_window,
    trace_of,
    variant_reasoning,
)

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
