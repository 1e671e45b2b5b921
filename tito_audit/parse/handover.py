"""What the engine hands its parser (docs/contract.md "The parse step", "What the parser is given"): a property of the
engine.

A completion ends as the engine has it (:class:`Sampled`: its ids, its text as the buffer reads, the stop token it
ended on, the request's tools and template settings). Each engine turns that into the text its parsers see by its
own rules, so the hand-over belongs to the parser's engine: :func:`hand_over` asks the parser for its own
(``parser.hand_over``, vLLM's: :class:`tito_audit.parse.vllm.VLLMParser`) and otherwise applies SGLang's, which is
also the hand-over of ``hf`` and of a caller's own parser object.

SGLang's (``managers/detokenizer_manager.py``, ``entrypoints/openai/serving_chat.py``): the detokenizer drops the stop
token a generation ended on before the parsers see the text, with one exception: when the server runs the
``gpt-oss`` tool-call parser it keeps ``<|call|>``, which the harmony parser needs to close a call (``<|return|>`` is
still trimmed). A request that declares no tools is decoded without special tokens (``skip_special_tokens``), except
for the parsers that read them (``gpt-oss``, ``gemma4``); a request with tools keeps them.

>>> handed_text('...{"a": 1}<|call|>', "<|call|>", "gpt-oss"), handed_text("Hi<|im_end|>", "<|im_end|>", "qwen25")
('...{"a": 1}<|call|>', 'Hi')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tito_audit.parse.parser import CompletionParser, ParseInput

KEPT_STOPS: dict[str, frozenset[str]] = {"gpt-oss": frozenset({"<|call|>"})}
"""Tool-call parsers for which SGLang keeps the matched stop token in the text, and which tokens."""

KEEPS_SPECIAL_TOKENS = frozenset({"gpt-oss", "gemma4"})
"""Tool-call parsers whose models SGLang always decodes with special tokens (harmony and Gemma 4 parse them); for
the others, a request that declares no tools is decoded without them (``skip_special_tokens``)."""


@dataclass(frozen=True)
class Sampled:
    """A completion as the engine has it when generation ends, and the request it answers."""

    text: str
    """The completion decoded as it reads in the buffer, the stop token it ended on included."""
    ids: tuple[int, ...]
    """The sampled ids, the stop token included (empty when the caller has only text)."""
    stop: str | None
    """The text of the stop token the completion ended on; None when it did not end on one."""
    tools: list[dict] | None
    """The request's tools, in the OpenAI request shape."""
    prompt: str = ""
    prompt_ids: Sequence[int] = ()
    """The prompt's ids (see :attr:`~tito_audit.parse.parser.ParseInput.prompt_ids`)."""
    reasoning_open: bool = False
    earlier_calls: int = 0
    call_id_seed: str = ""
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    without_special: Callable[[str], str] | None = None
    """The text without its special tokens, as this model's codec writes them (SGLang's ``skip_special_tokens``)."""

    @property
    def stopped(self) -> bool:
        """Whether the completion ended on its stop token (the engine's ``finish_reason`` is ``stop``)."""
        return self.stop is not None and self.text.endswith(self.stop)


@runtime_checkable
class HandsOver(CompletionParser, Protocol):
    """A parser whose engine hands it a completion by rules of its own, not SGLang's (vLLM's:
    :class:`tito_audit.parse.vllm.VLLMParser`, which asks vLLM's detokenizer)."""

    def hand_over(self, sampled: Sampled) -> ParseInput:
        """The :class:`ParseInput` this parser's engine makes of ``sampled``."""
        ...


def hand_over(parser: CompletionParser, sampled: Sampled) -> ParseInput:
    """What ``parser``'s engine hands it for ``sampled``: the parser's own hand-over when it has one
    (:class:`HandsOver`), else SGLang's."""
    if isinstance(parser, HandsOver):
        return parser.hand_over(sampled)
    return sglang_hand_over(parser, sampled)


def sglang_hand_over(parser: CompletionParser, sampled: Sampled) -> ParseInput:
    """SGLang's hand-over (the module docstring): the stop token trimmed unless the tool-call parser keeps it, and,
    for a request without tools, the special tokens skipped unless the parser reads them."""
    tool = tool_parser_of(parser)
    text = handed_text(sampled.text, sampled.stop, tool)
    if not sampled.tools and tool not in KEEPS_SPECIAL_TOKENS and sampled.without_special is not None:
        text = sampled.without_special(text)
    return parse_input(sampled, text)


def parse_input(sampled: Sampled, text: str) -> ParseInput:
    """The parser's input: ``text`` (the handed text) with the rest of ``sampled``."""
    return ParseInput(
        text=text,
        tools=sampled.tools,
        prompt=sampled.prompt,
        reasoning_open=sampled.reasoning_open,
        earlier_calls=sampled.earlier_calls,
        call_id_seed=sampled.call_id_seed,
        template_kwargs=dict(sampled.template_kwargs),
        ids=sampled.ids,
        prompt_ids=sampled.prompt_ids,
    )


def tool_parser_of(parser: CompletionParser) -> str | None:
    """The tool-call parser's name, when ``parser`` has one."""
    tool = getattr(parser, "tool", None)
    return tool if isinstance(tool, str) else None


def handed_text(text: str, stop: str | None, tool_parser: str | None) -> str:
    """``text`` (a completion that ended on ``stop``, None when it did not stop) as SGLang hands it to the parsers:
    the stop token trimmed unless the tool-call parser keeps it."""
    if not stop or not text.endswith(stop):
        return text
    if stop in KEPT_STOPS.get(tool_parser or "", frozenset()):
        return text
    return text[: -len(stop)]
