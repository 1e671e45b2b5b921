"""``template-error``: the template raised for this conversation.

Detected where a render is refused: the session labels a step the template raised on
(:mod:`tito_audit.session.breaks`), and the audit counts such conversations as refused. Confirmed by rendering the
conversation again: it raises.
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.interface import Cause
from tito_audit.model.render import RenderError

NAME = "template-error"
LINE = "The template raised an error for this conversation."


def confirm(case: Case) -> Confirmation:
    """Rendering the conversation up to the failing message (with the generation prompt) raises."""
    upto = min(case.failure.turn, len(case.messages))
    try:
        case.renderer.text(case.messages[:upto], case.tools, True)
    except RenderError as exc:
        return Confirmation(NAME, True, f"the template raises: {exc}")
    return Confirmation(NAME, False, f"render(M[:{upto}], add_generation_prompt=True) renders")


CAUSE = Cause(NAME, LINE, confirm)
