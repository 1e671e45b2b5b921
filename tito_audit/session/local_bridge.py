"""The bridge of one step from a short local render: what ``bridge="auto"`` appends without rendering the history.

The template renders a short conversation instead of the whole one: a stand-in user message, then the step's own
assistant message (the one the completion was parsed into), then the messages the step appends. The text of that
render after the stand-in's generation prompt must begin with the completion exactly as it reads in the buffer (the
template writes this very turn as it was sampled); what follows is the bridge's text. Its ids come from tokenizing
the stop token the completion ended on followed by that text, and they are taken only when the stop token comes back
as its own first id: the tokenizer cuts text at added tokens, so what follows the stop token in the whole prompt is
tokenized exactly as it is here, and nothing merges across the join (the seam check, against the buffer's last
token). Anything else gives None, and the session renders the whole conversation for that step.

Example (a ChatML template; ``piece`` is the completion's text)::

    render([user*, assistant, tool], gp=True) = "<|im_start|>user\\nUse the tools.<|im_end|>\\n<|im_start|>assistant\\n"
                                               + piece + "\\n<|im_start|>tool\\n42<|im_end|>\\n<|im_start|>assistant\\n"
    bridge = ids("<|im_end|>" + "\\n<|im_start|>tool\\n42<|im_end|>\\n<|im_start|>assistant\\n")[1:]

That this equals the template's own bridge after the real history is what :mod:`tito_audit.session.proof` proves
for the template (and what the session's full check confirms at ``finish``); the local render itself checks the
completion against the template's writing of its own message at every step.
"""

from __future__ import annotations

from collections.abc import Iterable

from tito_audit.conversations.conversation import USER, Message
from tito_audit.model.render import Renderer
from tito_audit.model.tokens import TokenCodec

STAND_IN_USER: Message = {"role": USER, "content": "Use the tools."}
"""The user message the local render starts with (the audit's stand-in conversation starts with it too). One object
for the whole process: the renderer prepares it once."""


def local_bridge(
    renderer: Renderer,
    codec: TokenCodec,
    tools: list[dict] | None,
    assistant: Message,
    appended: list[Message],
    completion_text: str,
    stop_id: int,
    head: str | None = None,
) -> tuple[list[int], str] | None:
    """The bridge after a completion that ended on ``stop_id`` and reads ``completion_text``, from the local render
    (see the module docstring): its ids and its text; None when the template refuses the short conversation, writes
    the assistant message otherwise than it was sampled, or the seam does not hold. ``head`` is
    :func:`stand_in_prompt` for these tools when the caller keeps it (it is rendered otherwise)."""
    messages = [STAND_IN_USER, assistant, *appended]
    keys = [(len(messages), True)] if head is not None else [(1, True), (len(messages), True)]
    texts = renderer.texts(messages, tools, keys)
    head = head if head is not None else texts[(1, True)]
    whole = texts[(len(messages), True)]
    if head is None or whole is None or not whole.startswith(head) or not whole.startswith(completion_text, len(head)):
        return None
    text = whole[len(head) + len(completion_text) :]
    ids = ids_after_stop(codec, stop_id, text)
    return (ids, text) if ids is not None else None


def stand_in_prompt(renderer: Renderer, tools: list[dict] | None) -> str | None:
    """The local render's generation prompt after the stand-in user message (None when the template refuses it)."""
    return renderer.texts([STAND_IN_USER], tools, [(1, True)])[(1, True)]


def ids_after_stop(codec: TokenCodec, stop_id: int, text: str) -> list[int] | None:
    """The ids ``text`` gets right after the stop token ``stop_id``; None when the stop token does not come back as
    its own first id (a longer added token or a merge would cross the join)."""
    ids = codec.encode(codec.decode([stop_id]) + text)
    if not ids or ids[0] != stop_id:
        return None
    return ids[1:]


def hard_stops(codec: TokenCodec, stop_ids: Iterable[int]) -> frozenset[int]:
    """The stop ids at which the tokenizer starts afresh: the stop token is an added token (matched before anything
    else is tokenized) and no other added token can match across its start (one that contains it, or ends with the
    beginning of it), so what comes before it never changes how it and what follows are tokenized."""
    added = codec.added_texts
    hard = []
    for stop_id in stop_ids:
        text = codec.decode([stop_id])
        if not text or text not in added or codec.encode(text) != [stop_id]:
            continue
        if not any(_crosses(other, text) for other in added if other != text):
            hard.append(stop_id)
    return frozenset(hard)


def _crosses(other: str, stop: str) -> bool:
    """Whether a match of the added token ``other`` can begin before ``stop`` and end inside or after it.

    >>> _crosses("a<eos>", "<eos>"), _crosses("x<e", "<eos>"), _crosses("<eos>x", "<eos>"), _crosses("<bos>", "<eos>")
    (True, True, False, False)
    """
    if stop in other[1:]:
        return True
    return any(len(other) > size and other.endswith(stop[:size]) for size in range(1, len(stop)))
