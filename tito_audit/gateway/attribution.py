"""Who broke the buffer: the one vocabulary the gateway's record uses to say who made a branch, a break or a lost id.

A **maker** is one of four: the harness (it changed the history it sends back), the template (it renders the history
otherwise than the buffer holds it: its cause label says how), the engine's parser (it read the completion into a
message that renders otherwise) or a BPE seam (the tokenizer merges tokens across a join). A harness **action** says
what the harness did to its history, at the message it did it to, in the client's own numbering (``input[5]``,
``messages[3]``). Each action is defined once here; :func:`harness_edit` tells, from the history the session holds
and the one a request sends, which action a request took (:mod:`.branches` names each new branch by it), and
:func:`maker_of` which maker a template cause label belongs to.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tito_audit.audit.core.causes import bpe_seam, noncanonical_split, normalization, parse_lossy, utf8_split

HARNESS = "harness"
TEMPLATE = "template"
PARSER = "parser"
BPE = "bpe"
MAKERS = (HARNESS, TEMPLATE, PARSER, BPE)

PARSER_CAUSES = frozenset({parse_lossy.NAME})
"""Cause labels that name the engine's parser: the message it made of the completion renders otherwise."""
BPE_CAUSES = frozenset({bpe_seam.NAME, noncanonical_split.NAME, utf8_split.NAME, normalization.NAME})
"""Cause labels that name the tokenizer: ids that merge or split otherwise across a join."""


@dataclass(frozen=True)
class Action:
    """One thing a harness does to the history it sends back."""

    name: str
    """The record's word for it (``dropped a turn``)."""
    means: str
    """One sentence: what the harness sent, against what the session held."""


DROPPED_TURN = Action("dropped a turn", "a message the session holds is missing from the history sent back")
AS_TEXT = Action(
    "rewrote an assistant turn as text",
    "an assistant turn's tool calls come back as text (in its content, or in a user message)",
)
REASONING = Action("dropped or trimmed reasoning", "an assistant turn comes back without its reasoning, or with less")
ARGUMENTS = Action("re-serialized arguments", "a tool call's arguments come back as other text of the same JSON value")
CALL_IDS = Action("renamed call ids", "tool calls and their results come back under other call ids")
EDITED = Action(
    "edited a message", "a message comes back with other content (a tool output truncated, a turn reworded)"
)
SUMMARIZED = Action(
    "summarized",
    "earlier turns come back replaced by a summary the harness wrote (the history shorter) or asked for (the answer "
    "to a side request in a message of its own)",
)
TOOLS_OR_SYSTEM = Action("changed tools or system prompt", "the tools or the system prompt differ from the session's")
INJECTED = Action(
    "injected an unsampled turn",
    "an assistant turn the gateway never sampled is in the history (a canned reply, a prefill, a few-shot turn)",
)
SIDE_REQUEST = Action(
    "side request",
    "a request beside the agent's loop (a title, a probe, a compaction's summary) under the same session: it shares "
    "nothing with the loop's history or offers no tools",
)
RESENT = Action("resent a request", "the same history sent again: the answer is sampled again from the same prompt")

ACTIONS = (
    DROPPED_TURN,
    AS_TEXT,
    REASONING,
    ARGUMENTS,
    CALL_IDS,
    EDITED,
    SUMMARIZED,
    TOOLS_OR_SYSTEM,
    INJECTED,
    SIDE_REQUEST,
    RESENT,
)
ABSORBED = (REASONING, ARGUMENTS)
"""Actions the session absorbs: ``--match`` compares neither reasoning nor argument spacing, so the buffer keeps the
sampled ids and no branch is needed."""


def maker_of(cause: str) -> str:
    """The maker a break's cause label belongs to (:data:`PARSER_CAUSES`, :data:`BPE_CAUSES`, else the template)."""
    if cause in PARSER_CAUSES:
        return PARSER
    if cause in BPE_CAUSES:
        return BPE
    return TEMPLATE


def loss_cause(maker: str, what: str) -> str:
    """The key of lost ids in a record's ``trainable.lost``: the maker and what it did (``template: reasoning-pruned``,
    ``harness: resent a request``)."""
    return f"{maker}: {what}"


def made_by_break(causes: Sequence[str]) -> dict[str, Any]:
    """A break's maker, as the record says it: ``{"maker", "cause"}`` (its first cause label)."""
    cause = causes[0] if causes else "unknown"
    return {"maker": maker_of(cause), "cause": cause}


def made_by_harness(action: Action, message: str | None) -> dict[str, Any]:
    """A harness edit as the record says it: ``{"maker": "harness", "action", "message"}`` (the client's name of the
    message it was made at, None when it concerns the whole request)."""
    return {"maker": HARNESS, "action": action.name, "message": message}


Name = Callable[[int], str]
"""What the client calls the request's message at an index (``input[5]``)."""


