"""Models a serving engine renders in code: no usable chat template, an encoder chosen by the architecture.

vLLM 0.33 renders some families with Python encoders of its own instead of a Jinja template: ``config.py``'s
``ModelConfig`` picks a tokenizer mode from the architecture ``config.json`` names (``DeepseekV4ForCausalLM`` →
``deepseek_v4``), and that mode picks the renderer (``renderers/registry.py``) and the tokenizer class whose
``apply_chat_template`` runs the encoder (``tokenizers/deepseek_v4.py`` → ``deepseek_v4_encoding.py``). Such a folder
is the *engine-rendered* kind: a real vocabulary, no template, and the encoder is the template (the prompt, the
history and the generation prompt all come from it). The encoder runs in vLLM's worker process
(:mod:`tito_audit.parse.vllm_encoder`), never in tito-audit's own.

This module holds the facts (which architecture, which tokenizer mode, what the encoder is called and which
keyword arguments it reads), tells a folder's kind and hands a render to the connected runner.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tito_audit.errors import ModelLoadError

ENGINE_ENCODER = "vllm-encoder"
"""The backend of an engine-rendered model (beside ``jinja`` and ``mistral-common``)."""


@dataclass(frozen=True)
class EngineEncoder:
    """One encoder vLLM renders a family with, and how vLLM picks it."""

    name: str
    """``DeepSeek V4``: how reports name it (``rendered by vLLM's DeepSeek V4 encoder``)."""
    architectures: tuple[str, ...]
    """The ``config.json`` architectures vLLM picks it for (``config/model.py``, ``tokenizer_mode`` ``auto``)."""
    mode: str
    """vLLM's tokenizer mode for them (``--tokenizer-mode``; it names the renderer too)."""
    source: str
    """The file of vLLM 0.33 that holds the encoder."""
    reads: tuple[str, ...]
    """The chat-template keyword arguments it reads (``--kwarg``): without a Jinja source none is swept."""
    renders_text: bool = True
    """Whether vLLM's renderer hands the engine the prompt as text, which tito-audit tokenizes as vLLM does (Kimi K3
    and Inkling are handed over as ids, tokenized piece by piece: not audited here)."""

    @property
    def label(self) -> str:
        """``vLLM's DeepSeek V4 encoder``."""
        return f"vLLM's {self.name} encoder"

    @property
    def rendered_by(self) -> str:
        """What a report says about the model's template: ``rendered by vLLM's DeepSeek V4 encoder (no Jinja
        template)``."""
        return f"rendered by {self.label} (no Jinja template)"


ENCODERS: tuple[EngineEncoder, ...] = (
    EngineEncoder(
        "DeepSeek V3.2",
        ("DeepseekV32ForCausalLM",),
        "deepseek_v32",
        "vllm/tokenizers/deepseek_v32_encoding.py",
        ("thinking", "enable_thinking"),
    ),
    EngineEncoder(
        "DeepSeek V4",
        ("DeepseekV4ForCausalLM", "DeepseekV4ForConditionalGeneration"),
        "deepseek_v4",
        "vllm/tokenizers/deepseek_v4_encoding.py",
        ("thinking", "enable_thinking", "reasoning_effort", "drop_thinking"),
    ),
    EngineEncoder(
        "DeepSeek V4.1",
        ("DeepseekV41ForCausalLM",),
        "deepseek_v41",
        "vllm/tokenizers/deepseek_v41_encoding.py",
        ("thinking", "enable_thinking", "reasoning_effort", "drop_thinking"),
    ),
    EngineEncoder(
        "Kimi K3",
        ("KimiK3ForConditionalGeneration",),
        "kimi_k3",
        "vllm/renderers/kimi_k3.py",
        ("thinking", "enable_thinking", "reasoning_effort"),
        renders_text=False,
    ),
    EngineEncoder(
        "Inkling",
        ("InklingForCausalLM", "InklingForConditionalGeneration"),
        "inkling",
        "vllm/renderers/inkling_encoding.py",
        ("reasoning_effort",),
        renders_text=False,
    ),
)


def encoder_for_architectures(architectures: Sequence[str]) -> EngineEncoder | None:
    """The encoder vLLM picks for a model of these architectures (the first it knows, as vLLM resolves the first
    architecture it supports), or None.

    >>> encoder_for_architectures(["DeepseekV4ForCausalLM"]).mode
    'deepseek_v4'
    >>> encoder_for_architectures(["Qwen3ForCausalLM"]) is None
    True
    """
    for architecture in architectures:
        for encoder in ENCODERS:
            if architecture in encoder.architectures:
                return encoder
    return None


def architectures_of(config: Path) -> tuple[str, ...]:
    """The ``architectures`` a ``config.json`` names (none when it is missing or unreadable)."""
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ()
    found = data.get("architectures") if isinstance(data, dict) else None
    return tuple(item for item in found if isinstance(item, str)) if isinstance(found, list) else ()


def encoder_of_folder(files: Mapping[str, Path]) -> EngineEncoder | None:
    """The encoder vLLM renders the model of ``files`` (name -> file, as a resolved model lists them) with, from its
    ``config.json``; None for a model vLLM renders through its chat template."""
    config = files.get("config.json")
    return encoder_for_architectures(architectures_of(config)) if config is not None else None


class EncoderRenderer(Protocol):
    """What renders an engine-rendered model's conversations (:mod:`tito_audit.parse.vllm_encoder` runs the encoder
    in vLLM's worker): for each ``(k, add_generation_prompt)`` the text of ``messages[:k]``, or the one-line reason
    the engine refused it."""

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: list[dict] | None,
        kwargs: Mapping[str, Any],
        keys: Sequence[tuple[int, bool]],
    ) -> list[str | RenderRefusal]: ...


@dataclass(frozen=True)
class RenderRefusal:
    """The engine refused to render a prefix (vLLM's server would answer the request with an error)."""

    reason: str


class EngineRenderedModel(Protocol):
    """What :func:`encoder_texts` reads of a loaded model (a :class:`~tito_audit.model.load_folder.LoadedModel`)."""

    @property
    def encoder(self) -> EngineEncoder | None: ...

    @property
    def engine_renderer(self) -> EncoderRenderer | None: ...


def encoder_texts(
    model: EngineRenderedModel,
    kwargs: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    tools: list[dict] | None,
    keys: Sequence[tuple[int, bool]],
    max_chars: int,
) -> list[str | RenderRefusal]:
    """The text of each ``(k, add_generation_prompt)`` prefix of ``messages`` as the engine-rendered ``model`` (a
    loaded model) renders it through the encoder connected to it, a render longer than ``max_chars`` refused; raises
    when no encoder runner is connected, or when it fails."""
    engine = model.engine_renderer
    if engine is None:
        encoder = model.encoder
        name = encoder.label if encoder is not None else "the engine's encoder"
        raise ModelLoadError(
            f"{name} runs in vLLM's worker process, which this caller did not connect "
            "(tito_audit.parse.vllm_encoder.connect)"
        )
    out: list[str | RenderRefusal] = []
    for text in engine.render(messages, tools, kwargs, keys):
        too_long = isinstance(text, str) and len(text) > max_chars
        out.append(RenderRefusal(f"output longer than {max_chars} characters") if too_long else text)
    return out
