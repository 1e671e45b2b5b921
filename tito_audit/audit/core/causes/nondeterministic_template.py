"""``nondeterministic-template``: two renders of the same input differ (a date or randomness in the template).

Detected as a finding beside the verdict (:mod:`tito_audit.audit.findings.nondeterminism`). Confirmed by rendering the
compared render again under another clock: the text changes.
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.interface import Cause
from tito_audit.model.render import ALTERNATE_CLOCK, frozen_clock

NAME = "nondeterministic-template"
LINE = "Two renders of the same input differ (a date or randomness in the template)."
FIXED = "freeze the date"


def confirm(case: Case) -> Confirmation:
    """The later render (or the whole conversation) renders otherwise under another clock."""
    key = case.keys[1] if case.keys else (len(case.messages), False)
    with frozen_clock(case.renderer.model.template_source, ALTERNATE_CLOCK):
        other = case.renderer.text(case.messages[: key[0]], case.tools, key[1])
    return Confirmation(NAME, other != case.texts.get(key), "renders differ under another clock")


CAUSE = Cause(NAME, LINE, confirm, fixed=FIXED)
