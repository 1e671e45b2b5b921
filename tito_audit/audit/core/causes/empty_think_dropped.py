"""``empty-think-dropped``: a turn without reasoning is in the buffer with its empty reasoning block (the model
closed the block at once, or its generation prompt wrote it closed), and history renders that turn without the block
or with the block altered.

Detected on a text divergence (:func:`detect`): an empty reasoning block of a known tag family (:data:`EMPTY_THINK`)
starts at the divergence in the earlier text and the later text does not repeat it there; the rollout also names it
directly when the divergence lies where the model's empty block was (``tito_audit.audit.checks.rollout``).

Confirmed from the definition, with the template's own block (learnt by rendering a marker as an answer's
reasoning), not the detector's tag list: the assistant turn at the divergence carries no reasoning text, the earlier
render writes that template's opener and closer with only whitespace between them where the two renders part, and
the later render does not write the same text there (the renders may part in the markup that opens the block, as
harmony's channel name before its ``<|message|>``, but not across a stop token).
"""

from __future__ import annotations

import re

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.divergence import Divergence
from tito_audit.audit.core.causes.interface import Cause
from tito_audit.conversations.conversation import ASSISTANT

NAME = "empty-think-dropped"
LINE = "The model closed its reasoning block at once, and history drops or alters that empty block."
FIXED = "keep the empty think block"
UNFIXED = "the empty think block is dropped by a construct no fix here edits"

OPENING_MARKUP = 32
"""How many characters before the empty block the renders may part and the block still be what they part on (the
channel name and tags that open it)."""

EMPTY_THINK = re.compile(
    r"<(think|thinking|seed:think|reasoning)>\s*</\1>"
    r"|<\|channel\|>analysis<\|message\|>\s*<\|end\|>"  # harmony (gpt-oss): an empty analysis message
)


def detect(divergence: Divergence) -> bool:
    earlier, index = divergence.earlier, divergence.index
    think = EMPTY_THINK.search(earlier, max(0, index - 16))
    if think is None or think.start() > index + 2:
        return False
    return not divergence.later.startswith(think.group(0), think.start())


def confirm(case: Case) -> Confirmation:
    """The turn carries no reasoning, and the earlier render's empty block (the template's tags) at the divergence is
    not written the same way in the later render."""
    if case.reasoning is None:
        return Confirmation(NAME, False, "the template writes no reasoning block")
    failure, index = case.failure, case.index
    turn = failure.message_index if failure.message_role == ASSISTANT else case.assistant_before(failure.turn)
    if turn is None:
        return Confirmation(NAME, False, "no assistant turn before the divergence")
    reasoning = case.messages[turn].get("reasoning_content")
    if isinstance(reasoning, str) and reasoning.strip():
        return Confirmation(NAME, False, f"message {turn} carries reasoning: the model did not close its block at once")
    opener, closer = case.reasoning.opener, case.reasoning.closer
    empty = re.compile(re.escape(opener) + r"\s*" + re.escape(closer))
    earlier, later = case.earlier, case.later
    for block in empty.finditer(earlier):
        opening = earlier[index : block.start()]
        before = index <= block.start() <= index + OPENING_MARKUP and not any(
            s and s in opening for s in case.stop_texts
        )
        at = before or block.start() - 2 <= index <= block.end()
        if at and later[block.start() : block.end()] != block.group(0):
            return Confirmation(
                NAME,
                True,
                f"message {turn} has no reasoning; earlier writes {block.group(0)!r} at character {block.start()}, "
                f"later {later[block.start() : block.end()]!r}",
            )
    return Confirmation(NAME, False, f"no empty {opener}…{closer} block where the renders part (character {index})")


CAUSE = Cause(NAME, LINE, confirm, fixed=FIXED, unfixed=UNFIXED)
