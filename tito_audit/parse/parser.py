"""What a parser is: sampled text in, an assistant message out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tito_audit.conversations.conversation import Message
from tito_audit.errors import BadInputError

TEMPLATE = "template"
"""The perfect inverse: the message the template rendered comes back as it was (no parse)."""


@dataclass(frozen=True)
class ParseInput:
    """What the engine hands its parser for one completion."""

    text: str
    """The sampled completion decoded, with the stop token it ended on trimmed (as SGLang hands it over)."""
    tools: list[dict] | None
    prompt: str = ""
    """The prompt the completion followed (some parsers need to see an opened ``<think>``)."""
    reasoning_open: bool = False
    """Whether that prompt ends inside an open reasoning block (the model's text starts inside it)."""
    earlier_calls: int = 0
    """Tool calls in the conversation before this turn (parsers that number call ids count on from there)."""
    call_id_seed: str = ""
    """What makes this completion's generated call ids differ from another's, reproducibly."""
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    """The request's chat-template keyword arguments (the variant's settings): some reasoning parsers read them
    (vLLM's ``qwen3`` reads ``enable_thinking``)."""
    ids: tuple[int, ...] = ()
    """The sampled ids ``text`` was decoded from, the stop token included (vLLM hands its parsers these too; the
    harmony parser reads only them); empty when the caller has only text."""
    prompt_ids: Sequence[int] = ()
    """The ids of the prompt the completion followed (vLLM's parsers read it to tell whether reasoning was open): a
    tuple, or a session's buffer shared read-only (a parser that sends it makes its list; the others never copy it)."""


class CompletionParser(Protocol):
    """Turns the text of one sampled completion into the assistant message the next prompt is rendered from."""

    name: str
    """How reports name it (``sglang qwen25+qwen3``, ``hf``). A parser of a serving engine also carries ``engine``,
    the engine's name (``sglang``; :mod:`tito_audit.parse.engines`), read with :func:`engine_of`."""

    def parse(self, given: ParseInput) -> Message:
        """The assistant message (``role``, ``content``, optionally ``reasoning_content`` and ``tool_calls`` in
        the OpenAI shape) this parser makes of ``given.text``."""
        ...


def engine_of(parser: CompletionParser | None) -> str:
    """The engine ``parser`` belongs to (``sglang``), or "" (transformers' parser, a caller's own, none)."""
    engine = getattr(parser, "engine", "")
    return engine if isinstance(engine, str) else ""


class ParserUnavailable(BadInputError):
    """The named parser cannot run here (its extra is not installed, or the model ships nothing to parse with)."""


class ParserNeedsTokenizer(ParserUnavailable):
    """The engine is installed but its parsers read more of the model's tokenizer than a template-only folder's
    stand-in vocabulary can stand for (the audit runs at text level with one). Under ``--parser auto`` that engine has
    no verdict for the model, and the note says so, with ``why`` (what the stand-in cannot stand for) when known."""

    def __init__(self, message: str, why: str = "") -> None:
        super().__init__(message)
        self.why = why


class ParserRefused(ParserUnavailable):
    """The engine is installed but its parser cannot be built for this model: it refuses the model's tokenizer (vLLM's
    ``deepseek_r1`` reasoning parser finds no think tokens in it) or the model ships no tokenizer to give it. Under
    ``--parser auto`` that engine then has no verdict for the model, with this reason, and the other engines keep
    theirs."""


@dataclass(frozen=True)
class ParserChoice:
    """The parser an audit or session uses, and why that one."""

    name: str
    """``template``, ``hf``, ``sglang TOOL+REASONING`` or ``vllm TOOL+REASONING``."""
    parser: CompletionParser | None
    """None for ``template`` (the perfect inverse)."""
    why: str
    tool: str | None = None
    reasoning: str | None = None
    source: str = ""
    notes: list[str] = field(default_factory=list)
    """Why a parser that was asked for by default is not the one used (a missing extra, an unknown family)."""
    engine: str = ""
    """The serving engine whose parsers these are: ``sglang``, ``vllm``, or ``""`` (``template``, ``hf``, a
    caller's own parser object)."""

    @property
    def is_template(self) -> bool:
        return self.parser is None

    def describe(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "name": self.name,
            "tool": self.tool,
            "reasoning": self.reasoning,
            "why": self.why,
            "source": self.source,
        }
