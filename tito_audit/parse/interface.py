"""What a serving engine whose parsers the audit runs is: the one interface every engine implements.

An engine parses a completion with its own code after handing it over its own way, so the audit gives one parser
verdict per engine (docs/contract.md "The parse step", "Engines differ"). Another engine (TensorRT-LLM's parsers,
say) is one subclass of :class:`Engine` in a module of its own in this package, one instance in
:data:`tito_audit.parse.engines.ENGINES`, and its documented parser pairs as ``<name>_parsers`` in
``tito_audit/data/families.json``; the reports' columns, the matrix's results key and ``--parser NAME`` follow from
the instance.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from tito_audit.model.registry import RegistryParsers, registry_parsers
from tito_audit.parse.parser import CompletionParser


class Engine(ABC):
    """One serving engine whose parsers the audit runs."""

    name: str
    """How ``--parser`` and the reports name it (``sglang``); also the prefix of its parsers' names and of its
    columns in the matrix (``sglang_verdict``)."""
    label: str
    """How prose names it (``SGLang``)."""
    module: str
    """The module its parsers come from (``llm_router_utils``): the key of its version in a report's libraries."""
    install: str
    """How to install its parsers (README, "Install")."""

    @abstractmethod
    def build(
        self, tool: str | None, reasoning: str | None, tokenizer: Any, model_dir: Path | None
    ) -> CompletionParser:
        """The engine's parser for that pair and model (raises :class:`~tito_audit.parse.parser.ParserUnavailable`
        when its parsers are not installed, :class:`~tito_audit.errors.BadInputError` for a name it does not
        know)."""

    @abstractmethod
    def check(self, tool: str | None, reasoning: str | None) -> None:
        """Refuse parser names the engine does not know (before any model is loaded)."""

    @abstractmethod
    def available(self) -> bool:
        """Whether its parsers can run here (may import them: seconds the first time)."""

    @abstractmethod
    def installed(self) -> bool:
        """Whether its parsers are installed, without importing them (cheap: the matrix asks it for every results
        key in the driver process, where importing an engine would cost seconds and memory)."""

    @abstractmethod
    def version(self) -> str | None:
        """The version of its parsers' package (None: not installed); it decides the engine's verdicts."""

    def recorded(self, model_id: str) -> RegistryParsers | None:
        """The model's documented parser pair for this engine, from the registry (None: none recorded)."""
        return registry_parsers(model_id, engine=self.name)

    def start_ahead(self) -> None:
        """Start, without waiting, what its parsers need before they answer (vLLM's worker process imports vLLM for
        seconds): called before the model loads, so that it starts meanwhile. Nothing, unless an engine says so."""
        return None

    def parser_name(self, tool: str | None, reasoning: str | None) -> str:
        """How reports name a pair of this engine's parsers (``sglang qwen25+qwen3``)."""
        return f"{self.name} " + "+".join(part for part in (tool or "no tool parser", reasoning) if part)


def module_found(module: str) -> bool:
    """Whether ``module`` is importable here, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def distribution_version(distribution: str, folder: Path | None = None) -> str | None:
    """The installed version of ``distribution`` (in ``folder`` when given: an engine kept apart from this
    environment), None when it is not installed."""
    if folder is not None:
        found = next(iter(importlib.metadata.distributions(name=distribution, path=[str(folder)])), None)
        return found.version if found is not None else None
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
