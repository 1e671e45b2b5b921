"""vLLM's tool-call and reasoning parsers, by name, as vLLM's OpenAI server runs them on a finished completion.

(Interface first; the worker process that runs them follows in the next commits.)
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from tito_audit.conversations.conversation import Message
from tito_audit.errors import BadInputError
from tito_audit.parse.parser import ParseInput, ParserUnavailable

ENGINE = "vllm"
VERSION = "0.33.0"
PATH_ENV = "TITO_AUDIT_VLLM_PATH"
"""A folder holding vLLM and its run-time needs apart from this environment (``make vllm`` fills one)."""
FOLDER = "vllm-engine"
"""Where ``make vllm`` puts that folder: inside the virtual environment (``.venv/vllm-engine``)."""

INSTALL = f"make vllm (vLLM {VERSION}, CPU torch and their run-time needs in .venv/{FOLDER}; see the README)"
"""How to install the parsers without moving this environment's pins (README, "Install")."""


def engine_folder() -> Path | None:
    """The folder the worker process adds to its path for vLLM, or None when vLLM is importable here as it is."""
    given = os.environ.get(PATH_ENV, "").strip()
    if given:
        return Path(given).expanduser()
    beside = Path(sys.prefix) / FOLDER
    return beside if (beside / "vllm").is_dir() else None


def available() -> bool:
    """Whether vLLM's parsers can run here (vLLM is found; nothing is imported: importing vLLM imports torch)."""
    folder = engine_folder()
    if folder is not None:
        return (folder / "vllm" / "__init__.py").is_file()
    return importlib.util.find_spec("vllm") is not None


def _require() -> None:
    if not available():
        raise ParserUnavailable(f"--parser: vLLM's parsers are not installed; install them with: {INSTALL}")


def tool_parser_names() -> list[str]:
    _require()
    raise NotImplementedError


def reasoning_parser_names() -> list[str]:
    _require()
    raise NotImplementedError


def check_names(tool: str | None, reasoning: str | None) -> None:
    """Refuse parser names vLLM does not register (:class:`BadInputError` naming ``--parser`` and the known names)."""
    _require()
    raise NotImplementedError


class VLLMParser:
    """One vLLM tool-call parser and, optionally, one reasoning parser, for one model's tokenizer."""

    engine = ENGINE

    def __init__(self, tool: str | None, reasoning: str | None, model_dir: Path | None = None) -> None:
        _require()
        if tool is None and reasoning is None:
            raise BadInputError("--parser vllm: name a tool-call parser, a reasoning parser or both")
        self.tool = tool
        self.reasoning = reasoning
        self.model_dir = model_dir
        self.name = "vllm " + "+".join(part for part in (tool or "no tool parser", reasoning) if part)

    def parse(self, given: ParseInput) -> Message:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"engine": self.engine, "tool": self.tool, "reasoning": self.reasoning}
