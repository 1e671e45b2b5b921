"""What each rollout step was drawn under (docs/contract.md, Verdicts: "Conditions"): tags recorded where the steps are
walked, in the simulated rollout (:mod:`tito_audit.audit.checks.rollout`) and in the rollout with the engine's parser
(:mod:`tito_audit.audit.parse_step.parsed_rollout`); :mod:`tito_audit.audit.conditions.verdict_conditions` sums them
into when a verdict breaks.

A step carries the form the model wrote the turn before it in, and the shapes its conversation was sent in:

- **forms the plain loop has** (``form: …``): the reasoning form of that turn (a model writes each: without
  reasoning, with it, closing the block at once), text before its calls, and, with the parser, the layout the
  family's model writes where it differs from the template's (gpt-oss's harmony: its model writes nothing else);
- **rare forms** (``rare form: …``): what a model writes against its documented habit (a gpt-oss call with no
  analysis message first; the registry's ``model_habits``);
- **shapes harnesses send** (``shape: …``): tool results without ``name``, in another order than the calls, a call
  id reused, a ``developer`` message leading, two assistant turns back to back.

The **plain loop** is the steps with no rare form and no such shape. Each tag is the words a report prints after
"breaks" (``when two assistant turns run back to back``).

>>> messages = [{"role": "user"}, {"role": "assistant"}, {"role": "assistant"}]
>>> tags = step_tags(Conversation("c", messages), 1, 2, "reasoning absent", None)
>>> [(kind_of(t), is_plain(t)) for t in tags], words(tags[1])
([('form', True), ('shape', False)], 'when two assistant turns run back to back')
"""

from __future__ import annotations

from tito_audit.conversations.conversation import ASSISTANT, Conversation, Message
from tito_audit.conversations.generate import CALL_IDS, LEAD, RESULT_NAMES, RESULT_ORDER
from tito_audit.conversations.reasoning_forms import (
    REASONING_ABSENT,
    REASONING_EMPTY,
    REASONING_PRESENT,
    REASONING_SENT_BACK_WITHOUT,
)

FORM, RARE_FORM, SHAPE, SETTING = "form", "rare form", "shape", "setting"
"""Kinds of condition; only the forms belong to the plain loop (a setting is a variant, :mod:`.verdict_conditions`)."""

REASONING_WORDS = {
    REASONING_ABSENT: "after turns without reasoning",
    REASONING_EMPTY: "when the model closes the reasoning block at once",
    REASONING_SENT_BACK_WITHOUT: (
        "when the model closes the reasoning block at once and the harness sends it back absent"
    ),
    REASONING_PRESENT: "after turns with reasoning",
}
SHAPE_WORDS = {
    (RESULT_NAMES, "absent"): "when tool results carry no name",
    (RESULT_ORDER, "reversed"): "when tool results come in another order than the calls",
    (CALL_IDS, "reused"): "when a later turn reuses a call id",
    (LEAD, "developer"): "when a developer message leads the conversation",
}
BACK_TO_BACK = "when two assistant turns run back to back"
TEXT_BEFORE_CALL = "when the model writes text before a call"
"""The form of a call turn with content before its calls (a model's prose: ``Let me look that up.``)."""
REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking")


def tag(kind: str, text: str) -> str:
    return f"{kind}: {text}"


def kind_of(condition: str) -> str:
    return condition.split(": ", 1)[0]


def words(condition: str) -> str:
    return condition.split(": ", 1)[1]


def is_plain(condition: str) -> bool:
    """Whether the plain loop has this condition (a form the model writes), or departs from it."""
    return kind_of(condition) == FORM


def conversation_tags(conversation: Conversation) -> tuple[str, ...]:
    """The shapes harnesses send that ``conversation`` was generated in (its odd forms)."""
    return tuple(tag(SHAPE, text) for (name, form), text in SHAPE_WORDS.items() if conversation.shape.get(name) == form)


def back_to_back(messages: list[Message], turn: int, after: int) -> bool:
    """Whether the step from assistant turn ``turn`` to message ``after`` runs two assistant turns back to back
    (nothing between them), or follows a turn written right after another assistant turn (whose model wrote what
    its template's missing generation prompt would have: GigaChat3's ``assistant<|role_sep|>``)."""
    follows_assistant = turn > 0 and messages[turn - 1].get("role") == ASSISTANT
    return follows_assistant or (after == turn + 1 and after < len(messages))


def turn_tags(message: Message, form: str, rare_form: str | None, own_layout: str | None = None) -> tuple[str, ...]:
    """The forms of the turn before a step: its reasoning form; text before its calls; ``rare_form`` (the registry's
    words) when the model has the habit of text before each call and this call turn has none; the model's own layout
    when it was written in one (``own_layout``: its name)."""
    found = [tag(FORM, REASONING_WORDS.get(form, form))] if form else []
    content = message.get("content")
    if message.get("tool_calls") and isinstance(content, str) and content.strip():
        found.append(tag(FORM, TEXT_BEFORE_CALL))
    if rare_call(message, rare_form):
        found.append(tag(RARE_FORM, f"when {rare_form}"))
    if own_layout is not None:
        found.append(tag(FORM, f"when the model writes its own layout ({own_layout})"))
    return tuple(found)


def rare_call(message: Message, rare_form: str | None) -> bool:
    """Whether ``message`` is a call turn in the rare form of a habit of text before each call (``rare_form``: its
    words, None without the habit): no reasoning and no content before its calls."""
    if rare_form is None or not message.get("tool_calls"):
        return False
    return not message.get("content") and not any(message.get(field) for field in REASONING_FIELDS)


def step_tags(
    conversation: Conversation,
    turn: int,
    after: int,
    form: str,
    rare_form: str | None,
    own_layout: str | None = None,
) -> tuple[str, ...]:
    """Every tag of the step from assistant turn ``turn`` to message ``after`` (the next turn, or the end), sorted:
    one key per set of conditions."""
    messages = conversation.messages
    tags = conversation_tags(conversation) + turn_tags(messages[turn], form, rare_form, own_layout)
    if back_to_back(messages, turn, after):
        tags += (tag(SHAPE, BACK_TO_BACK),)
    return tuple(sorted(set(tags)))
