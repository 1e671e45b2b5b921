"""Parsing a completion while it is sampled: text in, pieces of the assistant message out.

A parser that can read a completion piece by piece (SGLang's detectors: ``parse_streaming_increment``) gives an
:class:`IncrementalParser`; one that needs the whole completion (``hf``: transformers' ``parse_response``; the
perfect inverse, ``template``; vLLM's parsers, which run in a worker process; a caller's own parser object) gives
none, with the reason, and a server answers its stream once the completion is whole. What :func:`incremental`
returns reads the text as SGLang's OpenAI server does for a streamed chat request: the reasoning parser first, its
normal text through the tool-call parser (only when tools were declared), and at the end of the stream what either
held back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from tito_audit.parse.sglang import SGLangParser, _modules


@dataclass(frozen=True)
class CallPiece:
    """A piece of one tool call: its name when the parser first names it, then pieces of its arguments' text."""

    index: int
    name: str | None = None
    arguments: str = ""


@dataclass
class Increment:
    """What one piece of text added to the message."""

    reasoning: str = ""
    content: str = ""
    calls: list[CallPiece] = field(default_factory=list)

    def add(self, other: Increment) -> Increment:
        self.reasoning += other.reasoning
        self.content += other.content
        self.calls += other.calls
        return self


class IncrementalParser(Protocol):
    def feed(self, text: str) -> Increment:
        """The message's pieces in ``text``, the next piece of the completion's text."""
        ...

    def end(self) -> Increment:
        """What the parser held back (a marker that may have been starting), once the completion ended."""
        ...


def incremental(parser: Any, tools: list[dict] | None, reasoning_open: bool) -> tuple[IncrementalParser | None, str]:
    """The incremental form of ``parser`` for one completion, or None and why it cannot stream."""
    if parser is None:
        return None, "the template parser answers with the message the engine rendered, known once the turn ends"
    if isinstance(parser, SGLangParser):
        return SGLangStream(parser, tools, reasoning_open), ""
    name = getattr(parser, "name", type(parser).__name__)
    if getattr(parser, "engine", "") == "vllm":
        return None, (
            f"the parser {name} runs in vLLM's worker process, where its streaming parse (parse_delta, one parser "
            "state per stream) is not wired to tito-audit's stream: the whole completion is parsed once it ends"
        )
    return None, f"the parser {name} reads whole completions only"


class SGLangStream:
    """SGLang's reasoning and tool-call detectors fed piece by piece (``parse_stream_chunk``, ``parse_stream_end``)."""

    def __init__(self, parser: SGLangParser, tools: list[dict] | None, reasoning_open: bool) -> None:
        function_call_parser, reasoning_parser, tool_type = _modules()
        self._reasoning = (
            reasoning_parser(parser.reasoning, stream_reasoning=True, force_reasoning=True if reasoning_open else None)
            if parser.reasoning is not None
            else None
        )
        self._tools = (
            function_call_parser([tool_type(**tool) for tool in tools], parser.tool)
            if parser.tool is not None and tools
            else None
        )

    def feed(self, text: str) -> Increment:
        reasoning = None
        if self._reasoning is not None:
            reasoning, text = self._reasoning.parse_stream_chunk(text)
        return self._normal(text or "").add(Increment(reasoning=reasoning or ""))

    def end(self) -> Increment:
        out = Increment()
        if self._reasoning is not None:
            reasoning, text = self._reasoning.parse_stream_end()
            out.reasoning += reasoning or ""
            out.add(self._normal(text or ""))
        if self._tools is not None:
            text, calls = self._tools.parse_stream_end()
            out.add(Increment(content=text or "", calls=_pieces(calls)))
        return out

    def _normal(self, text: str) -> Increment:
        if self._tools is None or not text:
            return Increment(content=text)
        try:
            normal, calls = self._tools.parse_stream_chunk(text)
        except Exception:  # SGLang logs a detector's error and goes on; the final parse decides the message
            return Increment()
        return Increment(content=normal or "", calls=_pieces(calls))


def _pieces(calls: list[Any]) -> list[CallPiece]:
    return [CallPiece(int(call.tool_index), call.name or None, call.parameters or "") for call in calls or []]