def harness_edit(
    held: Sequence[dict], sent: Sequence[dict], name: Name, asked: Sequence[str] = ()
) -> tuple[Action, str]:
    """What a harness did when the history it ``sent`` parts from the history the session ``held`` (both as the
    server's matcher keys them, the held one ending with the answer the client was given), and the message it did it
    at in the client's numbering; ``asked`` are the answers the session's side requests were given (a compaction's
    summary among them). The first message that differs decides."""
    index = next((i for i, (a, b) in enumerate(zip(held, sent, strict=False)) if a != b), min(len(held), len(sent)))
    if index == 0 and held and sent and sent[0].get("role") in ("system", "developer"):
        return TOOLS_OR_SYSTEM, name(0)
    if index >= len(sent):
        return DROPPED_TURN, name(max(len(sent) - 1, 0))
    if index >= len(held):
        if sent[index].get("role") == "assistant":
            return INJECTED, name(index)
        return EDITED, name(index)
    was, now = held[index], sent[index]
    where = name(index)
    if was.get("role") == "assistant" and now.get("role") == "assistant":
        return _assistant_edit(was, now), where
    if now.get("role") != "assistant" and _carries_side_answer(now, asked):
        return SUMMARIZED, where
    if len(sent) < len(held) and was.get("role") != now.get("role") and _summary_like(held, sent, index):
        return SUMMARIZED, where
    if index + 1 < len(held) and _same(held[index + 1], now):
        return DROPPED_TURN, where
    if was.get("role") == "assistant" and now.get("role") != "assistant":
        if _calls_as_text(was, now):
            return AS_TEXT, where
        return DROPPED_TURN, where
    if now.get("role") == "assistant":
        return INJECTED, where
    if _renamed_result(was, now):
        return CALL_IDS, where
    return EDITED, where


def _same(one: dict, other: dict) -> bool:
    return _canonical(one) == _canonical(other)


def _canonical(message: dict) -> str:
    return json.dumps(message, sort_keys=True, ensure_ascii=False, default=str)


def _assistant_edit(was: dict, now: dict) -> Action:
    calls_was, calls_now = was.get("tool_calls") or [], now.get("tool_calls") or []
    if calls_was and not calls_now:
        return AS_TEXT if _calls_as_text(was, now) else EDITED
    if (was.get("content") or "") != (now.get("content") or ""):
        return EDITED
    if calls_was and len(calls_was) == len(calls_now):
        plain_was = [{k: v for k, v in c.items() if k != "id"} for c in calls_was]
        plain_now = [{k: v for k, v in c.items() if k != "id"} for c in calls_now]
        if plain_was == plain_now:
            return CALL_IDS
    return EDITED


def _calls_as_text(was: dict, now: dict) -> bool:
    names = [c.get("name") for c in was.get("tool_calls") or []]
    text = text_of(now.get("content"))
    return bool(names) and all(isinstance(n, str) and n in text for n in names)


def carries_answer(answer: dict, message: dict) -> bool:
    """Whether ``message`` (an assistant turn a client sent back, as the matcher keys it) is the sampled ``answer``
    come back edited: it carries every call id the answer was given, in its own calls or written into its text
    (smolagents' ``Calling tools:\n[{'id': ...}]``). Call ids are drawn per answer, so they tell one rollout's answer
    from another's; an answer without calls (or a matcher that drops ids) cannot be told this way."""
    if message.get("role") != "assistant":
        return False
    ids = [c.get("id") for c in answer.get("tool_calls") or []]
    if not ids or not all(isinstance(i, str) and i for i in ids):
        return False
    kept = {c.get("id") for c in message.get("tool_calls") or []}
    text = text_of(message.get("content"))
    return all(i in kept or i in text for i in ids)


def text_of(content: Any) -> str:
    """A message's content as text (a string, or the text of its parts)."""
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") if isinstance(p, dict) else str(p) for p in content)
    return str(content or "")


def _renamed_result(was: dict, now: dict) -> bool:
    """A tool result that comes back the same under another call id."""
    return (
        was.get("role") == now.get("role") == "tool"
        and was.get("content") == now.get("content")
        and was.get("tool_call_id") != now.get("tool_call_id")
    )


MIN_SUMMARY_CHARS = 20
"""The shortest side answer whose text, found in a message sent back, tells a summary asked for (a shorter one, a
title say, could be anywhere by chance)."""


def _carries_side_answer(message: dict, asked: Sequence[str]) -> bool:
    """Whether ``message`` holds the text of an answer a side request was given: the history carries a summary the
    harness asked for (Codex's compaction restarts from its summary request's answer, in a user message)."""
    text = text_of(message.get("content"))
    return any(len(answer.strip()) >= MIN_SUMMARY_CHARS and answer.strip() in text for answer in asked)


def _summary_like(held: Sequence[dict], sent: Sequence[dict], index: int) -> bool:
    """The request is shorter than the history and what follows the parting point is not a tail of it: earlier turns
    gave way to text the harness wrote."""
    rest = [_canonical(m) for m in sent[index:]]
    tail = {_canonical(m) for m in held[index:]}
    return any(m not in tail for m in rest) and len(held) - index >= 2
