"""Check 2, append (docs/contract.md "The checks"): appending one message keeps the render a prefix, in text and tokens.

For each index ``k`` of a conversation: is ``render(M[:k])`` a text prefix of ``render(M[:k+1])``, and
``ids(M[:k])`` a token prefix of ``ids(M[:k+1])``? Reported per appended role and the role it follows
(``tool after tool``, ``user after assistant``, ...). This is the message-level property public audits use.

Example: a template that closes a tool result with ``<|im_end|>`` when it is last and ``\\n<|im_end|>`` once
anything follows fails ``tool after tool``::

    render(M[:k])   = "...</tool_response><|im_end|>"
    render(M[:k+1]) = "...</tool_response>\\n<|im_end|><|im_start|>..."   # closing-rewritten, message k-1
"""

from __future__ import annotations

from collections.abc import Callable

from tito_audit.audit.checks.interface import Check
from tito_audit.audit.checks.outcome import FAILED, PASSED, REFUSED, Outcome
from tito_audit.audit.checks.records import text_failure
from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.core.causes import bpe_seam, classify_text_divergence
from tito_audit.audit.core.diff import common_prefix_length, first_difference
from tito_audit.audit.realization.realize import owner_of

NAME = "append"


def _is(index: int) -> Callable[[int], bool]:
    """Whether a message index is ``index``."""
    return lambda other: other == index


def check(context: RolloutContext, outcome: Outcome) -> None:
    messages = context.conversation.messages
    context.render_histories(range(1, len(messages) + 1))
    for k in range(1, len(messages)):
        role = str(messages[k].get("role"))
        category = f"{role} after {messages[k - 1].get('role')}"
        before, after = context.history(k), context.history(k + 1)
        if before is None or after is None:
            outcome.count(NAME, category, REFUSED)
            continue
        char_diff = first_difference(before.text, after.text)
        token_diff = None if context.setup.text_only else first_difference(before.ids, after.ids)
        if char_diff is None and token_diff is None:
            outcome.count(NAME, category, PASSED)
            continue
        outcome.count(NAME, category, FAILED)
        owner = None
        if char_diff is not None:
            owner = owner_of(before.text, char_diff, context.history_text, k, _is(k - 1), messages, after.text)
            causes = classify_text_divergence(before.text, after.text, char_diff, context.text, owner=owner)
            aspect = "text"
        else:
            causes, aspect = [bpe_seam.NAME], "tokens"
        token_index = token_diff if token_diff is not None else common_prefix_length(before.ids, after.ids)
        failure = text_failure(
            context.setup.decode_one,
            NAME,
            aspect,
            category,
            context.conversation,
            k,
            [str(messages[k - 1].get("role")), role],
            causes,
            before,
            after,
            char_diff,
            token_index,
            owner,
        )
        outcome.fail((0, k, 0, 0), failure)


CHECK = Check(NAME, check)
