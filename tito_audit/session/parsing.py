"""A session's own parse of each completion (the parse stage of :mod:`tito_audit.parse`): the message the engine's
parser makes of the sampled ids, so that a trainer's loop needs no parse of its own.

The parser is handed what its engine hands it (:func:`tito_audit.parse.handover.hand_over`, the audit's own hand-over):
for SGLang's parsers the completion decoded as it reads in the buffer, the stop token it ended on trimmed and, for a
session without tools, its special tokens skipped; for vLLM's, vLLM's detokenizer over the sampled ids. Call ids are
new for every call, as an engine's are: the tool results a trainer appends answer those ids.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from tito_audit.audit.public import variant_reasoning
from tito_audit.conversations.conversation import Message, clone_data
from tito_audit.conversations.reasoning_forms import OPEN
from tito_audit.model.render import DEFAULT_CLOCK
from tito_audit.model.threads import cached_property
from tito_audit.parse.choice import choose_parser
from tito_audit.parse.handover import Sampled, hand_over
from tito_audit.parse.parser import TEMPLATE, CompletionParser
from tito_audit.session.inputs import check_depth
from tito_audit.session.machinery import Machinery
from tito_audit.session.shared_list import INTS, AppendOnly
from tito_audit.session.state import SessionState

ParserArgument = str | CompletionParser | None


def resolve_parser(value: ParserArgument, machinery: Machinery) -> CompletionParser | None:
    """The parser ``value`` names for the session's model: None (the caller parses), a ``--parser`` value
    (``auto``, ``sglang``, ``hf``, ``TOOL[,REASONING]``) or any object with ``name`` and ``parse(ParseInput)``."""
    if value is None:
        return None
    if isinstance(value, str):
        resolved = machinery.loaded.resolved
        choice = choose_parser(value, resolved.model_id, machinery.loaded.tokenizer, resolved.path)
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

    @classmethod
    def of(cls, value: ParserArgument, machinery: Machinery, tools: list[dict] | None) -> SessionParser | None:
        """The session's parser for what ``parser=`` names (:func:`resolve_parser`); None: the caller parses."""
        resolved = resolve_parser(value, machinery)
        return cls(resolved, machinery, tools) if resolved is not None else None

    @property
    def runs_apart(self) -> bool:
        """Whether the parser runs in another process (vLLM's worker): then it is called without the model's lock."""
        return bool(getattr(self.parser, "runs_apart", False))

    @cached_property
    def reasoning_open(self) -> bool:
        """Whether the template's generation prompt ends inside an open reasoning block."""
        machinery = self._machinery
        with machinery.lock, machinery.rendering(DEFAULT_CLOCK):
            return variant_reasoning(machinery.renderer.text_or_none, self._tools).state == OPEN

    def parse(
        self, text: str, stop: str | None, prompt: tuple[str, Sequence[int]], ids: Sequence[int], step: int
    ) -> Message:
        """The message the parser makes of ``text`` (the completion as it reads in the buffer, sampled as ``ids``;
        ``stop`` is the text of the stop token it ended on) after ``prompt`` (its text and ids)."""
        pattern = self._machinery.codec.written_control_pattern
        sampled = Sampled(
            text=text,
            ids=tuple(ids),
            stop=stop,
            tools=self._tools,
            prompt=prompt[0],
            prompt_ids=AppendOnly.of(prompt[1], INTS),  # read-only, in constant time: most parsers never read it
            reasoning_open=self.reasoning_open,
            earlier_calls=self.calls,
            call_id_seed=f"{self._seed}:{step}",
            template_kwargs=dict(self._machinery.renderer.kwargs),
            without_special=(lambda written: pattern.sub("", written)) if pattern is not None else None,
        )
        message: Any = self.parser.parse(hand_over(self.parser, sampled))
        self.calls += len(message.get("tool_calls") or [])
        return message

    def parse_in(
        self, state: SessionState, completion: list[int], decode: Callable[[list[int]], str], clock: datetime
    ) -> Message:
        """:meth:`~tito_audit.session.TitoSession.parse`: the message of ``completion`` after ``state``'s buffer
        (``decode``: its text there), kept in ``state.parsed`` (the same ids at the same point parse once; at a later
        step they parse anew)."""
        key = (len(state.buffer), state.steps, tuple(completion))
        if state.parsed is not None and state.parsed[0] == key:
            return clone_data(state.parsed[1])
        machinery = self._machinery
        stop = machinery.codec.decode([completion[-1]]) if completion and completion[-1] in machinery.stop_ids else None
        with machinery.lock, machinery.rendering(clock):
            prompt, text = (state.view_text, state.view_ids), decode(completion)
        # a parser in another process (vLLM's) is called without the model's lock: its other sessions go on meanwhile
        with contextlib.nullcontext() if self.runs_apart else machinery.lock, machinery.rendering(clock):
            message = self.parse(text, stop, prompt, completion, state.steps + 1)
        check_depth(message, "the parsed completion")
        state.parsed = (key, message)
        return clone_data(message)


def parsed_for(
    completion: list[int] | None, parser: SessionParser | None, parse: Callable[[list[int]], Message]
) -> Message:
    """The message ``parse`` makes of ``completion`` where the caller left the assistant message out; bad input when
    there is nothing to parse or no parser."""
    if completion is None:
        raise ValueError("an unsampled turn (completion_ids=None) needs its assistant_message")
    if parser is None:
        raise ValueError("assistant_message is required: this session has no parser (create it with parser=)")
    return parse(completion)


def split_extend_arguments(second: Any, third: Any) -> tuple[Message | None, Any]:
    """``extend(ids, assistant_message, tool_messages)`` or, with a parser, ``extend(ids, tool_messages)``:
    (the assistant message or None, the tool messages)."""
    if third is None and second is not None and not isinstance(second, dict) and hasattr(second, "__iter__"):
        return None, second
    return second, third
