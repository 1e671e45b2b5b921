"""``frozen-date``: the template reads a ``frozen_date`` keyword argument instead of today's date.

``strftime_now(...)`` makes two renders of the same conversation differ when the date changes between them
(``nondeterministic-template``). The fix replaces each call by ``frozen_date`` when it is given, and by the
date the audit rendered with otherwise, so renders agree:

    {{ strftime_now('%Y-%m-%d') }}   ->   {{ (frozen_date if frozen_date is defined else "2026-01-15") }}

What changes for the model: the date in the prompt is the one passed as ``frozen_date`` (pass today's date
once per rollout).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tito_audit.audit.core.causes import nondeterministic_template
from tito_audit.conversations.conversation import Message
from tito_audit.repair.fixes.interface import Fix
from tito_audit.repair.fixes.patterns import evaluated, find
from tito_audit.repair.fixes.source import Edit, TemplateSource

NAME = "frozen-date"
CAUSES = frozenset({nondeterministic_template.NAME})
CHANGES = "the date comes from a frozen_date argument instead of the clock"
AT_INFERENCE = "pass frozen_date (one date per rollout); without it the prompt shows the audit's date"
SCOPE = "none, with the clock frozen at the date it writes"
"""Which renders the fix may change."""


def edits(source: TemplateSource, clock: datetime) -> list[Edit]:
    tokens = evaluated(source)
    out = []
    for first, _ in find(tokens, ["strftime_now", "("], lambda token: True):
        if first + 3 < len(tokens) and tokens[first + 2].kind == "string" and tokens[first + 3].text == ")":
            fmt = tokens[first + 2].text[1:-1]
            date = clock.strftime(fmt)
            text = f'(frozen_date if frozen_date is defined else "{date}")'
            out.append(Edit(tokens[first].start, tokens[first + 3].end, text, NAME))
    return out


def touches(messages: Sequence[Message], k: int, gp: bool) -> bool:
    """None: with the clock frozen at the date the fix writes as its default, every render is unchanged."""
    return False


FIX = Fix(
    NAME,
    CAUSES,
    CHANGES,
    AT_INFERENCE,
    SCOPE,
    find_edits=lambda source, context: edits(source, context.clock),
    touches=touches,
)
