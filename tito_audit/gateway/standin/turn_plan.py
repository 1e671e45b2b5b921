"""What the stand-in model means to write in one turn: the assistant message, before the template lays it out.

A turn is drawn from what the prompt shows (the tools it declares, how many tool results it holds already) and from
what the family's model does by habit (:class:`Habits`):

- **calls first, then an answer**: while fewer than :data:`CALLS_BEFORE_ANSWER` tool results are in the prompt, the
  model calls a tool (:mod:`.tool_use`); then it answers, or (one time in four) looks once more, until
  :data:`MOST_CALLS`;
- **parallel calls**: one call turn in five calls two tools at once;
- **reasoning**: a family whose engine has a reasoning parser reasons: mostly with text, sometimes closing the block at
  once (:data:`EMPTY_REASONING_SHARE`), sometimes not at all; the prompt decides which of these is realizable (the
  audit's realization swaps a form the prompt does not admit for the nearest one that it does);
- **text before a call**: where the registry records that the family writes text before each call (gpt-oss's
  analysis message), that text is its reasoning, absent only for the registry's rare share; elsewhere a call turn
  opens with a sentence of content at :data:`TEXT_BEFORE_CALL_SHARE` (our share: no source gives one);
- **call ids** in the form the family's model writes them (:mod:`tito_audit.conversations.call_ids`).

The answer is text, or a call to the tool the harness takes answers through (smolagents' ``final_answer``). A prompt
that declares no tool (a title asked on the side) gets a short answer. What the prompt asks in words
(:mod:`.instructions`) comes first: a summary of the conversation (a compaction) is written as text, whatever tools
are declared; text only is an answer; a prompt that asks for commands in a fenced block gets them there, then the
command that finishes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tito_audit.conversations.call_ids import OPENAI, CallIdForm
from tito_audit.conversations.conversation import ASSISTANT, Message
from tito_audit.gateway.standin.instructions import Asked, fenced, summary_text
from tito_audit.gateway.standin.tool_use import (
    READ_ONLY_COMMANDS,
    answer_arguments,
    answer_tool,
    arguments_for,
    callable_tools,
    pick_tool,
)

CALLS_BEFORE_ANSWER = 3
MOST_CALLS = 6
LOOK_AGAIN_SHARE = 0.25
PARALLEL_SHARE = 0.2
EMPTY_REASONING_SHARE = 0.15
NO_REASONING_SHARE = 0.1
TEXT_BEFORE_CALL_SHARE = 0.3

REASONING_BEFORE_CALL = (
    "The user wants to know what is in this folder; I will look at the files first.",
    "I should read the files before answering.",
    "Let me check the folder with a command that only reads.",
)
REASONING_BEFORE_ANSWER = ("I have what I need to answer now.", "The files tell me enough; time to answer.")
TEXTS_BEFORE_CALL = ("Let me look at the files first.", "I'll check the folder.", "Let me read that.")
ANSWERS = (
    "The folder holds README.md and notes.txt; the notes list two TODO items.",
    "I looked around: README.md describes the project and notes.txt has the open TODOs.",
    "Done. README.md and notes.txt are the only files here.",
)
SIDE_ANSWERS = ("Listing the folder", "Reading the project notes", "A look at the files")
FINISHING = "I have what I need: the task is done."


@dataclass(frozen=True)
class Habits:
    """What the family's model writes by habit."""

    reasons: bool
    """The model reasons (its engine documents a reasoning parser for it)."""
    reasoning_before_calls: float | None = None
    """Where the registry records text before each call written as reasoning: the share of call turns without it."""
    call_ids: CallIdForm = OPENAI


def plan_turn(
    rng: random.Random,
    tools: Sequence[dict[str, Any]],
    answered: int,
    calls_written: int,
    habits: Habits,
    asked: Asked | None = None,
) -> Message:
    """The message of one turn (see the module docstring); ``answered``: the tool results in the prompt (and the
    commands a summary in it says were run); ``calls_written``: the calls in it (the next call's index, for ids that
    count); ``asked``: what the prompt asks in words."""
    asked = asked or Asked()
    message: Message = {"role": ASSISTANT}
    if asked.summary:
        message["content"] = summary_text(answered, asked.summary_tags)
        return _with_reasoning(rng, habits, False, message)
    usable = [] if asked.no_calls else callable_tools(tools)
    fenced_actions = asked.fence is not None and not tools and not asked.no_calls

    def looks() -> bool:
        return answered < CALLS_BEFORE_ANSWER or (answered < MOST_CALLS and rng.random() < LOOK_AGAIN_SHARE)

    calling = bool(usable) and looks()
    if calling:
        count = 2 if rng.random() < PARALLEL_SHARE else 1
        chosen = [pick_tool(rng, usable) for _ in range(count)]
        message["tool_calls"] = [call(rng, t, calls_written + n, habits.call_ids) for n, t in enumerate(chosen)]
        before_call = habits.reasoning_before_calls is None and rng.random() < TEXT_BEFORE_CALL_SHARE
        message["content"] = rng.choice(TEXTS_BEFORE_CALL) if before_call else ""
    elif fenced_actions and asked.fence is not None:  # actions as text, in the fence the instructions show
        if looks():
            message["content"] = fenced(asked.fence, rng.choice(READ_ONLY_COMMANDS), rng.choice(REASONING_BEFORE_CALL))
        elif asked.finish is not None:
            message["content"] = fenced(asked.fence, asked.finish, FINISHING)
        else:
            message["content"] = rng.choice(ANSWERS)
    elif not asked.no_calls and (through := answer_tool(tools)) is not None:  # the harness takes answers through a tool
        answer = rng.choice(ANSWERS)
        name = through["function"]["name"]
        arguments = answer_arguments(rng, through, answer)
        message["tool_calls"] = [
            {
                "id": habits.call_ids.make(rng, name, calls_written),
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ]
        message["content"] = ""
    else:
        message["content"] = rng.choice(ANSWERS if tools else SIDE_ANSWERS)
    return _with_reasoning(rng, habits, calling, message)


def _with_reasoning(rng: random.Random, habits: Habits, calling: bool, message: Message) -> Message:
    reasoning = _reasoning(rng, habits, calling)
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return message


def _reasoning(rng: random.Random, habits: Habits, calling: bool) -> str | None:
    """The turn's reasoning: None (absent), ``""`` (the block closed at once) or text."""
    if not habits.reasons:
        return None
    if calling and habits.reasoning_before_calls is not None:
        return None if rng.random() < habits.reasoning_before_calls else rng.choice(REASONING_BEFORE_CALL)
    draw = rng.random()
    if draw < NO_REASONING_SHARE:
        return None
    if draw < NO_REASONING_SHARE + EMPTY_REASONING_SHARE:
        return ""
    return rng.choice(REASONING_BEFORE_CALL if calling else REASONING_BEFORE_ANSWER)


def call(rng: random.Random, declared: dict[str, Any], index: int, ids: CallIdForm) -> dict[str, Any]:
    name = declared["function"]["name"]
    return {
        "id": ids.make(rng, name, index),
        "type": "function",
        "function": {"name": name, "arguments": arguments_for(rng, declared)},
    }


def without_parallel_calls(message: Message) -> Message:
    """``message`` with its first call only (a template that refuses two calls in one turn)."""
    return {**message, "tool_calls": message["tool_calls"][:1]}


def as_answer(message: Message) -> Message:
    """``message`` as a final answer (a template that refuses or drops every call it could write)."""
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    out["content"] = ANSWERS[0]
    return out
