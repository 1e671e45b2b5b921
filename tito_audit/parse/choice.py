"""Which parser a ``--parser`` value names, for a model.

- ``auto`` (the default): the model's SGLang pair when the registry records one and SGLang's parsers are
  installed, else ``template`` with a note saying why (a user behind SGLang or vLLM sees the verdict that applies
  to them; the parser used is recorded with the report, so a CI baseline compares like with like);
- ``template``: the perfect inverse (no parse);
- ``sglang``: the model's SGLang pair, by registry fact (``tito_audit/data/families.json``, with its source);
- ``hf``: transformers' ``parse_response`` with the tokenizer's response template;
- ``TOOL[,REASONING]``: SGLang parsers by name (``qwen25,qwen3``; ``none`` for no tool-call parser).
"""

from __future__ import annotations

from typing import Any

from tito_audit.errors import BadInputError
from tito_audit.model.registry import registry_parsers
from tito_audit.parse import sglang
from tito_audit.parse.parser import TEMPLATE, CompletionParser, ParserChoice, ParserUnavailable
from tito_audit.parse.transformers_template import TransformersParser

AUTO = "auto"
SGLANG = "sglang"
HF = "hf"
KEYWORDS = (AUTO, TEMPLATE, SGLANG, HF)


def choose_parser(value: str | CompletionParser | None, model_id: str, tokenizer: Any) -> ParserChoice:
    """The parser ``value`` names for ``model_id`` (see the module docstring), or ``value`` itself when it is a
    parser object (a library caller's own); bad values raise :class:`~tito_audit.errors.BadInputError` naming
    ``--parser``."""
    if value is not None and not isinstance(value, str):
        if not callable(getattr(value, "parse", None)):
            raise BadInputError(f"--parser: expected a name or an object with parse(), not {type(value).__name__}")
        return ParserChoice(str(getattr(value, "name", type(value).__name__)), value, "given by the caller")
    value = (value or AUTO).strip()
    if not value:
        raise BadInputError("--parser must not be empty (auto, template, sglang, hf or TOOL[,REASONING])")
    if value == TEMPLATE:
        return ParserChoice(TEMPLATE, None, "asked for: the perfect inverse (the message the template rendered)")
    if value == HF:
        return ParserChoice(HF, TransformersParser(tokenizer), "asked for: transformers' parse_response")
    if value == AUTO:
        return _default(model_id)
    if value == SGLANG:
        pair = registry_parsers(model_id)
        if pair is None:
            raise BadInputError(
                f"--parser sglang: no SGLang parser pair is recorded for {model_id}; "
                "name them: --parser TOOL[,REASONING]"
            )
        return _sglang(pair.tool, pair.reasoning, f"the SGLang parsers documented for {model_id}", pair.source)
    tool, _, reasoning = value.partition(",")
    tool_name = None if tool.strip().lower() in ("", "none") else tool.strip()
    reasoning_name = reasoning.strip() or None
    if tool_name is None and reasoning_name is None:
        raise BadInputError(f"--parser {value!r}: name a tool-call parser, a reasoning parser or both")
    return _sglang(tool_name, reasoning_name, "asked for by name", "")


def _sglang(tool: str | None, reasoning: str | None, why: str, source: str) -> ParserChoice:
    parser = sglang.SGLangParser(tool, reasoning)
    return ParserChoice(parser.name, parser, why, tool, reasoning, source)


def _default(model_id: str) -> ParserChoice:
    pair = registry_parsers(model_id)
    if pair is None:
        return ParserChoice(
            TEMPLATE,
            None,
            "default: no engine parser is recorded for this model (name one with --parser TOOL[,REASONING])",
        )
    wanted = "sglang " + "+".join(part for part in (pair.tool or "no tool parser", pair.reasoning) if part)
    try:
        return _sglang(pair.tool, pair.reasoning, f"default: the SGLang parsers documented for {model_id}", pair.source)
    except ParserUnavailable:
        note = (
            f"the engine's parser ({wanted}) is not installed, so only the perfect-inverse verdict is given; "
            f"install it with: {sglang.INSTALL}"
        )
        return ParserChoice(TEMPLATE, None, "default: the engine's parser is not installed", notes=[note])


def check_parser_value(value: str) -> None:
    """Refuse, before any model is loaded, a ``--parser`` value that cannot work for any model: an empty one, SGLang
    parser names that SGLang does not know, or ``sglang`` without SGLang's parsers installed."""
    value = value.strip()
    if not value:
        raise BadInputError("--parser must not be empty (auto, template, sglang, hf or TOOL[,REASONING])")
    if value in (AUTO, TEMPLATE, HF):
        return
    if value == SGLANG:
        sglang.tool_parser_names()  # raises ParserUnavailable, naming what to install
        return
    tool, _, reasoning = value.partition(",")
    sglang.SGLangParser(None if tool.strip().lower() in ("", "none") else tool.strip(), reasoning.strip() or None)
