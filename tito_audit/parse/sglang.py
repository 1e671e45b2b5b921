"""SGLang's tool-call and reasoning parsers, by name, as SGLang's OpenAI server runs them on a finished completion.

The parsers come from the optional extra ``llm-router-utils`` (SGLang's parsers without the engine), installed with
``pip install --no-deps`` so that its pinned transformers and openai do not move ours (see the README). What the
server does with a completion, and so what this adapter does:

1. the reasoning parser splits ``reasoning_content`` from the rest (forced into reasoning from the first token when
   the prompt opened the block, as SGLang does when it detects that from the template);
2. when tools were declared, the tool-call parser takes the calls out of the rest; the content is the detector's
   normal text, also when it found no complete call (the unfinished call is dropped); a parse that raises leaves
   the whole text as content and no call (SGLang logs and moves on);
3. each call gets a new id: ``call_`` and 24 hex digits (``functions.NAME:N`` for ``kimi_k2``), here derived from
   the completion instead of drawn at random, so that reports are reproducible;
4. content is the remaining text (``null`` in the response when empty).

When the next prompt is rendered, SGLang turns each call's ``arguments`` (a JSON string in the OpenAI response)
back into an object and a ``null`` content into ``""`` for the template; the message returned here is already in
that form, the one the next render sees.
"""

from __future__ import annotations

import hashlib
import json
import logging
from functools import cache
from pathlib import Path
from typing import Any

from tito_audit.conversations.conversation import ASSISTANT, Message
from tito_audit.errors import BadInputError
from tito_audit.model.threads import first_import
from tito_audit.parse.interface import Engine, distribution_version, module_found
from tito_audit.parse.parser import ParseInput, ParserUnavailable

ENGINE = "sglang"
"""How reports and ``--parser`` name this engine (:mod:`tito_audit.parse.engines`)."""
INSTALL = 'pip install -e ".[sglang]" && pip install --no-deps llm-router-utils==0.8.1'
"""How to install the parsers without moving the pinned transformers (README, "Install")."""


@cache
def _modules() -> tuple[Any, Any, Any]:
    """SGLang's parser classes (imported once, on first use: they take about two seconds)."""
    try:
        logging.getLogger("llm_router_utils").setLevel(logging.CRITICAL)
        with first_import():  # they import transformers' modules too (see tito_audit.model.threads)
            from llm_router_utils.sglang.srt.entrypoints.openai.protocol import Tool
            from llm_router_utils.sglang.srt.function_call.function_call_parser import FunctionCallParser
            from llm_router_utils.sglang.srt.parser.reasoning_parser import ReasoningParser
    except ImportError as exc:
        raise ParserUnavailable(
            f"--parser: SGLang's parsers are not installed ({exc.name or exc}); install them with: {INSTALL}"
        ) from None
    return FunctionCallParser, ReasoningParser, Tool


def available() -> bool:
    """Whether SGLang's parsers can be imported here."""
    try:
        _modules()
    except ParserUnavailable:
        return False
    return True


def tool_parser_names() -> list[str]:
    return sorted(_modules()[0].ToolCallParserEnum)


def reasoning_parser_names() -> list[str]:
    return sorted(_modules()[1].DetectorMap)


class SGLangParser:
    """One SGLang tool-call parser and, optionally, one reasoning parser."""

    engine = ENGINE

    def __init__(self, tool: str | None, reasoning: str | None) -> None:
        function_call_parser, reasoning_parser, _ = _modules()
        if tool is not None and tool not in function_call_parser.ToolCallParserEnum:
            raise BadInputError(
                f"--parser: unknown SGLang tool-call parser {tool!r} (known: {', '.join(tool_parser_names())})"
            )
        if reasoning is not None and reasoning.lower() not in reasoning_parser.DetectorMap:
            raise BadInputError(
                f"--parser: unknown SGLang reasoning parser {reasoning!r} "
                f"(known: {', '.join(reasoning_parser_names())})"
            )
        self.tool = tool
        self.reasoning = reasoning
        self.name = f"{ENGINE} " + "+".join(part for part in (tool or "no tool parser", reasoning) if part)

    def parse(self, given: ParseInput) -> Message:
        function_call_parser, reasoning_parser, tool_type = _modules()
        text: str = given.text
        reasoning_text: str | None = None
        if self.reasoning is not None:
            splitter = reasoning_parser(
                self.reasoning, stream_reasoning=False, force_reasoning=True if given.reasoning_open else None
            )
            reasoning_text, text = splitter.parse_non_stream(text)
            text = text or ""
        calls: list[dict[str, Any]] = []
        if self.tool is not None and given.tools:
            schemas = [tool_type(**tool) for tool in given.tools]
            finder = function_call_parser(schemas, self.tool)
            if finder.has_tool_call(text):
                try:
                    text, found = finder.parse_non_stream(text)
                except Exception:  # SGLang logs the error and answers with the text as it was
                    found = []
                # with no complete call, the content is the detector's normal text (SGLang drops the rest)
                calls = [self._call(item, index, given) for index, item in enumerate(found)]
        message: Message = {"role": ASSISTANT, "content": text}
        if reasoning_text:
            message["reasoning_content"] = reasoning_text
        if calls:
            message["tool_calls"] = calls
        return message

    def _call(self, item: Any, index: int, given: ParseInput) -> dict[str, Any]:
        if self.tool == "kimi_k2":
            call_id = f"functions.{item.name}:{given.earlier_calls + index}"
        else:
            digest = hashlib.sha256(f"{given.call_id_seed}:{index}:{item.name}".encode()).hexdigest()
            call_id = f"call_{digest[:24]}"
        return {"id": call_id, "type": "function", "function": {"name": item.name, "arguments": _arguments(item)}}


def _arguments(item: Any) -> Any:
    """The call's arguments as the next render sees them: SGLang parses the JSON string back into an object (a
    string that is not a JSON object stays a string, and that render is refused by SGLang itself)."""
    raw = item.parameters
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return raw
    return value if isinstance(value, dict) else raw


class SGLangEngine(Engine):
    """SGLang's parsers, as llm-router-utils packages them (run in this process)."""

    name = ENGINE
    label = "SGLang"
    module = "llm_router_utils"
    install = INSTALL

    def build(self, tool: str | None, reasoning: str | None, tokenizer: Any, model_dir: Path | None) -> SGLangParser:
        return SGLangParser(tool, reasoning)

    def check(self, tool: str | None, reasoning: str | None) -> None:
        SGLangParser(tool, reasoning)  # refuses names SGLang does not know

    def available(self) -> bool:
        return available()

    def installed(self) -> bool:
        return module_found("llm_router_utils")

    def version(self) -> str | None:
        return distribution_version("llm-router-utils")
