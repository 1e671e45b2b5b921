"""Which parser a ``--parser`` value names, for a model.

- ``auto`` (the default): the model's SGLang pair when the registry records one and SGLang's parsers are
  installed, else ``template`` with a note saying why (a user behind SGLang or vLLM sees the verdict that applies
  to them; the parser used is recorded with the report, so a CI baseline compares like with like);
- ``template``: the perfect inverse (no parse);
- ``sglang``: the model's SGLang pair, by registry fact (``tito_audit/data/families.json``, with its source);
- ``hf``: transformers' ``parse_response`` with the tokenizer's response template;
- ``TOOL[,REASONING]``: SGLang parsers by name (``qwen25,qwen3``; ``none`` for no tool-call parser);
- ``vllm``: the model's vLLM pair, by registry fact (``vllm_parsers`` in the same file);
- ``vllm:TOOL[,REASONING]``: vLLM parsers by name (``vllm:hermes,qwen3``; ``vllm:none,deepseek_r1``).

Every choice names its engine (:attr:`~tito_audit.parse.parser.ParserChoice.engine`): ``sglang``, ``vllm``, or
``""`` for ``template``, ``hf`` and a caller's own parser object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tito_audit.errors import BadInputError
from tito_audit.model.registry import registry_parsers
from tito_audit.parse import sglang, vllm
from tito_audit.parse.parser import TEMPLATE, CompletionParser, ParserChoice, ParserUnavailable
from tito_audit.parse.transformers_template import TransformersParser

AUTO = "auto"
SGLANG = "sglang"
HF = "hf"
VLLM = "vllm"
VLLM_NAMES = "vllm:"
"""The prefix of vLLM parser names (``vllm:TOOL[,REASONING]``); bare names are SGLang's."""
KEYWORDS = (AUTO, TEMPLATE, SGLANG, HF, VLLM)
FORMS = "auto, template, sglang, vllm, hf, TOOL[,REASONING] or vllm:TOOL[,REASONING]"


def choose_parser(
    value: str | CompletionParser | None, model_id: str, tokenizer: Any, model_dir: Path | None = None
) -> ParserChoice:
    """The parser ``value`` names for ``model_id`` (see the module docstring), or ``value`` itself when it is a
    parser object (a library caller's own); bad values raise :class:`~tito_audit.errors.BadInputError` naming
    ``--parser``. ``model_dir``: the model's folder (vLLM's parsers load the model's own tokenizer from it)."""
    if value is not None and not isinstance(value, str):
        if not callable(getattr(value, "parse", None)):
            raise BadInputError(f"--parser: expected a name or an object with parse(), not {type(value).__name__}")
        return ParserChoice(str(getattr(value, "name", type(value).__name__)), value, "given by the caller")
    value = (value or AUTO).strip()
    if not value:
        raise BadInputError(f"--parser must not be empty ({FORMS})")
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
    if value == VLLM:
        pair = registry_parsers(model_id, engine=VLLM)
        if pair is None:
            raise BadInputError(
                f"--parser vllm: no vLLM parser pair is recorded for {model_id}; "
                "name them: --parser vllm:TOOL[,REASONING]"
            )
        why = f"the vLLM parsers documented for {model_id}"
        return _vllm(pair.tool, pair.reasoning, why, pair.source, model_dir)
    if value.startswith(VLLM_NAMES):
        tool_name, reasoning_name = _names(value, value[len(VLLM_NAMES) :])
        return _vllm(tool_name, reasoning_name, "asked for by name", "", model_dir)
    tool_name, reasoning_name = _names(value, value)
    return _sglang(tool_name, reasoning_name, "asked for by name", "")


def _names(value: str, names: str) -> tuple[str | None, str | None]:
    """``TOOL[,REASONING]`` as (tool-call parser, reasoning parser); ``none`` or nothing for no tool-call parser."""
    tool, _, reasoning = names.partition(",")
    tool_name = None if tool.strip().lower() in ("", "none") else tool.strip()
    reasoning_name = reasoning.strip() or None
    if tool_name is None and reasoning_name is None:
        raise BadInputError(f"--parser {value!r}: name a tool-call parser, a reasoning parser or both")
    return tool_name, reasoning_name


def _sglang(tool: str | None, reasoning: str | None, why: str, source: str) -> ParserChoice:
    parser = sglang.SGLangParser(tool, reasoning)
    return ParserChoice(parser.name, parser, why, tool, reasoning, source, engine=SGLANG)


def _vllm(tool: str | None, reasoning: str | None, why: str, source: str, model_dir: Path | None) -> ParserChoice:
    parser = vllm.VLLMParser(tool, reasoning, model_dir)
    return ParserChoice(parser.name, parser, why, tool, reasoning, source, engine=VLLM)


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
    """Refuse, before any model is loaded, a ``--parser`` value that cannot work for any model: an empty one, parser
    names the engine does not know, or ``sglang``/``vllm`` without that engine's parsers installed."""
    value = value.strip()
    if not value:
        raise BadInputError(f"--parser must not be empty ({FORMS})")
    if value in (AUTO, TEMPLATE, HF):
        return
    if value == SGLANG:
        sglang.tool_parser_names()  # raises ParserUnavailable, naming what to install
        return
    if value == VLLM:  # only whether vLLM is installed: its worker starts when a model is audited
        if not vllm.available():
            raise ParserUnavailable(f"--parser: vLLM's parsers are not installed; install them with: {vllm.INSTALL}")
        return
    if value.startswith(VLLM_NAMES):
        vllm.check_names(*_names(value, value[len(VLLM_NAMES) :]))
        return
    sglang.SGLangParser(*_names(value, value))
