"""Refused shapes: when a template rejects a conversation, retry it in the nearest shape it accepts.

A template refuses a conversation when rendering raises, or when the text drops a tool call or a tool
result (or when it cannot render the tools' schemas: Hermes 3 recurses without end on a ``type`` list, Apertus
reads the tools without their ``function`` wrapper). We then apply the smallest set of shape changes (below, in
order of preference) after which it renders faithfully. The refusal is always reported; the retried conversation is
audited in its new shape, and a conversation no change rescues is counted as refused, never as passed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tito_audit.conversations.conversation import ASSISTANT, SYSTEM, TOOL, USER, Conversation, Message

TOOL_AS_USER = "tool results -> user messages"
CHAT_ONLY = "tool calls and results removed (chat only)"


@dataclass(frozen=True)
class ShapeChange:
    name: str
    applies: Callable[[Conversation], bool]
    apply: Callable[[Conversation], Conversation]


def _calls(conversation: Conversation) -> list[dict]:
    return [call for m in conversation.messages for call in m.get("tool_calls") or []]


def _sharing(conversation: Conversation, messages: list[Message]) -> Conversation:
    """``conversation`` with ``messages``: a change builds new dicts only for the messages it changes and shares
    the others (nothing here changes a message in place), so a renderer's preparation of an unchanged message
    is found again for the changed conversation."""
    return replace(
        conversation, messages=messages, shape=dict(conversation.shape), must_appear=list(conversation.must_appear)
    )


def _with_calls(message: Message, change: Callable[[dict], dict]) -> Message:
    """``message`` with each tool call replaced by ``change(call)`` (a new message when a call changed)."""
    calls = [change(call) for call in message["tool_calls"]]
    if all(new is old for new, old in zip(calls, message["tool_calls"], strict=True)):
        return message
    return {**message, "tool_calls": calls}


CALL_ID = re.compile(r"[A-Za-z0-9]{9}")
"""Tool-call ids as Mistral's backend (mistral-common) and its templates demand them: nine alphanumerics."""


def _ids_not_nine_alphanumerics(conversation: Conversation) -> bool:
    ids = [call.get("id") for call in _calls(conversation)]
    ids += [m.get("tool_call_id") for m in conversation.messages if m.get("role") == TOOL and "tool_call_id" in m]
    return any(not isinstance(i, str) or not CALL_ID.fullmatch(i) for i in ids)


def nine_character_id(original: object) -> str:
    """A nine-alphanumeric id for ``original``, the same for the same id (so calls and results still pair).

    >>> nine_character_id("call_1"), nine_character_id("call_1") == nine_character_id("call_2")
    ('c74196fe7', False)
    """
    return "c" + hashlib.sha256(str(original).encode("utf-8")).hexdigest()[:8]


def _ids_to_nine_alphanumerics(conversation: Conversation) -> Conversation:
    """Each tool-call id, and every tool result's ``tool_call_id`` naming it, replaced by a nine-alphanumeric
    id derived from it (data a backend refuses for its id format, not a template behaviour)."""

    def renamed(call: dict) -> dict:
        return {**call, "id": nine_character_id(call["id"])} if "id" in call else call

    messages = []
    for message in conversation.messages:
        if message.get("tool_calls"):
            message = _with_calls(message, renamed)
        if message.get("role") == TOOL and "tool_call_id" in message:
            message = {**message, "tool_call_id": nine_character_id(message["tool_call_id"])}
        messages.append(message)
    return _sharing(conversation, messages)


def _none_content_to_empty(conversation: Conversation) -> Conversation:
    return _sharing(
        conversation,
        [
            {**m, "content": ""} if m.get("role") == ASSISTANT and m.get("content") is None else m
            for m in conversation.messages
        ],
    )


