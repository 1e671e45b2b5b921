"""Layouts a model writes around its tool calls, built from the model's own template rendering of a call
(docs/contract.md "The parse step", "Engines differ"): the texts on which engines' parsers are known to part ways.

Each layout is one function of a :class:`CallTurn` (a drawn assistant turn with content and one call, as the
template renders it, and a way to render another message at that turn) that returns the :class:`WrittenTurn` a
model would write in that layout, or None where the layout does not apply to this template. Nothing here is typed
per model: the markup, the JSON and the stop token all come from the template's rendering.

- whitespace around the call: the content with a newline before it and blank space between it and the call;
- compact JSON: the call written without spaces (arguments, and the call object where the template writes one,
  flush against its markup);
- an undeclared tool: the same call to a tool the request did not declare;
- cut at the token limit: the whole call, its closing markup and stop token never written (``max_tokens``);
- truncated JSON: the text cut inside the call's first argument value;
- a malformed call beside a good one: two calls, the first with its closing brace missing;
- reasoning without tags: reasoning and answer written as plain text, without the reasoning block's markup;
- parallel calls: two calls in one turn, as the template writes them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tito_audit.conversations.conversation import Message, clone_data

UNDECLARED = "undeclared_tool"
"""The name of the tool no request declares."""
REASONING = "I should look this up before answering."


@dataclass(frozen=True)
class WrittenTurn:
    """A completion as a model writes it in one layout."""

    layout: str
    text: str
    """What the engine decodes, ending with its stop token when it stopped."""
    stop: str | None
    """The stop token it ended on; None when generation was cut at the token limit."""
    meant: Message
    """The message the model meant (what the perfect inverse would return)."""


@dataclass(frozen=True)
class CallTurn:
    """The turn the layouts are built from."""

    text: str
    stop: str | None
    message: Message
    """The assistant message the template rendered: content and one tool call."""
    rerender: Callable[[Message], tuple[str, str | None] | None]
    """The text and stop token a model writes at this turn for another message (None: the template refuses it)."""
    markup: re.Pattern[str] | None
    """The added tokens the template writes (``<tool_call>``, control tokens): where markup is."""

    @property
    def body(self) -> str:
        """The text without its stop token."""
        return self.text[: -len(self.stop)] if self.stop and self.text.endswith(self.stop) else self.text

    @property
    def call(self) -> dict[str, Any]:
        return self.message["tool_calls"][0]

    @property
    def arguments(self) -> dict[str, Any]:
        arguments = self.call.get("function", {}).get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return {}
        return arguments if isinstance(arguments, dict) else {}

    def stopped(self, body: str) -> str:
        """``body`` ended with this turn's stop token."""
        return body + (self.stop or "")


def whitespace_around_call(turn: CallTurn) -> WrittenTurn | None:
    content = turn.message.get("content")
    if not isinstance(content, str) or not content.strip() or turn.body.count(content) != 1:
        return None
    padded = "\n" + content + " \n\n"
    meant = clone_data(turn.message) | {"content": padded}
    return WrittenTurn("whitespace around the call", turn.stopped(turn.body.replace(content, padded)), turn.stop, meant)


def compact_json(turn: CallTurn) -> WrittenTurn | None:
    span = _arguments_span(turn.body, turn.arguments)
    if span is None:
        return None
    body = turn.body
    start, end = _call_object(body, span) or span
    value = json.loads(body[start:end])
    compact = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    before, after = body[:start], body[end:]
    if _ends_with_markup(before.rstrip(), turn.markup):
        before = before.rstrip()
    if _starts_with_markup(after.lstrip(), turn.markup):
        after = after.lstrip()
    written = before + compact + after
    if written == body:
        return None
    return WrittenTurn("compact JSON", turn.stopped(written), turn.stop, clone_data(turn.message))


def undeclared_tool(turn: CallTurn) -> WrittenTurn | None:
    meant = clone_data(turn.message)
    meant["tool_calls"][0]["function"]["name"] = UNDECLARED
    rendered = turn.rerender(meant)
    if rendered is None or UNDECLARED not in rendered[0]:
        return None
    return WrittenTurn("a call to an undeclared tool", rendered[0], rendered[1], meant)


