"""The labels of a text divergence between an earlier and a later text: each text cause's detector, asked in order.

1. The evidence rules, which hold whoever owns the divergence: ``reasoning-pruned`` (a message's reasoning near the
   divergence is gone), ``empty-think-dropped`` (an empty reasoning block there is gone); a label the caller
   established (``known``: ``gen-prompt-mismatch``, or ``empty-think-dropped`` where the model's empty block was)
   comes first.
2. A tool, user or system message whose rendering changed, when no evidence rule fired: ``closing-rewritten`` when
   what closes it changed, else ``content-rewritten``. Nothing more is asked.
3. The stop token where the engine stopped: ``stop-token-swap``, ``tail-after-stop``.
4. When no rule explains the divergence: ``tool-call-reformatted`` when its detector says so, else
   ``content-rewritten``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tito_audit.audit.core.causes import (
    closing_rewritten,
    content_rewritten,
    empty_think_dropped,
    reasoning_pruned,
    stop_token_swap,
    tail_after_stop,
    tool_call_reformatted,
)
from tito_audit.audit.core.causes.divergence import Divergence, MessageRef, TextContext
from tito_audit.conversations.conversation import ASSISTANT


def classify_text_divergence(
    earlier: str,
    later: str,
    index: int,
    context: TextContext,
    known: Sequence[str] = (),
    owner: MessageRef | None = None,
) -> list[str]:
    """Labels for ``earlier`` not being a prefix of ``later``; ``index`` is their first differing character.

    ``known`` are labels the caller established; they come first. ``owner`` is the message whose rendering changed
    (see :func:`tito_audit.audit.realization.realize.owner_of`).
    """
    divergence = Divergence(earlier, later, index, context, owner)
    labels: list[str] = list(known)
    if reasoning_pruned.detect(divergence):
        labels.append(reasoning_pruned.NAME)
    if empty_think_dropped.detect(divergence) and empty_think_dropped.NAME not in labels:
        labels.append(empty_think_dropped.NAME)
    if owner is not None and owner.role != ASSISTANT:
        if len(labels) == len(known):
            closing = closing_rewritten.detect(divergence)
            labels.append(closing_rewritten.NAME if closing else content_rewritten.NAME)
        return labels
    if stop_token_swap.detect(divergence):
        labels.append(stop_token_swap.NAME)
    if tail_after_stop.detect(divergence):
        labels.append(tail_after_stop.NAME)
    if not labels:
        reformatted = tool_call_reformatted.detect(divergence)
        labels.append(tool_call_reformatted.NAME if reformatted else content_rewritten.NAME)
    return labels