def _arguments_to(kind: type) -> Callable[[Conversation], Conversation]:
    def converted(call: dict) -> dict:
        arguments = call["function"].get("arguments")
        if kind is dict and isinstance(arguments, str):
            arguments = json.loads(arguments)
        elif kind is str and isinstance(arguments, dict):
            arguments = json.dumps(arguments, ensure_ascii=False)
        else:
            return call
        return {**call, "function": {**call["function"], "arguments": arguments}}

    def change(conversation: Conversation) -> Conversation:
        return _sharing(
            conversation, [_with_calls(m, converted) if m.get("tool_calls") else m for m in conversation.messages]
        )

    return change


def _split_parallel_calls(conversation: Conversation) -> Conversation:
    """Turn an assistant message with n calls and its n results into n (call, result) pairs: the one-call turns a
    model writes where its generation stops at its first call (gpt-oss stops at ``<|call|>``). Each turn is written
    as the first one was (the same content and reasoning): a model that writes its reasoning before a call writes it
    before each, and a turn without it stays a form the conversation drew, not one the split made."""
    messages: list[Message] = []
    pending: dict[str, Message] = {}
    for message in conversation.messages:
        calls = message.get("tool_calls") or []
        if message.get("role") == ASSISTANT and len(calls) > 1:
            for call in calls:
                part = {**message, "tool_calls": [call]}
                messages.append(part)
                pending[call["id"]] = part
            continue
        if message.get("role") == TOOL and message.get("tool_call_id") in pending:
            owner = pending.pop(message["tool_call_id"])
            messages.insert(messages.index(owner) + 1, message)
            continue
        messages.append(message)
    return _sharing(conversation, messages)


def _later_system_to_user(conversation: Conversation) -> Conversation:
    return _sharing(
        conversation,
        [
            {**m, "role": USER} if index > 0 and m.get("role") == SYSTEM else m
            for index, m in enumerate(conversation.messages)
        ],
    )


def _tool_to_user(conversation: Conversation) -> Conversation:
    return _sharing(
        conversation,
        [
            {**{k: v for k, v in m.items() if k not in ("tool_call_id", "name")}, "role": USER}
            if m.get("role") == TOOL
            else m
            for m in conversation.messages
        ],
    )


def _empty_content_with_calls(conversation: Conversation) -> Conversation:
    return _sharing(
        conversation,
        [{**m, "content": ""} if m.get("tool_calls") and m.get("content") else m for m in conversation.messages],
    )


def _without_reasoning(conversation: Conversation) -> Conversation:
    return _sharing(
        conversation,
        [
            {k: v for k, v in m.items() if k != "reasoning_content"} if "reasoning_content" in m else m
            for m in conversation.messages
        ],
    )


def _chat_only(conversation: Conversation) -> Conversation:
    """Drop tool calls and tool results: the nearest shape for templates that know no tools."""
    messages: list[Message] = []
    for message in conversation.messages:
        if message.get("role") == TOOL:
            continue
        if message.get("tool_calls"):
            message = {k: v for k, v in message.items() if k != "tool_calls"}
            if not message.get("content"):
                continue
        if messages and message.get("role") == ASSISTANT and messages[-1].get("role") == ASSISTANT:
            messages.pop()
        messages.append(message)
    out = _sharing(conversation, messages)
    out.tools = None
    out.must_appear = [n for n in out.must_appear if any(n in str(m.get("content")) for m in messages)]
    return out


def _schemas_rewritten(schema: Any, rewrite: Callable[[dict], dict]) -> Any:
    """``schema`` with ``rewrite`` applied to every subschema object (a new object where anything changed)."""
    if isinstance(schema, list):
        items = [_schemas_rewritten(item, rewrite) for item in schema]
        return schema if all(a is b for a, b in zip(items, schema, strict=True)) else items
    if not isinstance(schema, dict):
        return schema
    inner = {key: _schemas_rewritten(value, rewrite) for key, value in schema.items()}
    changed = any(inner[key] is not schema[key] for key in schema)
    return rewrite(inner if changed else schema)


