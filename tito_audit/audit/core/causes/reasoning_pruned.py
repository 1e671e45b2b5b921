"""``reasoning-pruned``: the reasoning of an earlier assistant turn is gone (or changed) once later messages exist.

Detected on a text divergence (:func:`detect`): a message's reasoning text that the earlier render writes at the
divergence is no longer near that place in the later one. Confirmed by counting: some message's reasoning is written
fewer times in the later render than in the earlier one.
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.divergence import Divergence, TextContext
from tito_audit.audit.core.causes.interface import Cause

NAME = "reasoning-pruned"
LINE = "The reasoning of an earlier assistant turn vanishes or changes once later messages exist."
FIXED = "keep reasoning in history"
UNFIXED = "reasoning is dropped by a construct no fix here edits"

_LOOKAHEAD = 160


def reasoning_texts(context: TextContext) -> list[str]:
    """Every message's non-empty reasoning (stripped), also in its normalized form."""
    out = []
    for message in context.messages:
        value = message.get("reasoning_content")
        if isinstance(value, str) and value.strip():
            out.append(value.strip())
    return context.forms(out)


def detect(divergence: Divergence) -> bool:
    earlier, later, index = divergence.earlier, divergence.later, divergence.index
    for reasoning in reasoning_texts(divergence.context):
        found = earlier.find(reasoning, max(0, index - len(reasoning)))
        near_later = later[max(0, found - _LOOKAHEAD) : found + len(reasoning) + _LOOKAHEAD]
        if 0 <= found <= index + _LOOKAHEAD and reasoning not in near_later:
            return True
    return False


def confirm(case: Case) -> Confirmation:
    """Some assistant message's reasoning is written more often in the earlier render than in the later one."""
    earlier, later = case.earlier, case.later
    reasonings = [m["reasoning_content"].strip() for m in case.messages if (m.get("reasoning_content") or "").strip()]
    lost = [r for r in reasonings if earlier.count(r) > later.count(r)]
    evidence = f"reasoning present earlier, gone later: {lost[0][:60]!r}" if lost else "no reasoning text lost"
    return Confirmation(NAME, bool(lost), evidence)


CAUSE = Cause(NAME, LINE, confirm, fixed=FIXED, unfixed=UNFIXED)
