"""A session's own parse of each completion (the parse stage of :mod:`tito_audit.parse`): the message the engine's
parser makes of the sampled ids, so that a trainer's loop needs no parse of its own.

The text handed to the parser is the completion decoded as it reads in the buffer, with the stop token it ended on
trimmed (as SGLang hands it over). Call ids are new for every call, as an engine's are (``call_`` and 24 hex
digits): the tool results a trainer appends answer those ids.
"""

from __future__ import annotations

import uuid
from typing import Any

from tito_audit.audit.reasoning_block import variant_reasoning
from tito_audit.conversations.conversation import Message
from tito_audit.conversations.reasoning_forms import OPEN
from tito_audit.model.render import DEFAULT_CLOCK
from tito_audit.model.threads import cached_property
from tito_audit.parse.choice import choose_parser
from tito_audit.parse.parser import TEMPLATE, CompletionParser, ParseInput
from tito_audit.session.machinery import Machinery

ParserArgument = str | CompletionParser | None


def resolve_parser(value: ParserArgument, machinery: Machinery) -> CompletionParser | None:
    """The parser ``value`` names for the session's model: None (the caller parses), a ``--parser`` value
    (``auto``, ``sglang``, ``hf``, ``TOOL[,REASONING]``) or any object with ``name`` and ``parse(ParseInput)``."""
    if value is None:
        return None
    if isinstance(value, str):
        choice = choose_parser(value, machinery.loaded.resolved.model_id, machinery.loaded.tokenizer)
        if choice.parser is None:
            why = "; ".join(choice.notes) or choice.why
            raise ValueError(
                f"parser={value!r} gives the perfect inverse ({TEMPLATE}), which needs the message itself: pass "
                f"assistant_message to extend() and finish(), or name a real parser ({why})"
            )
        return choice.parser
    if callable(getattr(value, "parse", None)):
        return value
    raise TypeError(f"parser must be a parser name or an object with parse(ParseInput), not {type(value).__name__}")


class SessionParser:
    """Parses the completions of one session (call ids are unique to the session)."""

    def __init__(self, parser: CompletionParser, machinery: Machinery, tools: list[dict] | None) -> None:
        self.parser = parser
        self._machinery = machinery
        self._tools = tools
        self._seed = uuid.uuid4().hex
        self.calls = 0

    @cached_property
    def reasoning_open(self) -> bool:
        """Whether the template's generation prompt ends inside an open reasoning block."""
        machinery = self._machinery
        with machinery.lock, machinery.rendering(DEFAULT_CLOCK):
            return variant_reasoning(machinery.renderer.text_or_none, self._tools).state == OPEN

    def parse(self, text: str, stop: str | None, prompt: str, step: int) -> Message:
        """The message the parser makes of ``text`` (the completion as it reads in the buffer; ``stop`` is the
        text of the stop token it ended on, trimmed before parsing)."""
        if stop and text.endswith(stop):
            text = text[: -len(stop)]
        given = ParseInput(
            text=text,
            tools=self._tools,
            prompt=prompt,
            reasoning_open=self.reasoning_open,
            earlier_calls=self.calls,
            call_id_seed=f"{self._seed}:{step}",
        )
        message: Any = self.parser.parse(given)
        self.calls += len(message.get("tool_calls") or [])
        return message


def split_extend_arguments(second: Any, third: Any) -> tuple[Message | None, Any]:
    """``extend(ids, assistant_message, tool_messages)`` or, with a parser, ``extend(ids, tool_messages)``:
    (the assistant message or None, the tool messages)."""
    if third is None and second is not None and not isinstance(second, dict) and hasattr(second, "__iter__"):
        return None, second
    return second, third