def _type_list_as_any_of(schema: dict) -> dict:
    kinds = schema.get("type")
    if not isinstance(kinds, list):
        return schema
    rest = {k: v for k, v in schema.items() if k != "type"}
    return {**rest, "anyOf": [{"type": kind} for kind in kinds]}


def _first_branch(schema: dict) -> dict:
    """A union (type list, ``anyOf``, ``oneOf``) as its first non-null type."""
    kinds = schema.get("type")
    if isinstance(kinds, list) and kinds:
        return {**schema, "type": next((k for k in kinds if k != "null"), kinds[0])}
    for keyword in ("anyOf", "oneOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list) and branches:
            rest = {k: v for k, v in schema.items() if k != keyword}
            first = next((b for b in branches if isinstance(b, dict) and b.get("type") != "null"), branches[0])
            return {**rest, **(first if isinstance(first, dict) else {})}
    return schema


def _tools_rewritten(rewrite: Callable[[dict], dict]) -> Callable[[Conversation], Conversation]:
    def change(conversation: Conversation) -> Conversation:
        out = _sharing(conversation, list(conversation.messages))
        out.tools = _schemas_rewritten(conversation.tools, rewrite)
        return out

    return change


def _tools_hold(test: Callable[[dict], bool]) -> Callable[[Conversation], bool]:
    def applies(conversation: Conversation) -> bool:
        found: list[bool] = []

        def note(schema: dict) -> dict:
            found.append(test(schema))
            return schema

        _schemas_rewritten(conversation.tools, note)
        return any(found)

    return applies


def _flat_tools(conversation: Conversation) -> Conversation:
    out = _sharing(conversation, list(conversation.messages))
    out.tools = [tool.get("function", tool) if isinstance(tool, dict) else tool for tool in conversation.tools or []]
    return out


CALL_IDS = "tool-call ids -> 9 alphanumeric characters"
FLAT_TOOLS = "tool schemas without their function wrapper"
TYPE_LISTS = "type lists in tool schemas -> anyOf"
UNIONS = "unions in tool schemas -> their first non-null type"

SHAPE_CHANGES: tuple[ShapeChange, ...] = (
    ShapeChange(CALL_IDS, _ids_not_nine_alphanumerics, _ids_to_nine_alphanumerics),
    ShapeChange(
        FLAT_TOOLS,
        lambda c: any(isinstance(t, dict) and isinstance(t.get("function"), dict) for t in c.tools or []),
        _flat_tools,
    ),
    ShapeChange(
        TYPE_LISTS, _tools_hold(lambda s: isinstance(s.get("type"), list)), _tools_rewritten(_type_list_as_any_of)
    ),
    ShapeChange(
        UNIONS,
        _tools_hold(lambda s: isinstance(s.get("type"), list) or "anyOf" in s or "oneOf" in s),
        _tools_rewritten(_first_branch),
    ),
    ShapeChange(
        "assistant content None -> empty string",
        lambda c: any(m.get("role") == ASSISTANT and m.get("content") is None for m in c.messages),
        _none_content_to_empty,
    ),
    ShapeChange(
        "arguments JSON string -> dict",
        lambda c: any(isinstance(call["function"].get("arguments"), str) for call in _calls(c)),
        _arguments_to(dict),
    ),
    ShapeChange(
        "arguments dict -> JSON string",
        lambda c: any(isinstance(call["function"].get("arguments"), dict) for call in _calls(c)),
        _arguments_to(str),
    ),
    ShapeChange(
        "parallel tool calls -> one call per turn",
        lambda c: any(len(m.get("tool_calls") or []) > 1 for m in c.messages),
        _split_parallel_calls,
    ),
    ShapeChange(
        "later system messages -> user messages",
        lambda c: any(m.get("role") == SYSTEM for m in c.messages[1:]),
        _later_system_to_user,
    ),
    ShapeChange(
        "reasoning removed",
        lambda c: any("reasoning_content" in m for m in c.messages),
        _without_reasoning,
    ),
    ShapeChange(
        "assistant text beside tool calls -> empty",
        lambda c: any(m.get("tool_calls") and m.get("content") for m in c.messages),
        _empty_content_with_calls,
    ),
    ShapeChange(TOOL_AS_USER, lambda c: any(m.get("role") == TOOL for m in c.messages), _tool_to_user),
    ShapeChange(CHAT_ONLY, Conversation.has_tool_traffic, _chat_only),
)
NOT_NATIVE_TOOLS = frozenset({TOOL_AS_USER, CHAT_ONLY})
"""Changes after which a conversation no longer exercises the template's own tool support."""
MAX_CHANGES_TRIED = 24
RESERVED_FOR_NOT_NATIVE = 4
"""Of the sets tried natives first, how many are sets giving up tool support (reshaping into chat)."""


def missing_from_render(conversation: Conversation, text: str) -> list[str]:
    """Strings of ``conversation.must_appear`` (tool-result phrases) absent from ``text``."""
    return [needle for needle in conversation.must_appear if needle not in text]


def without_tool_calls(conversation: Conversation) -> Conversation:
    """The conversation with every ``tool_calls`` removed: if it renders the same, the calls were dropped."""
    out = conversation.copy()
    for message in out.messages:
        message.pop("tool_calls", None)
    return out


def first_calls_only(conversation: Conversation) -> Conversation | None:
    """Each parallel call list cut to its first call (None without parallel calls).

    If this renders the same as the original, the template drops every call after the first.
    """
    if not any(len(m.get("tool_calls") or []) > 1 for m in conversation.messages):
        return None
    out = conversation.copy()
    for message in out.messages:
        if len(message.get("tool_calls") or []) > 1:
            message["tool_calls"] = message["tool_calls"][:1]
    return out


def candidate_change_sets(
    conversation: Conversation, preferred: list[tuple[str, ...]], natives_first: bool = True
) -> list[tuple[ShapeChange, ...]]:
    """Change sets to try: the sets that worked before for the same refusal, then the smallest. With
    ``natives_first``, the sets that keep the template's own tool support come before those that give it up (a
    conversation reshaped into chat no longer says anything about tool steps), a few of which always stay within
    the :data:`MAX_CHANGES_TRIED` tried (a template that knows no tools is reshaped, not refused)."""
    applicable = [change for change in SHAPE_CHANGES if change.applies(conversation)]
    by_name = {change.name: change for change in applicable}
    seen: set[tuple[str, ...]] = set()
    natives: list[tuple[ShapeChange, ...]] = []
    others: list[tuple[ShapeChange, ...]] = []

    def offer(changes: tuple[ShapeChange, ...]) -> None:
        key = tuple(change.name for change in changes)
        if key in seen:
            return
        seen.add(key)
        if natives_first and gives_up_tools(changes):
            if len(others) < RESERVED_FOR_NOT_NATIVE:
                others.append(changes)
        elif len(natives) < MAX_CHANGES_TRIED:
            natives.append(changes)

    for names in preferred:
        if all(name in by_name for name in names):
            offer(tuple(by_name[name] for name in names))
    # the sets by size, made only as far as they are tried (there are 2**n of them)
    for size in range(1, len(applicable) + 1):
        for combination in itertools.combinations(applicable, size):
            if len(natives) >= MAX_CHANGES_TRIED and (not natives_first or len(others) >= RESERVED_FOR_NOT_NATIVE):
                break
            offer(combination)
    if not natives_first:
        return natives[:MAX_CHANGES_TRIED]
    return natives[: MAX_CHANGES_TRIED - len(others)] + others


def gives_up_tools(changes: tuple[ShapeChange, ...]) -> bool:
    """Whether a change set no longer exercises the template's own tool support."""
    return any(change.name in NOT_NATIVE_TOOLS for change in changes)


def apply_changes(conversation: Conversation, changes: tuple[ShapeChange, ...]) -> Conversation:
    for change in changes:
        conversation = change.apply(conversation)
    return conversation


def describe_shape(conversation: Conversation) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(conversation.shape.items())) or "unspecified"
