"""The serving engines whose parsers the audit can run, one entry each (docs/contract.md "The parse step", "Engines
differ").

Each engine parses a completion with its own code, after handing it over in its own way, so the audit gives one
parser verdict per engine. An entry says how reports name the engine, where the registry records a model's
documented parser pair for it (``tito_audit/data/families.json``), how to build its parser for a pair, whether its
parsers can run here and how to install them. ``--parser auto`` audits with every engine whose pair is recorded for
the model and installed (:func:`tito_audit.parse.choice.engine_choices`); ``--parser NAME`` names one engine.

Another engine plugs in as :mod:`tito_audit.parse.interface` says: its :class:`~tito_audit.parse.interface.Engine` in
a module of its own, one instance here, its registry facts.
"""

from __future__ import annotations

from tito_audit.parse.interface import Engine
from tito_audit.parse.sglang import SGLangEngine
from tito_audit.parse.vllm import VLLMEngine

ENGINES: tuple[Engine, ...] = (SGLangEngine(), VLLMEngine())
"""Every engine, in the order reports list them (the first is the one ``TOOL[,REASONING]`` names are read for)."""


def engine_named(name: str) -> Engine | None:
    return next((engine for engine in ENGINES if engine.name == name), None)


def engine_names() -> tuple[str, ...]:
    return tuple(engine.name for engine in ENGINES)


def engine_label(name: str) -> str:
    """``SGLang`` for ``sglang``; an engine this version does not know keeps its name."""
    engine = engine_named(name)
    return engine.label if engine is not None else name


def engine_words(engine: str, parser: str) -> str:
    """How prose names a parser: ``SGLang's parser qwen25+qwen3`` (for ``sglang qwen25+qwen3``), or the parser's name
    alone (``hf``, a caller's own)."""
    known = engine_named(engine) if engine else None
    return f"{known.label}'s parser {parser.removeprefix(engine + ' ')}" if known is not None else parser


def recorded_engines(model_id: str) -> list[Engine]:
    """The engines whose parser pair the registry records for ``model_id``."""
    return [engine for engine in ENGINES if engine.recorded(model_id) is not None]
