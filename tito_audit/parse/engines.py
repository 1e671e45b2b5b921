"""The serving engines whose parsers the audit can run, one entry each (SPEC "The parse step", "Engines differ").

Each engine parses a completion with its own code, after handing it over in its own way, so the audit gives one
parser verdict per engine. An entry says how reports name the engine, where the registry records a model's
documented parser pair for it (``tito_audit/data/families.json``), how to build its parser for a pair, whether its
parsers can run here and how to install them. ``--parser auto`` audits with every engine whose pair is recorded for
the model and installed (:func:`tito_audit.parse.choice.engine_choices`); ``--parser NAME`` names one engine.

Another engine plugs in by one entry in :data:`ENGINES` (its adapter module in this package, its registry facts).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tito_audit.model.registry import RegistryParsers, registry_parsers
from tito_audit.parse import sglang
from tito_audit.parse.parser import CompletionParser


@dataclass(frozen=True)
class Engine:
    """One serving engine whose parsers the audit runs."""

    name: str
    """How ``--parser`` and the reports name it (``sglang``); also the prefix of its parsers' names."""
    label: str
    """How prose names it (``SGLang``)."""
    package: str
    """The distribution that brings its parsers (``llm-router-utils``): its version is recorded with every result."""
    module: str
    """The importable module of that distribution (checked without importing it: :func:`installed`)."""
    install: str
    """The command that installs its parsers (README, "Install")."""
    recorded: Callable[[str], RegistryParsers | None]
    """The model's documented parser pair for this engine, from the registry (None: none recorded)."""
    build: Callable[[str | None, str | None, Any], CompletionParser]
    """``build(tool, reasoning, tokenizer)``: the engine's parser for that pair (raises
    :class:`~tito_audit.parse.parser.ParserUnavailable` when its parsers are not installed,
    :class:`~tito_audit.errors.BadInputError` for a name it does not know)."""
    available: Callable[[], bool]
    """Whether its parsers import here (imports them: seconds the first time)."""

    def parser_name(self, tool: str | None, reasoning: str | None) -> str:
        """How reports name a pair of this engine's parsers (``sglang qwen25+qwen3``)."""
        return f"{self.name} " + "+".join(part for part in (tool or "no tool parser", reasoning) if part)


def _sglang_parser(tool: str | None, reasoning: str | None, tokenizer: Any) -> CompletionParser:
    return sglang.SGLangParser(tool, reasoning)


ENGINES: tuple[Engine, ...] = (
    Engine(
        name=sglang.ENGINE,
        label="SGLang",
        package="llm-router-utils",
        module="llm_router_utils",
        install=sglang.INSTALL,
        recorded=registry_parsers,
        build=_sglang_parser,
        available=sglang.available,
    ),
)
"""Every engine, in the order reports list them (the first is the one ``TOOL[,REASONING]`` names are read for)."""


def engine_named(name: str) -> Engine | None:
    return next((engine for engine in ENGINES if engine.name == name), None)


def engine_names() -> tuple[str, ...]:
    return tuple(engine.name for engine in ENGINES)


def engine_label(name: str) -> str:
    """``SGLang`` for ``sglang``; an engine this version does not know keeps its name."""
    engine = engine_named(name)
    return engine.label if engine is not None else name


def installed(engine: Engine) -> bool:
    """Whether the engine's distribution is installed, without importing it (cheap: the matrix asks it for every
    results key in the driver process, where importing an engine would cost seconds and memory)."""
    try:
        return importlib.util.find_spec(engine.module) is not None
    except (ImportError, ValueError):
        return False


def engine_version(engine: Engine) -> str | None:
    try:
        return importlib.metadata.version(engine.package)
    except importlib.metadata.PackageNotFoundError:
        return None


def recorded_engines(model_id: str) -> list[Engine]:
    """The engines whose parser pair the registry records for ``model_id``."""
    return [engine for engine in ENGINES if engine.recorded(model_id) is not None]
