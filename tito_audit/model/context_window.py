"""How many tokens a model's context holds, as its files say: what bounds a ``max_tokens`` a client asks for.

``config.json`` names the context the model was trained with (``max_position_embeddings``, or its ``text_config``'s
for a multimodal model; older configs say ``n_positions``, ``seq_length`` or ``max_sequence_length``); the
tokenizer's ``model_max_length`` is often the context with rope scaling (Qwen2.5: 32,768 in the config, 131,072 in
the tokenizer). Both are claims, not guarantees, so the larger sane one is taken: the bound is there to refuse a
``max_tokens`` no model holds (10^12), not to second-guess the engine. transformers fills ``model_max_length`` with
about 10^30 when no file names one; a value past :data:`MAX_SANE_CONTEXT` is no context.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tito_audit.model.load_folder import LoadedModel

MAX_SANE_CONTEXT = 1 << 24
"""16,777,216 tokens: a context claimed past this is a placeholder, not a model's."""
FALLBACK_CONTEXT = 1 << 20
"""1,048,576 tokens: the bound when no file of the model names its context."""
CONFIG_KEYS = ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length")


@dataclass(frozen=True)
class Context:
    tokens: int
    source: str
    """Where the number comes from: ``config.json max_position_embeddings``, ``tokenizer model_max_length`` or
    the fallback."""


def _sane(value: Any) -> bool:
    return type(value) is int and 1 <= value <= MAX_SANE_CONTEXT


def _from_config(loaded: LoadedModel) -> Context | None:
    try:
        config = json.loads((loaded.resolved.path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(config, dict):
        return None
    text_config = config.get("text_config")
    for scope, name in ((config, "config.json"), (text_config, "config.json text_config")):
        for key in CONFIG_KEYS if isinstance(scope, dict) else ():
            if _sane(scope.get(key)):
                return Context(scope[key], f"{name} {key}")
    return None


def _from_tokenizer(loaded: LoadedModel) -> Context | None:
    value = getattr(loaded.tokenizer, "model_max_length", None)
    return Context(value, "tokenizer model_max_length") if _sane(value) else None


def context_of(loaded: LoadedModel) -> Context:
    """The model's context (see the module docstring); :data:`FALLBACK_CONTEXT` when its files name none."""
    found = [c for c in (_from_config(loaded), _from_tokenizer(loaded)) if c is not None]
    if not found:
        return Context(FALLBACK_CONTEXT, "the cap for models whose files name no context")
    return max(found, key=lambda c: c.tokens)
