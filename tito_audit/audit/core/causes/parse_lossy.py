"""``parse-lossy``: the engine's parser does not give back the message the template rendered (the content's
whitespace, the reasoning's boundary, re-serialized arguments, a call lost, an id the template refuses), and the next
prompt rendered from the parsed message no longer continues the buffer. A lost call is this failure even where the
prefix holds (the call re-rendered as content can keep it; the harness never got its call).

Detected by the parse step against its control (:mod:`tito_audit.audit.parse_step.parsed_rollout`: the same step with
the template's own message does not fail), with the field the parse changed. Confirmed with the change undone: the
next prompt rendered from the template's own messages renders, and, where the failure holds text, continues the
buffer where the prompt rendered from the parsed message parts from it.
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.interface import Cause
from tito_audit.audit.core.diff import WINDOW_CHARS
from tito_audit.model.render import RenderError

NAME = "parse-lossy"
LINE = (
    "The engine's parser does not give back the message the template rendered (content whitespace, reasoning "
    "boundary, arguments re-serialized, a call lost, an id refused), and the next prompt rendered from its message "
    "no longer continues the buffer."
)


def confirm(case: Case) -> Confirmation:
    """The control prompt (the template's own messages) renders and continues the buffer where the parsed one parts."""
    failure = case.failure
    try:
        control = case.renderer.text(case.messages[: failure.turn], case.tools, True)
    except RenderError as exc:
        return Confirmation(NAME, False, f"the template refuses its own messages too: {exc}")
    if failure.char_index is None or not failure.expected_text:
        return Confirmation(NAME, True, f"the template's own messages render ({failure.detail or failure.aspect})")
    control = case.codec.normalize(control)
    start = max(0, failure.char_index - WINDOW_CHARS)
    buffer = failure.expected_text
    continued = control[start : start + len(buffer)] == buffer
    parted = failure.actual_text[: len(buffer)] != buffer
    return Confirmation(
        NAME,
        continued and parted,
        "the prompt from the template's own message continues the buffer; the one from the parsed message does not"
        if continued and parted
        else "the prompt from the template's own message parts from the buffer too"
        if not continued
        else "the prompt from the parsed message continues the buffer",
    )


CAUSE = Cause(NAME, LINE, confirm)
