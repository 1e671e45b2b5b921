"""Which parsers a ``--parser`` value names, for a model.

- ``auto`` (the command line's default): every engine (:mod:`tito_audit.parse.engines`) whose documented parser
  pair the registry records for the model and whose parsers are installed, one parser verdict each; an engine
  whose pair is recorded but not installed gets a note saying so and how to install it; with none, ``template``
  (a user behind any engine sees the verdict that applies to them; the parsers used are recorded with the report,
  so a CI baseline compares like with like);
- ``template``: the perfect inverse (no parse);
- an engine's name (``sglang``): that engine's pair, by registry fact (``tito_audit/data/families.json``, with its
  source);
- ``hf``: transformers' ``parse_response`` with the tokenizer's response template;
- ``ENGINE:TOOL[,REASONING]``: that engine's parsers by name (``sglang:qwen25,qwen3``); ``TOOL[,REASONING]``
  without an engine names SGLang's (``qwen25,qwen3``; ``none`` for no tool-call parser).

:func:`choose_parsers` gives every parser an audit runs (:class:`ParserPlan`); :func:`choose_parser` the one a
session runs (``auto``: the first engine's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tito_audit.errors import BadInputError
from tito_audit.parse import engines
from tito_audit.parse.engines import engine_named, engine_names
from tito_audit.parse.interface import Engine
from tito_audit.parse.parser import (
    TEMPLATE,
    CompletionParser,
    ParserChoice,
    ParserNeedsTokenizer,
    ParserRefused,
    ParserUnavailable,
    engine_of,
)
from tito_audit.parse.transformers_template import TransformersParser

AUTO = "auto"
HF = "hf"


def names_help() -> str:
    """The values ``--parser`` takes, as errors list them."""
    return f"auto, template, an engine ({', '.join(engine_names())}), hf, TOOL[,REASONING] or ENGINE:TOOL[,REASONING]"


@dataclass(frozen=True)
class ParserPlan:
    """The parsers an audit runs, one per engine (none: the perfect inverse only), and the notes that say why an
    engine documented for the model is not among them."""

    choices: tuple[ParserChoice, ...]
    notes: tuple[str, ...] = ()

    @property
    def parsers(self) -> list[CompletionParser]:
        return [choice.parser for choice in self.choices if choice.parser is not None]


def choose_parsers(value: Any, model_id: str, tokenizer: Any, model_dir: Path | None = None) -> ParserPlan:
    """Every parser ``value`` names for ``model_id``: a ``--parser`` value (see the module docstring), a parser
    object (a library caller's own) or a list of those (one verdict each); bad values raise
    :class:`~tito_audit.errors.BadInputError` naming ``--parser``. ``model_dir``: the model's folder (vLLM's
    parsers load the model's own tokenizer from it)."""
    if isinstance(value, (list, tuple)):
        plans = [choose_parsers(item, model_id, tokenizer, model_dir) for item in value]
        choices = tuple(c for plan in plans for c in plan.choices if not c.is_template)
        return ParserPlan(choices, tuple(note for plan in plans for note in plan.notes))
    if isinstance(value, str) and value.strip() == AUTO:
        return engine_choices(model_id, tokenizer, model_dir)
    choice = choose_parser(value, model_id, tokenizer, model_dir)
    return ParserPlan(() if choice.is_template else (choice,), tuple(choice.notes))


def engine_choices(model_id: str, tokenizer: Any, model_dir: Path | None = None) -> ParserPlan:
    """``auto``: one parser per engine whose pair is recorded for ``model_id`` and installed, in the order of
    :data:`~tito_audit.parse.engines.ENGINES`; a note for each recorded engine whose parsers are not installed."""
    choices, notes = [], []
    for engine in engines.ENGINES:
        pair = engine.recorded(model_id)
        if pair is None:
            continue
        why = recorded_why(engine, model_id, pair.by_format, by_default=True)
        try:
            choices.append(_engine_choice(engine, pair.tool, pair.reasoning, why, pair.source, (tokenizer, model_dir)))
        except ParserNeedsTokenizer as needs:
            name = engine.parser_name(pair.tool, pair.reasoning)
            notes.append(
                f"{needs_tokenizer_prefix(engine)}{name}) read the model's tokenizer, which is not here "
                f"(a template-only model, audited at text level{'; ' + needs.why if needs.why else ''}), so there is "
                "no verdict with them"
            )
        except ParserRefused as refused:
            name = engine.parser_name(pair.tool, pair.reasoning)
            notes.append(f"{refused_prefix(engine)}{name}) {refused_why(refused)}")
        except ParserUnavailable:
            notes.append(
                f"{not_installed_prefix(engine)}{engine.parser_name(pair.tool, pair.reasoning)}) is not installed, so "
                f"there is no verdict with it; install it with: {engine.install}"
            )
    return ParserPlan(tuple(choices), tuple(notes))


def by_format_marker(engine: Engine) -> str:
    """What the reason says for an engine's parsers that no document of the engine names for the model, chosen
    because the model's template asks for their call format word for word (the matrix's ``<engine>_parser`` column
    says so beside the parsers)."""
    return f"no {engine.label} document names parsers for "


def recorded_why(engine: Engine, model_id: str, by_format: bool, by_default: bool) -> str:
    """Why ``engine``'s recorded pair is the one audited: documented for ``model_id``, or chosen by its template's call
    format; ``by_default`` when ``--parser`` named no engine (``auto``).

    >>> recorded_why(engines.ENGINES[0], "org/model", by_format=False, by_default=True)
    'default: the SGLang parsers documented for org/model'
    """
    said = "default: " if by_default else ""
    if by_format:
        return f"{said}{by_format_marker(engine)}{model_id}; these read the call format its template asks for"
    return f"{said}the {engine.label} parsers documented for {model_id}"


def needs_tokenizer_prefix(engine: Engine) -> str:
    """How the note begins that says an engine's parsers need the model's tokenizer, which is not here (the matrix's
    ``<engine>_parser`` column reads it: ``no tokenizer here``)."""
    return f"{engine.label}'s parsers ("


def refused_prefix(engine: Engine) -> str:
    """How the note begins that says an engine's parsers, installed and recorded for the model, cannot be built for
    it (the matrix's ``<engine>_parser`` column reads it: ``refused by the parser``)."""
    return f"{engine.label}'s parser refused ("


def refused_why(refused: ParserRefused) -> str:
    """The rest of that note: the engine's own reason, without the ``--parser NAME:`` it was raised with."""
    reason = str(refused).partition(": ")[2] or str(refused)
    return f"cannot be built for this model, so there is no verdict with it: {reason}"


def not_installed_prefix(engine: Engine) -> str:
    """How the note begins that says an engine's parsers, recorded for the model, are not installed (reports and the
    matrix's ``<engine>_parser`` column read it)."""
    return f"{engine.label}'s parser ("


def choose_parser(
    value: str | CompletionParser | None, model_id: str, tokenizer: Any, model_dir: Path | None = None
) -> ParserChoice:
    """The one parser ``value`` names for ``model_id`` (``auto``: the first engine's of :func:`engine_choices`), or
    ``value`` itself when it is a parser object (a library caller's own)."""
    if value is not None and not isinstance(value, str):
        if not callable(getattr(value, "parse", None)):
            raise BadInputError(f"--parser: expected a name or an object with parse(), not {type(value).__name__}")
        name = str(getattr(value, "name", type(value).__name__))
        return ParserChoice(name, value, "given by the caller", engine=engine_of(value))
    value = (value or AUTO).strip()
    if not value:
        raise BadInputError(f"--parser must not be empty ({names_help()})")
    if value == TEMPLATE:
        return ParserChoice(TEMPLATE, None, "asked for: the perfect inverse (the message the template rendered)")
    if value == HF:
        return ParserChoice(HF, TransformersParser(tokenizer), "asked for: transformers' parse_response")
    if value == AUTO:
        plan = engine_choices(model_id, tokenizer, model_dir)
        if plan.choices:
            first = plan.choices[0]
            return replace(first, notes=[*first.notes, *plan.notes])
        why = "default: no engine parser is installed for this model" if plan.notes else "default: none recorded"
        return ParserChoice(TEMPLATE, None, why, notes=list(plan.notes))
    engine = engine_named(value)
    if engine is not None:
        pair = engine.recorded(model_id)
        if pair is None:
            raise BadInputError(
                f"--parser {value}: no {engine.label} parser pair is recorded for {model_id}; "
                f"name them: --parser {value}:TOOL[,REASONING]"
            )
        why = recorded_why(engine, model_id, pair.by_format, by_default=False)
        return _engine_choice(engine, pair.tool, pair.reasoning, why, pair.source, (tokenizer, model_dir))
    engine, tool_name, reasoning_name = _named(value)
    return _engine_choice(engine, tool_name, reasoning_name, "asked for by name", "", (tokenizer, model_dir))


def _named(value: str) -> tuple[Engine, str | None, str | None]:
    """``ENGINE:TOOL[,REASONING]`` or ``TOOL[,REASONING]`` (the first engine's names)."""
    prefix, colon, names = value.partition(":")
    if colon:
        engine = engine_named(prefix.strip())
        if engine is None:
            known = ", ".join(engine_names())
            raise BadInputError(f"--parser {value!r}: unknown engine {prefix.strip()!r} (engines: {known})")
    else:
        engine, names = engines.ENGINES[0], value
    tool, _, reasoning = names.partition(",")
    tool_name = None if tool.strip().lower() in ("", "none") else tool.strip()
    reasoning_name = reasoning.strip() or None
    if tool_name is None and reasoning_name is None:
        raise BadInputError(f"--parser {value!r}: name a tool-call parser, a reasoning parser or both")
    return engine, tool_name, reasoning_name


def _engine_choice(
    engine: Engine, tool: str | None, reasoning: str | None, why: str, source: str, model: tuple[Any, Path | None]
) -> ParserChoice:
    """``model``: the model's tokenizer and folder, which some engines' parsers read."""
    parser = engine.build(tool, reasoning, *model)
    return ParserChoice(parser.name, parser, why, tool, reasoning, source, engine=engine.name)


def check_parser_value(value: str) -> None:
    """Refuse, before any model is loaded, a ``--parser`` value that cannot work for any model: an empty one, parser
    names that their engine does not know, or an engine whose parsers are not installed."""
    value = value.strip()
    if not value:
        raise BadInputError(f"--parser must not be empty ({names_help()})")
    if value in (AUTO, TEMPLATE, HF):
        return
    engine = engine_named(value)
    if engine is not None:
        if not engine.available():
            engine.check(None, None)  # raises the engine's own ParserUnavailable, naming what to install
            raise ParserUnavailable(
                f"--parser {value}: {engine.label}'s parsers are not installed; install them with: {engine.install}"
            )
        return
    engine, tool, reasoning = _named(value)
    engine.check(tool, reasoning)


def engines_planned(value: Any, model_id: str) -> list[str]:
    """The engines a ``--parser`` value audits ``model_id`` with, decided without loading or importing anything
    (:meth:`~tito_audit.parse.interface.Engine.installed`): what the matrix's results key records."""
    if not isinstance(value, str):
        return []
    value = value.strip()
    if value == AUTO:
        return [e.name for e in engines.ENGINES if e.recorded(model_id) is not None and e.installed()]
    if value in (TEMPLATE, HF):
        return []
    engine = engine_named(value)
    if engine is not None:
        return [engine.name]
    prefix, colon, _ = value.partition(":")
    return [prefix.strip()] if colon else [engines.ENGINES[0].name]


def start_ahead(value: Any, model_id: str) -> None:
    """Start, without waiting, what the engines ``value`` audits ``model_id`` with need before they answer (see
    :attr:`~tito_audit.parse.engines.Engine.start_ahead`): a caller about to load the model lets it start meanwhile."""
    for name in engines_planned(value, model_id):
        engine = engine_named(name)
        if engine is not None and engine.start_ahead is not None:
            engine.start_ahead()
