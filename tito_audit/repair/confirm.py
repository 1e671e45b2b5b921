"""Confirmations: a concrete check, on the renders an explanation compares, that each cause label holds.

A label is the audit's claim; the explanation re-renders the two sides and tests it again in the simplest way
that can fail (the reasoning text is present earlier and gone later, the empty block vanishes, ...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tito_audit.audit.core.causes import EMPTY_THINK
from tito_audit.audit.core.diff import first_difference, is_prefix
from tito_audit.audit.results import Failure
from tito_audit.conversations.conversation import ASSISTANT, Conversation
from tito_audit.model.render import ALTERNATE_CLOCK, Renderer, frozen_clock
from tito_audit.model.tokens import TokenCodec


@dataclass
class Confirmation:
    cause: str
    confirmed: bool
    evidence: str


def _reasonings(conversation: Conversation) -> list[str]:
    return [m["reasoning_content"].strip() for m in conversation.messages if (m.get("reasoning_content") or "").strip()]


def confirm(
    cause: str,
    failure: Failure,
    conversation: Conversation,
    keys: tuple[tuple[int, bool], tuple[int, bool]] | None,
    texts: dict[tuple[int, bool], str],
    renderer: Renderer,
    codec: TokenCodec,
) -> Confirmation:
    """A concrete check that the label holds on this case; ``confirmed=False`` says it could not be shown."""
    earlier = texts.get(keys[0], "") if keys else ""
    later = texts.get(keys[1], "") if keys else ""
    index = failure.char_index if failure.char_index is not None else (first_difference(earlier, later) or 0)
    messages, tools = conversation.messages, conversation.tools
    if cause == "reasoning-pruned":
        lost = [r for r in _reasonings(conversation) if earlier.count(r) > later.count(r)]
        return Confirmation(
            cause,
            bool(lost),
            f"reasoning present earlier, gone later: {lost[0][:60]!r}" if lost else "no reasoning text lost",
        )
    if cause == "empty-think-dropped":
        before, after = len(EMPTY_THINK.findall(earlier)), len(EMPTY_THINK.findall(later[: len(earlier) + 200]))
        match = EMPTY_THINK.search(earlier, max(0, index - 16))
        shown = match is not None and match.start() <= index + 2 and not later.startswith(match.group(0), match.start())
        return Confirmation(
            cause, shown, f"empty reasoning block at character {index} earlier ({before} earlier, {after} later)"
        )
    if cause == "gen-prompt-mismatch":
        j = max((j for j, m in enumerate(messages) if m.get("role") == ASSISTANT and j < failure.turn), default=None)
        if j is None:
            return Confirmation(cause, False, "no earlier assistant turn")
        prompt, turn = renderer.text(messages[:j], tools, True), renderer.text(messages[: j + 1], tools, False)
        at = first_difference(prompt, turn)
        return Confirmation(
            cause,
            at is not None,
            f"generation prompt of message {j} parts from its render at character {at}: "
            f"{prompt[at : at + 30]!r} vs {turn[at : at + 30]!r}"
            if at is not None
            else "generation prompt is a prefix",
        )
    if cause == "stop-token-swap":
        return Confirmation(
            cause,
            earlier[index : index + 12] != later[index : index + 12],
            f"earlier {earlier[index : index + 12]!r}, later {later[index : index + 12]!r}",
        )
    if cause == "tail-after-stop":
        rest = earlier[index:]
        return Confirmation(
            cause, not rest.strip() or len(rest) < 16, f"earlier ends with {rest!r} after the divergence"
        )
    if cause == "bpe-seam":
        if not keys:
            return Confirmation(cause, True, "the token windows differ while the text holds (see the diff)")
        text_ok = is_prefix(earlier, later)
        ids_ok = is_prefix(codec.encode(earlier), codec.encode(later))
        return Confirmation(
            cause, text_ok and not ids_ok, f"text prefix holds: {text_ok}; token prefix holds: {ids_ok}"
        )
    if cause == "closing-rewritten":
        return _confirm_closing(failure, messages, tools, renderer)
    if cause == "content-rewritten":
        changed = [
            m["content"].strip()[:60]
            for m in messages[: keys[1][0] if keys else len(messages)]
            if isinstance(m.get("content"), str)
            and m["content"].strip()
            and earlier.count(m["content"].strip()) != later.count(m["content"].strip())
        ]
        near = earlier[max(0, index - 40) : index + 40] != later[max(0, index - 40) : index + 40]
        return Confirmation(
            cause,
            bool(changed) or near,
            f"message text changed between the renders: {changed[0]!r}"
            if changed
            else "the text around the divergence differs",
        )
    if cause == "tool-call-reformatted":
        decoder = json.JSONDecoder()
        values = []
        for text in (earlier, later):
            start = text.find("{", max(0, index - 200))
            try:
                values.append(decoder.raw_decode(text[start:])[0] if start >= 0 else None)
            except ValueError:
                values.append(None)
        same = values[0] is not None and values[0] == values[1]
        return Confirmation(
            cause,
            same or values[0] != values[1],
            "the same arguments serialized differently" if same else "the tool call text differs",
        )
    if cause == "history-dependent-suffix":
        return Confirmation(
            cause,
            failure.expected is not None and failure.actual is not None and failure.expected.ids != failure.actual.ids,
            "stand-in suffix tokens differ from the real bridge",
        )
    if cause == "nondeterministic-template":
        key = keys[1] if keys else (len(messages), False)
        with frozen_clock(renderer.model.template_source, ALTERNATE_CLOCK):
            other = renderer.text(messages[: key[0]], tools, key[1])
        return Confirmation(cause, other != texts.get(key), "renders differ under another clock")
    if cause in ("special-token-literal", "normalization", "utf8-split", "noncanonical-split", "bos-duplication"):
        shown = (
            failure.expected is not None and failure.actual is not None and failure.expected.ids != failure.actual.ids
        )
        return Confirmation(cause, shown, "token windows differ as the label says (see the diff)")
    return Confirmation(cause, False, "no mechanical confirmation for this label")


def _confirm_closing(failure: Failure, messages: list, tools: list | None, renderer: Renderer) -> Confirmation:
    """The attributed message renders one closing when it is last and another once a message follows it."""
    cause, index = "closing-rewritten", failure.message_index
    if index is None or index + 1 >= len(messages):
        return Confirmation(cause, False, "no rewritten message was attributed")
    last = renderer.text(messages[: index + 1], tools, False)
    followed = renderer.text(messages[: index + 2], tools, False)
    at = first_difference(last, followed)
    content = messages[index].get("content")
    text = content.strip() if isinstance(content, str) else ""
    ends = last.rfind(text) + len(text) if text and text in last else None
    shown = at is not None and (ends is None or ends <= at)
    role = messages[index].get("role")
    evidence = (
        f"message {index} ({role}) closes with {last[at : at + 24]!r} when last and with {followed[at : at + 24]!r} "
        f"once message {index + 1} follows"
        if at is not None
        else f"message {index} ({role}) renders the same whether or not message {index + 1} follows"
    )
    return Confirmation(cause, shown, evidence)
