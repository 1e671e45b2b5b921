"""Accepting a conversation: render what its assistant turns need, or retry it in the nearest shape the
template accepts (:mod:`tito_audit.conversations.shapes`), remembering what worked and what never does.

A template refuses a conversation when rendering raises, or when its text drops tool results, tool calls or
parallel calls. The whole conversation is rendered first (most refusals show there, at the cost of one
render); the prefixes of every assistant turn follow only for a conversation the template accepts.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tito_audit.audit.realization.realize import turn_keys
from tito_audit.conversations.conversation import Conversation
from tito_audit.conversations.shapes import (
    apply_changes,
    candidate_change_sets,
    describe_shape,
    first_calls_only,
    gives_up_tools,
    missing_from_render,
    without_tool_calls,
)
from tito_audit.model.render import PrefixRenderError, RenderedPrefix, Renderer, RenderError

Renders = dict[tuple[int, bool], RenderedPrefix]
NATIVE_RETRIES = 3
"""Conversations of one refusal that only a change giving up tool support rescued, before such changes are
tried in the order that worked (see :class:`Acceptor`)."""


@dataclass
class Refusal:
    reason: str
    shape: str
    conversation_id: str
    accepted_after: tuple[str, ...] | None
    """The shape changes after which the template accepted the conversation; None when nothing was accepted."""


def render_failure_reason(error: PrefixRenderError) -> str:
    return f"{error.reason} (rendering messages[:{error.k}], add_generation_prompt={error.gp})"


def structure_of(conversation: Conversation) -> tuple:
    """The roles in order, with the number of calls of each assistant message: what refusals depend on."""
    return tuple((m.get("role"), len(m.get("tool_calls") or [])) for m in conversation.messages)


def call_signature(conversation: Conversation) -> tuple:
    """What decides whether a template renders a tool call: per calling turn, the content kind, whether it
    carries reasoning, the number of calls and the argument types, and whether tools are declared."""
    turns = []
    for message in conversation.messages:
        calls = message.get("tool_calls") or []
        if calls:
            content = message.get("content")
            turns.append(
                (
                    "none" if content is None else "empty" if content == "" else "text",
                    "reasoning_content" in message,
                    min(len(calls), 2),
                    tuple(sorted({type(c["function"].get("arguments")).__name__ for c in calls})),
                )
            )
    return (tuple(sorted(set(turns))), conversation.tools is not None)


class Acceptor:
    """Accepts the conversations of one variant (retry preferences and dead ends are learnt per variant)."""

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer
        self._preferred: dict[str, list[tuple[str, ...]]] = defaultdict(list)
        self._hopeless: dict[tuple, bool] = {}
        """Refusals no shape change rescued, by reason and conversation structure."""
        self._ablation: dict[tuple, str | None] = {}
        """Whether a template drops tool calls, by the shape of the calls (see :func:`call_signature`)."""
        self._natives_missed: dict[str, int] = defaultdict(int)
        """By refusal: conversations in a row that only a change giving up tool support rescued (after every
        change keeping it was tried). After a few, such a refusal is no longer retried natively first (a
        template without a tool role refuses every tool conversation the same way)."""

    def _try(self, conversation: Conversation) -> tuple[Renders | None, str | None]:
        """The turn renders of ``conversation``, or why the template refuses it."""
        messages, tools = conversation.messages, conversation.tools
        last = (len(messages), False)
        try:
            renders = self.renderer.prefixes(messages, tools, [last])
        except PrefixRenderError as exc:
            return None, render_failure_reason(exc)
        full = renders[last].text
        if missing_from_render(conversation, full):
            return None, "the render drops tool results"
        dropped = self._drops_calls(conversation, full)
        if dropped:
            return None, dropped
        try:
            rest = [key for key in turn_keys(messages) if key != last]
            renders.update(self.renderer.prefixes(messages, tools, rest))
        except PrefixRenderError as exc:
            return None, render_failure_reason(exc)
        return renders, None

    def _drops_calls(self, conversation: Conversation, full: str) -> str | None:
        """Why the render drops tool calls (it renders the same without them), or None; cached per call shape."""
        signature = call_signature(conversation)
        if signature in self._ablation:
            return self._ablation[signature]
        for ablate, reason in (
            (without_tool_calls, "the render drops tool calls"),
            (first_calls_only, "the render drops parallel tool calls after the first"),
        ):
            ablated = ablate(conversation) if any(m.get("tool_calls") for m in conversation.messages) else None
            if ablated is None:
                continue
            try:
                if self.renderer.text(ablated.messages, conversation.tools, False) == full:
                    self._ablation[signature] = reason
                    return reason
            except RenderError:
                continue
        self._ablation[signature] = None
        return None

    def accept(self, conversation: Conversation) -> tuple[Conversation | None, Renders | None, Refusal | None]:
        """The conversation in the first shape the template renders faithfully (itself when it does), with the
        renders every assistant turn needs; the refusal, when there was one."""
        renders, reason = self._try(conversation)
        if reason is None:
            return conversation, renders, None
        key = reason.split(" (rendering", 1)[0]
        structure = (key, tuple(sorted(conversation.shape.items())), structure_of(conversation))
        if self._hopeless.get(structure):
            # The same refusal of the same structure was already retried with every change set in vain.
            return None, None, Refusal(key, describe_shape(conversation), conversation.id, None)
        natives_first = self._natives_missed[key] < NATIVE_RETRIES
        for changes in candidate_change_sets(conversation, self._preferred[key], natives_first):
            retried = apply_changes(conversation, changes)
            renders, retry_reason = self._try(retried)
            if retry_reason is None:
                names = tuple(change.name for change in changes)
                if names not in self._preferred[key]:
                    self._preferred[key].insert(0, names)
                if natives_first:
                    self._natives_missed[key] = self._natives_missed[key] + 1 if gives_up_tools(changes) else 0
                return retried, renders, Refusal(key, describe_shape(conversation), conversation.id, names)
        self._hopeless[structure] = True
        return None, None, Refusal(key, describe_shape(conversation), conversation.id, None)
