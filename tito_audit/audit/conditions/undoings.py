"""Each condition undone (docs/contract.md, Verdicts: "Conditions"): the same conversation with one departure from the
plain loop put back, or one form the model writes written otherwise, so that a failing step can be walked again and
seen to hold (or not) without it.

One function per condition a step can be tagged with (:mod:`tito_audit.audit.conditions.step_conditions`):

- **shapes harnesses send**: tool results named after their calls, in the order of the calls, every call under an id of
  its own, a ``system`` message where a ``developer`` one led, a user message between two assistant turns that ran
  back to back (the only undoing that moves messages: :class:`Undone` maps the old indices to the new);
- **the rare form of a habit**: the call turn written with the habit (reasoning before the call);
- **forms the model writes**: a turn's reasoning in another form its prompt admits (reasoning given where the model
  closed the block at once or wrote none, dropped where it reasoned), and call turns without text before their
  calls.

A condition a conversation does not show undoes to nothing (None): no step of it can hold without it.

>>> from tito_audit.conversations.conversation import Conversation
>>> talk = Conversation("c", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "A"},
...                           {"role": "assistant", "content": "B"}])
>>> undone = undo(talk, [tag(SHAPE, BACK_TO_BACK)], TurnForms({}, {}))
>>> [m["role"] for m in undone.conversation.messages], undone.index(2)
(['user', 'assistant', 'user', 'assistant'], 3)
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tito_audit.audit.conditions.step_conditions import (
    BACK_TO_BACK,
    FORM,
    RARE_FORM,
    REASONING_WORDS,
    SETTING,
    SHAPE,
    SHAPE_WORDS,
    TEXT_BEFORE_CALL,
    kind_of,
    tag,
)
from tito_audit.conversations.conversation import ASSISTANT, SYSTEM, TOOL, USER, Conversation, Message
from tito_audit.conversations.generate import CALL_IDS, LEAD, RESULT_NAMES, RESULT_ORDER
from tito_audit.conversations.reasoning_forms import (
    REALIZABLE,
    REASONING_ABSENT,
    REASONING_EMPTY,
    REASONING_PRESENT,
    REASONING_SENT_BACK_WITHOUT,
    UNKNOWN,
    with_reasoning_form,
)

BETWEEN_TURNS = "Go on."
"""The user message put between two assistant turns that ran back to back."""


@dataclass(frozen=True)
class TurnForms:
    """What undoing a reasoning form reads about the walked conversation: each assistant turn's audited form and the
    state its generation prompt left the reasoning block in (:mod:`tito_audit.audit.realization.realize`)."""

    forms: dict[int, str]
    states: dict[int, str]


@dataclass
class Undone:
    """A conversation with conditions undone, and where its messages moved: ``inserted`` holds the old indices before
    which a message was put."""

    conversation: Conversation
    inserted: list[int] = field(default_factory=list)

    def index(self, old: int) -> int:
        """The index, in the undone conversation, of the message at ``old`` (or of the end, ``len(messages)``)."""
        return old + bisect.bisect_right(self.inserted, old)


Messages = list[Message]
Undoing = Callable[[Messages, TurnForms], "Messages | None"]
"""Messages (a fresh list; messages changed are copies) with one condition undone; None when they do not show it."""


def _names_kept(messages: Messages, _: TurnForms) -> Messages | None:
    """Every tool result named after the call it answers (the nearest earlier call with its id)."""
    out, changed, names = list(messages), False, {}
    for index, message in enumerate(messages):
        for call in message.get("tool_calls") or []:
            names[call.get("id")] = (call.get("function") or {}).get("name")
        name = names.get(message.get("tool_call_id"))
        if message.get("role") == TOOL and "name" not in message and name:
            out[index], changed = {**message, "name": name}, True
    return out if changed else None


def _results_in_call_order(messages: Messages, _: TurnForms) -> Messages | None:
    """The results after each call turn in the order of its calls (results of no call of that turn keep their place
    after them)."""
    out, index = list(messages), 0
    while index < len(messages):
        calls = [call.get("id") for call in messages[index].get("tool_calls") or []]
        end = index + 1
        while end < len(messages) and messages[end].get("role") == TOOL:
            end += 1
        if calls and end > index + 1:
            run = messages[index + 1 : end]
            out[index + 1 : end] = sorted(
                run, key=lambda m: calls.index(m.get("tool_call_id")) if m.get("tool_call_id") in calls else len(calls)
            )
        index = end if end > index + 1 else index + 1
    return out if out != messages else None


_ID_CHARACTERS = ("0123456789", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _fresh_id(used: set[str], reused: str) -> str:
    """``reused`` with its last character changed within its class (digit, lower, upper), so that the id keeps its
    form (``call_`` and 24 alphanumerics, nine alphanumerics) and no earlier call has it."""
    last = reused[-1:] or "0"
    alphabet = next((chars for chars in _ID_CHARACTERS if last in chars), _ID_CHARACTERS[0])
    for character in alphabet:
        candidate = reused[:-1] + character
        if candidate not in used:
            return candidate
    return reused + "0"


def _fresh_ids(messages: Messages, _: TurnForms) -> Messages | None:
    """Every call under an id no earlier turn used, with the results that answer it after its turn."""
    out, used, changed = list(messages), set[str](), False
    for index, message in enumerate(messages):
        calls = message.get("tool_calls") or []
        renamed = {}
        for call in calls:
            call_id = call.get("id")
            if isinstance(call_id, str) and call_id in used:
                renamed[call_id] = _fresh_id(used, call_id)
        used.update(call.get("id") for call in calls if isinstance(call.get("id"), str))
        if not renamed:
            continue
        used.update(renamed.values())
        out[index] = {**message, "tool_calls": [_with_id(call, renamed) for call in calls]}
        after = index + 1
        while after < len(messages) and messages[after].get("role") != ASSISTANT:
            answered = messages[after].get("tool_call_id")
            if messages[after].get("role") == TOOL and answered in renamed:
                out[after] = {**messages[after], "tool_call_id": renamed[answered]}
            after += 1
        changed = True
    return out if changed else None


def _with_id(call: dict, renamed: dict[str, str]) -> dict:
    call_id = call.get("id")
    return {**call, "id": renamed[call_id]} if call_id in renamed else call


def _system_lead(messages: Messages, _: TurnForms) -> Messages | None:
    """A ``system`` message where a ``developer`` one leads."""
    if not messages or messages[0].get("role") != "developer":
        return None
    return [{**messages[0], "role": SYSTEM}, *messages[1:]]


def _with_habit(messages: Messages, _: TurnForms) -> Messages | None:
    """Call turns with nothing before their calls written with the habit: reasoning first."""
    out, changed = list(messages), False
    for index, message in enumerate(messages):
        bare = not message.get("content") and not any(message.get(f) for f in ("reasoning_content", "reasoning"))
        if message.get("role") == ASSISTANT and message.get("tool_calls") and bare:
            out[index], changed = with_reasoning_form(message, REASONING_PRESENT), True
    return out if changed else None


def _calls_without_text(messages: Messages, _: TurnForms) -> Messages | None:
    """Call turns with no text before their calls (their content empty)."""
    out, changed = list(messages), False
    for index, message in enumerate(messages):
        if message.get("tool_calls") and has_text(message):
            out[index], changed = {**message, "content": ""}, True
    return out if changed else None


def has_text(message: Message) -> bool:
    content = message.get("content")
    return isinstance(content, str) and bool(content.strip())


OTHERWISE = (REASONING_PRESENT, REASONING_ABSENT, REASONING_EMPTY)
"""The form a turn's reasoning is undone to: the first of these its prompt admits that is not its own (a model that
reasons, where it closed the block at once or wrote none; none where it reasoned)."""


def _reasoning_otherwise(form: str) -> Undoing:
    """Turns audited in reasoning ``form`` written in the first other form of :data:`OTHERWISE` their prompt admits
    (an empty block the harness sent back absent counts as the empty form)."""
    own = REASONING_EMPTY if form == REASONING_SENT_BACK_WITHOUT else form

    def undo(messages: Messages, turns: TurnForms) -> Messages | None:
        out, changed = list(messages), False
        for index, audited in turns.forms.items():
            if audited != form or index >= len(messages):
                continue
            state = turns.states.get(index, UNKNOWN)  # unknown: the probe found no block, every form is realizable
            other = next((f for f in OTHERWISE if f != own and f in REALIZABLE[state]), "")
            if other:
                out[index], changed = with_reasoning_form(messages[index], other), True
        return out if changed else None

    return undo


def _turns_apart(messages: Messages) -> tuple[Messages, list[int]] | None:
    """A user message between every two assistant turns that run back to back, and the old indices it was put
    before."""
    inserted = [
        index
        for index in range(1, len(messages))
        if messages[index].get("role") == ASSISTANT and messages[index - 1].get("role") == ASSISTANT
    ]
    if not inserted:
        return None
    out: Messages = []
    for index, message in enumerate(messages):
        if index in inserted:
            out.append({"role": USER, "content": BETWEEN_TURNS})
        out.append(message)
    return out, inserted


UNDOINGS: dict[str, Undoing] = {
    tag(SHAPE, SHAPE_WORDS[(RESULT_NAMES, "absent")]): _names_kept,
    tag(SHAPE, SHAPE_WORDS[(RESULT_ORDER, "reversed")]): _results_in_call_order,
    tag(SHAPE, SHAPE_WORDS[(CALL_IDS, "reused")]): _fresh_ids,
    tag(SHAPE, SHAPE_WORDS[(LEAD, "developer")]): _system_lead,
    tag(FORM, TEXT_BEFORE_CALL): _calls_without_text,
    **{tag(FORM, words): _reasoning_otherwise(form) for form, words in REASONING_WORDS.items()},
}
"""Each condition that keeps the messages in place, undone; back to back (:func:`_turns_apart`) and the rare form of a
habit (any words: :func:`_with_habit`) besides."""


REASONING_GIVEN = "the turn written with reasoning"
UNDONE_AS: dict[str, str] = {
    SHAPE_WORDS[(RESULT_NAMES, "absent")]: "each tool result named after the call it answers",
    SHAPE_WORDS[(RESULT_ORDER, "reversed")]: "the tool results in the order of the calls",
    SHAPE_WORDS[(CALL_IDS, "reused")]: "every call under an id no earlier call had",
    SHAPE_WORDS[(LEAD, "developer")]: "a system message leading instead",
    BACK_TO_BACK: "a user message between the two assistant turns",
    REASONING_WORDS[REASONING_PRESENT]: (
        "the turn written without reasoning (with the block closed at once where the prompt opens it)"
    ),
    REASONING_WORDS[REASONING_ABSENT]: REASONING_GIVEN,
    REASONING_WORDS[REASONING_EMPTY]: REASONING_GIVEN,
    REASONING_WORDS[REASONING_SENT_BACK_WITHOUT]: REASONING_GIVEN,
    TEXT_BEFORE_CALL: "the call turn written without text before its calls",
    RARE_FORM: "the call turn written with the habit (reasoning before the call)",
    SETTING: "the same step under the default setting",
}
"""What each condition is undone to, in the contract's words (docs/contract.md "Undoing a condition"); a rare form
and a setting by their kind. A model's own layout has no undoing: its model writes nothing else."""


