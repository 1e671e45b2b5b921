"""How many tokens a model's context holds, as the engine serving it takes it: what bounds a prompt and the
``max_tokens`` a client asks for.

vLLM serves a model with the context its ``config.json`` names (``max_position_embeddings``, or its ``text_config``'s
for a multimodal model; older configs say ``n_positions``, ``seq_length`` or ``max_sequence_length``), scaled as the
config's ``rope_scaling`` says for the scalings that extend it (yarn, dynamic, linear: from
``original_max_position_embeddings`` when it is given, times ``factor``), unless it is started with
``--max-model-len``. The tokenizer's ``model_max_length`` is often larger (Qwen3-4B: 40,960 in the config, 131,072 in
the tokenizer) and is not what the engine serves: it counts only when the config names nothing. transformers fills
``model_max_length`` with about 10^30 when no file names one; a value past :data:`MAX_SANE_CONTEXT` is no context.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeGuard

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


def _sane(value: object) -> TypeGuard[int]:
    return type(value) is int and 1 <= value <= MAX_SANE_CONTEXT


EXTENDING_SCALINGS = ("yarn", "dynamic", "linear")
"""``rope_scaling`` types with which vLLM serves more than the config's positions (``factor`` times them)."""


def _from_config(loaded: LoadedModel) -> Context | None:
    try:
        config = json.loads((loaded.resolved.path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(config, dict):
        return None
    text_config = config.get("text_config")
    for scope, name in ((config, "config.json"), (text_config, "config.json text_config")):
        if not isinstance(scope, dict):
            continue
        for key in CONFIG_KEYS:
            value = scope.get(key)
            if _sane(value):
                return _scaled(scope, Context(value, f"{name} {key}"))
    return None


def _scaled(scope: dict[str, Any], context: Context) -> Context:
    """``context`` as a ``rope_scaling`` that extends the positions makes it (see the module docstring)."""
    scaling = scope.get("rope_scaling")
    if not isinstance(scaling, dict):
        return context
    kind = scaling.get("rope_type") or scaling.get("type")
    factor = scaling.get("factor")
    if kind not in EXTENDING_SCALINGS or not isinstance(factor, (int, float)) or factor <= 1:
        return context
    original = scaling.get("original_max_position_embeddings")
    base = original if _sane(original) else context.tokens
    tokens = int(base * factor)
    if not _sane(tokens) or tokens == context.tokens:
        return context
    return Context(tokens, f"{context.source} with rope_scaling {kind} x{factor:g}")


def _from_tokenizer(loaded: LoadedModel) -> Context | None:
    value = getattr(loaded.tokenizer, "model_max_length", None)
    return Context(value, "tokenizer model_max_length") if _sane(value) else None


def context_of(loaded: LoadedModel, max_model_len: int | None = None) -> Context:
    """The model's context (see the module docstring): ``max_model_len`` when given (the engine's
    ``--max-model-len``), else the config's, else the tokenizer's, else :data:`FALLBACK_CONTEXT`."""
    if max_model_len is not None:
        return Context(max_model_len, "--max-model-len")
    found = _from_config(loaded) or _from_tokenizer(loaded)
    return found or Context(FALLBACK_CONTEXT, "the cap for models whose files name no context")
