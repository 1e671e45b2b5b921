"""The reasoning forms of an assistant message (absent, empty, present), and which forms a generation prompt
admits in each state it can leave the reasoning block in (docs/contract.md "Realizable turns"; the states are read from
the template by :mod:`tito_audit.audit.realization.reasoning_block`).

>>> reasoning_form({"role": "assistant", "content": "Hi", "reasoning_content": ""})
'reasoning empty'
"""

from __future__ import annotations

from collections.abc import Sequence

from tito_audit.conversations.conversation import Message

OPEN = "open"
CLOSED = "closed"
NO_BLOCK = "no block"
UNKNOWN = "unknown"

REASONING_ABSENT = "reasoning absent"
REASONING_EMPTY = "reasoning empty"
REASONING_PRESENT = "reasoning present"
REASONING_FORMS = (REASONING_ABSENT, REASONING_EMPTY, REASONING_PRESENT)
REASONING_SENT_BACK_WITHOUT = "reasoning empty, sent back without it"
"""A turn whose model closed an open reasoning block at once and whose harness sent it back with the reasoning field
absent or None (how the turn is audited and reported; its message has no reasoning)."""

REALIZABLE: dict[str, tuple[str, ...]] = {
    OPEN: (REASONING_EMPTY, REASONING_PRESENT),
    CLOSED: (REASONING_ABSENT,),
    NO_BLOCK: REASONING_FORMS,
    UNKNOWN: REASONING_FORMS,
}
"""The reasoning forms a model can produce after a prompt in each state."""

NEAREST: dict[str, tuple[str, ...]] = {
    REASONING_PRESENT: (REASONING_PRESENT, REASONING_ABSENT, REASONING_EMPTY),
    REASONING_ABSENT: (REASONING_ABSENT, REASONING_PRESENT, REASONING_EMPTY),
    REASONING_EMPTY: (REASONING_EMPTY, REASONING_ABSENT, REASONING_PRESENT),
}
"""For each form, the forms to use instead when it is not realizable, nearest first: reasoning (empty or not)
after a closed block is dropped; a turn without reasoning inside an open block gets reasoning (docs/contract.md,
"Realizable turns")."""

STAND_IN_REASONING = "Let me work through this step by step."
"""The reasoning given to a turn whose prompt opens a reasoning block when the message carries none."""


def nearest_realizable(form: str, realizable: Sequence[str]) -> str:
    """``form`` when realizable, else the nearest realizable form.

    >>> nearest_realizable(REASONING_ABSENT, REALIZABLE[OPEN])
    'reasoning present'
    >>> nearest_realizable(REASONING_PRESENT, REALIZABLE[CLOSED])
    'reasoning absent'
    """
    return next((other for other in NEAREST[form] if other in realizable), form)


def short_kind(form: str) -> str:
    """``reasoning empty`` -> ``empty`` (the generator's and the report's word for a form)."""
    return form.split()[-1]


def reasoning_form(message: Message) -> str:
    value = message.get("reasoning_content")
    if value is None:
        return REASONING_ABSENT
    return REASONING_EMPTY if isinstance(value, str) and not value.strip() else REASONING_PRESENT


def with_reasoning_form(message: Message, form: str) -> Message:
    """``message`` with its reasoning in ``form`` (present keeps its own text, or gets a stand-in)."""
    out = {k: v for k, v in message.items() if k != "reasoning_content"}
    if form == REASONING_EMPTY:
        out["reasoning_content"] = ""
    elif form == REASONING_PRESENT:
        own = message.get("reasoning_content")
        out["reasoning_content"] = own if isinstance(own, str) and own.strip() else STAND_IN_REASONING
    return out
