"""``special-token-literal``: text inside a user or tool message encodes to a control token (pasted text becomes a
role header or an end token: a role-injection risk).

Detected by the roundtrip check (:mod:`tito_audit.audit.checks.roundtrip`: a control token's text in the message that
encodes to its id). Confirmed from the definition, from the ids: encoding the message's text yields an id of a control
token whose text the message holds.
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.interface import Cause

NAME = "special-token-literal"
LINE = "Text inside a message encodes to a control token: a role-injection risk."


def confirm(case: Case) -> Confirmation:
    """The failing message's text encodes to a control id, and that control token's text is in the message."""
    turn = case.failure.turn
    content = case.messages[turn].get("content") if 0 <= turn < len(case.messages) else None
    if not isinstance(content, str):
        return Confirmation(NAME, False, f"message {turn} has no text")
    by_id = {token_id: text for text, token_id in case.codec.control_ids_by_text.items()}
    found = [by_id[i] for i in case.codec.encode(content) if i in by_id and by_id[i] in content]
    return Confirmation(
        NAME,
        bool(found),
        f"message {turn}'s text encodes {found[0]!r} to its control id" if found else "no control id in its encoding",
    )


CAUSE = Cause(NAME, LINE, confirm)
