"""vLLM's encoders for engine-rendered models, run in vLLM's worker process (:mod:`tito_audit.model.engine_rendered`).

An engine-rendered model ships no chat template: vLLM renders it with an encoder of its own, picked by the
architecture ``config.json`` names (DeepSeek V4: ``vllm/tokenizers/deepseek_v4_encoding.py``). The audit renders
it the way vLLM's server does, in the worker (:mod:`tito_audit.parse.vllm_worker`, ``render``): each conversation is
sent as an OpenAI client sends it (a call's arguments as a JSON string), validated as vLLM's chat request (which
renames a message's ``reasoning_content`` to ``reasoning``) and rendered by vLLM's renderer for the model's tokenizer
mode; every prefix of one conversation goes in one request. tito-audit's own process never imports vLLM.

:func:`connect` gives a loaded engine-rendered model its :class:`VLLMEncoder` (the model stage cannot reach the
worker itself); every entry point that renders such a model calls it first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tito_audit.errors import ModelLoadError
from tito_audit.model.engine_rendered import ENGINE_ENCODER, EngineEncoder, RenderRefusal
from tito_audit.model.load_folder import LoadedModel
from tito_audit.parse.parser import ParserUnavailable
from tito_audit.parse.vllm import INSTALL, available, json_safe, model_files
from tito_audit.parse.vllm_messages import Op, RenderAnswer, RenderBody
from tito_audit.parse.vllm_process import OpenedModel, WorkerError


class VLLMEncoder:
    """One engine-rendered model's encoder, run in vLLM's worker (an
    :class:`~tito_audit.model.engine_rendered.EncoderRenderer`)."""

    def __init__(self, loaded: LoadedModel) -> None:
        assert loaded.encoder is not None
        self.encoder: EngineEncoder = loaded.encoder
        self.model_id = loaded.resolved.model_id
        self._model = OpenedModel(model_files(loaded.resolved.path))

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: list[dict] | None,
        kwargs: Mapping[str, Any],
        keys: Sequence[tuple[int, bool]],
    ) -> list[str | RenderRefusal]:
        """The text of each ``(k, add_generation_prompt)`` prefix as vLLM's server renders the request, or the
        reason it refuses; raises :class:`ModelLoadError` when the encoder cannot run at all."""
        body = RenderBody(
            messages=client_messages(messages),
            tools=tools,
            template_kwargs=json_safe(dict(kwargs)),
            prefixes=[(k, gp) for k, gp in keys],
        )
        try:
            running = self._model.open()
            answer: RenderAnswer = self._model.ask(running, Op.RENDER, body)
        except (WorkerError, ParserUnavailable) as exc:
            raise ModelLoadError(f"{self.model_id}: {self.encoder.label} cannot run in vLLM's worker: {exc}") from None
        return [
            text if isinstance(text, str) else RenderRefusal(str(error))
            for text, error in zip(answer["texts"], answer["errors"], strict=True)
        ]


def client_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as an OpenAI client sends them to vLLM's server: a call's arguments as a JSON string (vLLM's
    renderer parses them back into the object the encoder reads), everything else as JSON carries it."""
    sent = json_safe(list(messages))
    for message in sent:
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and not isinstance(function.get("arguments"), str):
                function["arguments"] = json.dumps(function.get("arguments") or {}, ensure_ascii=False)
    return sent


def connect(loaded: LoadedModel) -> LoadedModel:
    """Give an engine-rendered ``loaded`` the encoder that renders it (once; other models are left as they are), or
    raise :class:`ParserUnavailable` naming what to install when vLLM is not."""
    if loaded.backend != ENGINE_ENCODER or loaded.engine_renderer is not None:
        return loaded
    assert loaded.encoder is not None
    if not available():
        raise ParserUnavailable(
            f"{loaded.resolved.model_id} is {loaded.encoder.rendered_by}, which runs in vLLM's worker process; "
            f"install vLLM with: {INSTALL}"
        )
    loaded.engine_renderer = VLLMEncoder(loaded)
    return loaded
