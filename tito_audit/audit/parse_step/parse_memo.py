"""One conversation's parses and next prompts, kept for its walks again with a condition undone
(:mod:`tito_audit.audit.parse_step.parsed_undo`).

A walk again changes the conversation from some message on; every turn before that one is handed to the parser as it
was, and every next prompt before it is rendered from the same parsed history. The parser (an engine's: vLLM's asks its
worker process) and the renderer are deterministic in what they are given, so what they gave for the same input is
given back (a copy) instead of asked again. Kept per conversation and parser: it goes with the conversation.

>>> class Counting:
...     name, calls = "counting", 0
...     def parse(self, given):
...         Counting.calls += 1
...         return {"role": "assistant", "content": given.text}
>>> from tito_audit.parse.parser import ParseInput
>>> memo = ParseMemo(Counting())
>>> [memo.parse(ParseInput("Hi", None))["content"] for _ in range(2)], Counting.calls, memo.name
(['Hi', 'Hi'], 1, 'counting')
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tito_audit.conversations.conversation import Message, clone_data
from tito_audit.model.render import RenderedPrefix
from tito_audit.parse.handover import Sampled
from tito_audit.parse.parser import CompletionParser, ParseInput


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=False, default=str)


class ParseMemo:
    """``parser`` with what it parsed (and, where its engine has a hand-over of its own, what it handed over) kept by
    input; every other attribute is the parser's own (its name, engine, tool-call parser)."""

    def __init__(self, parser: CompletionParser) -> None:
        self.parser = parser
        self.name = parser.name
        self._parsed: dict[tuple, Message] = {}
        self._handed: dict[tuple, ParseInput] = {}
        self.prompts: dict[str, RenderedPrefix] = {}
        """Next prompts rendered from a parsed history, by that history (JSON)."""

    def __getattr__(self, name: str) -> Any:
        if name == "hand_over":
            own = getattr(self.parser, "hand_over", None)
            if not callable(own):
                raise AttributeError(name)
            return self._handed_over(own)
        return getattr(self.parser, name)

    def parse(self, given: ParseInput) -> Message:
        key = (
            given.text,
            _json(given.tools),
            given.prompt,
            given.reasoning_open,
            given.earlier_calls,
            given.call_id_seed,
            _json(given.template_kwargs),
            tuple(given.ids),
            tuple(given.prompt_ids),
        )
        if key not in self._parsed:
            self._parsed[key] = self.parser.parse(given)
        return clone_data(self._parsed[key])

    def _handed_over(self, own: Callable[[Sampled], ParseInput]) -> Callable[[Sampled], ParseInput]:
        def hand_over(sampled: Sampled) -> ParseInput:
            key = (
                sampled.text,
                tuple(sampled.ids),
                sampled.stop,
                _json(sampled.tools),
                sampled.prompt,
                tuple(sampled.prompt_ids),
                sampled.reasoning_open,
                sampled.earlier_calls,
                sampled.call_id_seed,
                _json(sampled.template_kwargs),
            )
            if key not in self._handed:
                self._handed[key] = own(sampled)
            return self._handed[key]

        return hand_over

    def prompt(self, history: list[Message], k: int, render: Callable[[], RenderedPrefix]) -> RenderedPrefix:
        """The next prompt before message ``k`` of ``history`` (``render``: rendering it), rendered once."""
        key = _json(history[:k])
        if key not in self.prompts:
            self.prompts[key] = render()
        return self.prompts[key]
