"""The serving engines whose parsers the audit can run, one entry each (docs/contract.md "The parse step", "Engines
differ").

Each engine parses a completion with its own code, after handing it over in its own way, so the audit gives one
parser verdict per engine. An entry says how reports name the engine, where the registry records a model's
documented parser pair for it (``tito_audit/data/families.json``), how to build its parser for a pair, whether its
parsers can run here and how to install them. ``--parser auto`` audits with every engine whose pair is recorded for
the model and installed (:func:`tito_audit.parse.choice.engine_choices`); ``--parser NAME`` names one engine.

Another engine plugs in by one entry in :data:`ENGINES` (its adapter module in this package, its registry facts).
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tito_audit.model.registry import RegistryParsers, registry_parsers
from tito_audit.parse import sglang, vllm, vllm_process
from tito_audit.parse.parser import CompletionParser


@dataclass(frozen=True)
class Engine:
    """One serving engine whose parsers the audit runs."""

    name: str
    """How ``--parser`` and the reports name it (``sglang``); also the prefix of its parsers' names."""
    label: str
    """How prose names it (``SGLang``)."""
    module: str
    """The module its parsers come from (``llm_router_utils``): the key of its version in a report's libraries."""
    install: str
    """How to install its parsers (README, "Install")."""
    recorded: Callable[[str], RegistryParsers | None]
    """The model's documented parser pair for this engine, from the registry (None: none recorded)."""
    build: Callable[[str | None, str | None, Any, Path | None], CompletionParser]
    """``build(tool, reasoning, tokenizer, model_dir)``: the engine's parser for that pair and model (raises
    :class:`~tito_audit.parse.parser.ParserUnavailable` when its parsers are not installed,
    :class:`~tito_audit.errors.BadInputError` for a name it does not know)."""
    check: Callable[[str | None, str | None], None]
    """Refuse parser names the engine does not know (before any model is loaded)."""
    available: Callable[[], bool]
    """Whether its parsers can run here (may import them: seconds the first time)."""
    installed: Callable[[], bool]
    """Whether its parsers are installed, without importing them (cheap: the matrix asks it for every results key in
    the driver process, where importing an engine would cost seconds and memory)."""
    version: Callable[[], str | None]
    """The version of its parsers' package (None: not installed); it decides the engine's verdicts."""
    start_ahead: Callable[[], None] | None = None
    """Start, without waiting, what its parsers need before they answer (vLLM's worker process imports vLLM for
    seconds): called before the model loads, so that it starts meanwhile (None: nothing to start)."""

    def parser_name(self, tool: str | None, reasoning: str | None) -> str:
        """How reports name a pair of this engine's parsers (``sglang qwen25+qwen3``)."""
        return f"{self.name} " + "+".join(part for part in (tool or "no tool parser", reasoning) if part)


def _sglang_parser(tool: str | None, reasoning: str | None, tokenizer: Any, model_dir: Path | None) -> CompletionParser:
    return sglang.SGLangParser(tool, reasoning)


def _sglang_check(tool: str | None, reasoning: str | None) -> None:
    sglang.SGLangParser(tool, reasoning)  # refuses names SGLang does not know


def _vllm_parser(tool: str | None, reasoning: str | None, tokenizer: Any, model_dir: Path | None) -> CompletionParser:
    return vllm.VLLMParser(tool, reasoning, model_dir, tokenizer)


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _version(distribution: str, folder: Path | None = None) -> str | None:
    """The installed version of ``distribution`` (in ``folder`` when given: an engine kept apart from this
    environment), None when it is not installed."""
    if folder is not None:
        found = next(iter(importlib.metadata.distributions(name=distribution, path=[str(folder)])), None)
        return found.version if found is not None else None
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


ENGINES: tuple[Engine, ...] = (
    Engine(
        name=sglang.ENGINE,
        label="SGLang",
        module="llm_router_utils",
        install=sglang.INSTALL,
        recorded=registry_parsers,
        build=_sglang_parser,
        check=_sglang_check,
        available=sglang.available,
        installed=functools.partial(_found, "llm_router_utils"),
        version=functools.partial(_version, "llm-router-utils"),
    ),
    Engine(
        name=vllm.ENGINE,
        label="vLLM",
        module="vllm",
        install=vllm.INSTALL,
        recorded=functools.partial(registry_parsers, engine=vllm.ENGINE),
        build=_vllm_parser,
        check=vllm.check_names,
        available=vllm.available,
        installed=vllm.available,
        version=lambda: _version("vllm", vllm.engine_folder()),
        start_ahead=vllm_process.prestart,
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


def engine_words(engine: str, parser: str) -> str:
    """How prose names a parser: ``SGLang's parser qwen25+qwen3`` (for ``sglang qwen25+qwen3``), or the parser's name
    alone (``hf``, a caller's own)."""
    known = engine_named(engine) if engine else None
    return f"{known.label}'s parser {parser.removeprefix(engine + ' ')}" if known is not None else parser


def installed(engine: Engine) -> bool:
    """Whether the engine's parsers are installed (nothing imported)."""
    return engine.installed()


def engine_version(engine: Engine) -> str | None:
    return engine.version()


def recorded_engines(model_id: str) -> list[Engine]:
    """The engines whose parser pair the registry records for ``model_id``."""
    return [engine for engine in ENGINES if engine.recorded(model_id) is not None]