def identical(a: Any, b: Any) -> bool:
    """The same JSON value written the same way: the same type (``2500`` is not ``2500.0``, ``True`` not ``1``), and
    objects with their keys in the same order (Python's ``==`` takes ``2500 == 2500.0``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(identical(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def shared_prefix(messages: Sequence[Message], others: Sequence[Message]) -> int:
    """How many leading messages ``messages`` and ``others`` have identical."""
    return next(
        (n for n, (a, b) in enumerate(zip(messages, others, strict=False)) if not identical(a, b)),
        min(len(messages), len(others)),
    )


def can_undo(condition: str) -> bool:
    """Whether ``condition`` has an undoing (a model's own layout has none: its model writes nothing else)."""
    return condition in UNDOINGS or condition == tag(SHAPE, BACK_TO_BACK) or kind_of(condition) == RARE_FORM


def undo(conversation: Conversation, conditions: Sequence[str], turns: TurnForms) -> Undone | None:
    """``conversation`` with every one of ``conditions`` undone (None when it shows none of them)."""
    messages, changed = list(conversation.messages), False
    for condition in conditions:
        undoing = _with_habit if kind_of(condition) == RARE_FORM else UNDOINGS.get(condition)
        found = undoing(messages, turns) if undoing is not None else None
        if found is not None:
            messages, changed = found, True
    inserted: list[int] = []
    if tag(SHAPE, BACK_TO_BACK) in conditions and (apart := _turns_apart(messages)) is not None:
        messages, inserted = apart
        changed = True
    if not changed:
        return None
    return Undone(replace(conversation, messages=messages), inserted)