def cut_at_token_limit(turn: CallTurn) -> WrittenTurn | None:
    body = turn.body.rstrip()
    closing = _trailing_markup(body, turn.markup)
    if closing:
        body = body[: -len(closing)]
    if body == turn.text:
        return None
    return WrittenTurn("a call cut at the token limit", body, None, clone_data(turn.message))


def truncated_json(turn: CallTurn) -> WrittenTurn | None:
    for value in turn.arguments.values():
        text = value if isinstance(value, str) else None
        if text is None or len(text) < 2:
            continue
        at = turn.body.rfind(text)
        if at < 0 or turn.body.count(text) != 1:
            continue
        return WrittenTurn("truncated JSON", turn.body[: at + len(text) // 2], None, clone_data(turn.message))
    return None


def malformed_beside_good(turn: CallTurn) -> WrittenTurn | None:
    rendered = _two_calls(turn)
    if rendered is None:
        return None
    (text, stop), meant = rendered
    span = _arguments_span(text, turn.arguments, occurrences=2)
    if span is None:
        return None
    start, end = span
    broken = text[:start] + text[start : end - 1] + text[end:]
    meant["tool_calls"] = meant["tool_calls"][1:]
    return WrittenTurn("a malformed call beside a good one", broken, stop, meant)


def reasoning_without_tags(turn: CallTurn) -> WrittenTurn | None:
    content = turn.message.get("content")
    if not isinstance(content, str) or not content.strip():
        return None
    with_reasoning = {"role": "assistant", "content": content, "reasoning_content": REASONING}
    rendered = turn.rerender(with_reasoning)
    if rendered is None or REASONING not in rendered[0] or rendered[0].startswith(REASONING):
        return None  # no reasoning block written here, or the prompt opened it (its tags are not the model's)
    stop = rendered[1]
    return WrittenTurn("reasoning without tags", REASONING + "\n\n" + content + (stop or ""), stop, with_reasoning)


def parallel_calls(turn: CallTurn) -> WrittenTurn | None:
    rendered = _two_calls(turn)
    if rendered is None:
        return None
    (text, stop), meant = rendered
    return WrittenTurn("parallel calls", text, stop, meant)


LAYOUTS: tuple[Callable[[CallTurn], WrittenTurn | None], ...] = (
    whitespace_around_call,
    compact_json,
    undeclared_tool,
    cut_at_token_limit,
    truncated_json,
    malformed_beside_good,
    reasoning_without_tags,
    parallel_calls,
)
"""Every layout, in the order the page lists them."""


def _two_calls(turn: CallTurn) -> tuple[tuple[str, str | None], Message] | None:
    meant = clone_data(turn.message)
    second = clone_data(turn.call)
    second["id"] = f"{second.get('id') or 'call'}b"
    meant["tool_calls"] = [*meant["tool_calls"], second]
    rendered = turn.rerender(meant)
    if rendered is None:
        return None
    return rendered, meant


def _arguments_span(text: str, arguments: dict[str, Any], occurrences: int = 1) -> tuple[int, int] | None:
    """Where the template wrote ``arguments`` as JSON in ``text`` (the first of ``occurrences`` equal writings)."""
    if not arguments:
        return None
    for option in ({"ensure_ascii": False}, {"ensure_ascii": True}, {"separators": (",", ":"), "ensure_ascii": False}):
        written = json.dumps(arguments, **option)
        if text.count(written) == occurrences:
            start = text.find(written)
            return start, start + len(written)
    return None


def _call_object(text: str, span: tuple[int, int]) -> tuple[int, int] | None:
    """The outermost JSON object around ``span`` that reads as JSON (the call ``{"name": …, "arguments": …}`` where
    the template writes one)."""
    decoder = json.JSONDecoder()
    best = None
    for start in range(span[0] - 1, max(-1, span[0] - 400), -1):
        if text[start] != "{":
            continue
        try:
            _, end = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if end >= span[1]:
            best = (start, end)
    return best


def _ends_with_markup(text: str, markup: re.Pattern[str] | None) -> bool:
    return _trailing_markup(text, markup) != ""


def _starts_with_markup(text: str, markup: re.Pattern[str] | None) -> bool:
    return markup is not None and markup.match(text) is not None


def _trailing_markup(text: str, markup: re.Pattern[str] | None) -> str:
    if markup is None:
        return ""
    found = [m for m in markup.finditer(text) if m.end() == len(text)]
    return found[-1].group() if found else ""
