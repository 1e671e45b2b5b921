"""The vLLM worker process: vLLM's own code run on what tito-audit sends (``python -m tito_audit.parse.vllm_worker``).

Only :mod:`tito_audit.parse.vllm` starts it, in a process of its own whose path holds vLLM and torch; tito-audit's
own process never imports this module (importing vLLM imports torch, and with torch importable transformers takes
other code paths). It reads requests from standard input and writes answers to the descriptor standard output had
when it started; anything vLLM prints goes to standard error. Each message is a 4-byte big-endian length and that
many bytes of JSON. It ends when its standard input closes, and ignores Ctrl-C (its parent ends it).

What it runs, step by step as vLLM 0.33's OpenAI server does (files under ``vllm/``):

- ``open``: the model's tokenizer, loaded by ``tokenizers/registry.py`` ``get_tokenizer`` (mistral-common for a
  folder with Mistral's ``tekken.json``, as the server's ``--tokenizer-mode auto`` does for a Mistral repository),
  and the parser class ``parser/parser_manager.py`` ``ParserManager.get_parser`` composes for the two names with
  auto tool choice on (harmony for a ``gpt_oss`` model, as ``entrypoints/openai/chat_completion/serving.py`` asks),
  checked against that tokenizer as the server checks it at start-up;
- ``hand_over``: the text the engine hands the parser. The request (``ChatCompletionRequest``: the tools, so
  ``tool_choice`` is ``auto`` with tools and ``none`` without, and the template's keyword arguments) is adjusted by a
  parser made for it as ``renderers/online_renderer.py`` does (``adjust_request``: some parsers turn
  ``skip_special_tokens`` off when tools are declared); its ``to_sampling_params`` gives the decoding settings, and the
  engine's own detokenizer (``v1/engine/detokenizer.py``, primed with the prompt's ids) decodes the sampled ids, the
  stop token left out when generation ended on it (``update(..., stop_terminated)``);
- ``parse``: a new parser for the request (``serving.py`` ``_make_parser``: one per request), the prompt's ids set,
  the calls earlier in the conversation counted, ``Parser.parse`` on the handed text and the sampled ids, and the
  message fields picked as ``entrypoints/openai/chat_completion/message_assembly.py``
  ``assemble_chat_message_fields`` picks them (call ids included, random where vLLM draws them);
- ``render`` (an engine-rendered model: no chat template, an encoder picked by the architecture): each prefix of the
  conversation as the server renders a chat request (``renderers/online_renderer.py`` ``preprocess_chat``): the
  request validated as ``ChatCompletionRequest`` (which renames a message's ``reasoning_content`` to ``reasoning``,
  ``chat_completion/protocol.py``), its tools dumped, its chat parameters built, and the renderer of the model's
  tokenizer mode (``renderers/registry.py``: ``DeepseekV4Renderer`` for ``deepseek_v4``) rendering the messages
  (``parse_chat_messages``, then the tokenizer's encoder); the text it hands the engine, or why it refused.

``open`` loads a folder's files, or, for a template-only model, the stand-in vocabulary tito-audit built (its files
sent with the request: only parsers that read no more than the special tokens' ids are opened on one).

The requests and answers are typed in :mod:`tito_audit.parse.vllm_messages`, which the client imports too.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from tito_audit.errors import one_line
from tito_audit.parse.vllm_messages import (
    ErrorAnswer,
    ErrorKind,
    HandOverAnswer,
    HandOverRequest,
    HelloAnswer,
    ModelRequest,
    NamesAnswer,
    Op,
    OpenAnswer,
    OpenRequest,
    ParseAnswer,
    ParseRequest,
    RenderAnswer,
    RenderRequest,
    error,
    read_message,
    write_message,
)
from tito_audit.parse.vllm_process import tokenizer_mode

PROBE_TOOLS = [{"type": "function", "function": {"name": "probe", "parameters": {"type": "object", "properties": {}}}}]
"""A request's tools, for asking what a parser's adjustment does to a request that declares some."""
RENDERER_CONFIG = {"renderer_num_workers": 1, "enable_prompt_embeds": False, "multimodal_config": None}
"""What vLLM's renderers read of the server's model configuration for a text-only model (``renderers/base.py``)."""

MODELS_KEPT = 4
TEMPORARY_FOLDER = re.compile(r"\S*tito-audit-vllm-[A-Za-z0-9_]+")
"""Tokenizers kept loaded at once (the least recently used goes)."""


class VLLMRuntime:
    """vLLM's parsers, detokenizer and renderers, imported once, and the tokenizers they were opened for."""

    def __init__(self) -> None:
        started = time.perf_counter()
        from vllm.entrypoints.openai.chat_completion.message_assembly import assemble_chat_message_fields
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.parser import ParserManager
        from vllm.reasoning import ReasoningParserManager
        from vllm.renderers.registry import RENDERER_REGISTRY
        from vllm.tokenizers import get_tokenizer
        from vllm.tool_parsers import ToolParserManager
        from vllm.v1.engine.detokenizer import IncrementalDetokenizer

        self.assemble = assemble_chat_message_fields
        self.request_type = ChatCompletionRequest
        self.parser_manager = ParserManager
        self.renderers = RENDERER_REGISTRY
        self.get_tokenizer = get_tokenizer
        self.detokenizer = IncrementalDetokenizer
        self.tool_names = sorted(ToolParserManager.list_registered())
        self.reasoning_names = sorted(ReasoningParserManager.list_registered())
        self.models: OrderedDict[str, SimpleNamespace] = OrderedDict()
        self.import_seconds = time.perf_counter() - started

    def handle(self, request: dict[str, Any]) -> object:
        """The answer to one request (an :class:`~tito_audit.parse.vllm_messages.ErrorAnswer` when it cannot be
        answered)."""
        try:
            op = Op(request.get("op"))
        except ValueError:
            return error(f"unknown request {request.get('op')!r}", ErrorKind.INTERNAL)
        if op is Op.HELLO:
            return self.hello()
        if op is Op.NAMES:
            return NamesAnswer(tool=self.tool_names, reasoning=self.reasoning_names)
        if op is Op.OPEN:
            return self.open(cast(OpenRequest, request))
        about = cast(ModelRequest, request)
        model = self.models.get(str(about.get("model")))
        if model is None:
            return error("the model was not opened in this worker", ErrorKind.INTERNAL)
        self.models.move_to_end(about["model"])
        if op is Op.RENDER:
            return self.render(model, cast(RenderRequest, request))
        parser_cls = model.parsers[(about.get("tool"), about.get("reasoning"))]
        if op is Op.HAND_OVER:
            return self.hand_over(model, parser_cls, cast(HandOverRequest, request))
        return self.parse(model, parser_cls, cast(ParseRequest, request))

    def hello(self) -> HelloAnswer:
        import vllm

        return HelloAnswer(vllm=str(vllm.__version__), import_seconds=round(self.import_seconds, 3))

    # -- open --------------------------------------------------------------------------------------------------------
    def open(self, request: OpenRequest) -> OpenAnswer | ErrorAnswer:
        tool, reasoning = request.get("tool"), request.get("reasoning")
        wanted = (("tool-call", tool, self.tool_names), ("reasoning", reasoning, self.reasoning_names))
        unknown = [(kind, name, known) for kind, name, known in wanted if name is not None and name not in known]
        if unknown:
            kind, name, known = unknown[0]
            return error(f"unknown vLLM {kind} parser {name!r} (known: {', '.join(known)})", ErrorKind.NAMES)
        key = str(request["model"])
        model = self.models.get(key)
        if model is None:
            try:
                model = self._load(request.get("files") or {}, request.get("inline") or {})
            except Exception as exc:
                return error(f"vLLM cannot load the model's tokenizer: {_error_text(exc)}", ErrorKind.TOKENIZER)
            self.models[key] = model
            while len(self.models) > MODELS_KEPT:
                self.models.popitem(last=False)
        opened = OpenAnswer(tokenizer=type(model.tokenizer).__name__, harmony=model.harmony, mode=model.mode)
        if tool is not None or reasoning is not None:
            if (tool, reasoning) not in model.parsers:
                try:
                    model.parsers[(tool, reasoning)] = self._parser_class(model, tool, reasoning)
                except ImportError as exc:  # a package the pair needs beside vLLM (cohere_melody for Cohere's)
                    return error(_error_text(exc), ErrorKind.IMPORT)
                except Exception as exc:
                    return error(_error_text(exc), ErrorKind.PARSER)
            # whether the hand-over keeps special tokens for a request that declares tools (else what the parser is
            # handed depends on which tokens the vocabulary marks special)
            try:
                probe = self._adjusted(model, model.parsers[(tool, reasoning)], {"tools": PROBE_TOOLS})
                opened["keeps_special_tokens"] = not probe.to_sampling_params(1, {}).skip_special_tokens
            except Exception:  # a parser that cannot adjust a probe request is not known to keep them
                opened["keeps_special_tokens"] = False
        return opened

    def _load(self, files: dict[str, str], inline: dict[str, str]) -> SimpleNamespace:
        """The tokenizer of the folder ``files`` (name -> file) and ``inline`` (name -> the file's text: a stand-in
        vocabulary, which wins over a file of the same name) make, loaded as vLLM's server loads it."""
        mode = tokenizer_mode(files)
        with tempfile.TemporaryDirectory(prefix="tito-audit-vllm-") as tmp:
            root = Path(tmp)
            for name, target in files.items():
                if name not in inline:
                    link = root / name
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(target)
            for name, text in inline.items():
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_text(text, encoding="utf-8")
            model_type = _model_type(root / "config.json")
            tokenizer = self.get_tokenizer(str(root), trust_remote_code=False, tokenizer_mode=mode)
        hf_config = SimpleNamespace(model_type=model_type)
        config = SimpleNamespace(
            hf_config=hf_config, hf_text_config=hf_config, hf_overrides=None, model=str(root), architecture=None
        )
        harmony = model_type == "gpt_oss"
        return SimpleNamespace(
            tokenizer=tokenizer, config=config, harmony=harmony, mode=mode, parsers={}, renderer=None
        )

    def _parser_class(self, model: SimpleNamespace, tool: str | None, reasoning: str | None) -> Any:
        composed = self.parser_manager.get_parser(
            tool_parser_name=tool,
            reasoning_parser_name=reasoning,
            enable_auto_tools=True,
            model_name=model.config.model,
            is_harmony=model.harmony,
            tokenizer=model.tokenizer,
        )
        # The harmony parser is configured on its class (process-wide): keep this pair's configuration on a class
        # of its own, so that another pair opened in this worker cannot change it.
        return type(
            composed.__name__,
            (composed,),
            {
                "reasoning_parser_cls": composed.reasoning_parser_cls,
                "tool_parser_cls": composed.tool_parser_cls,
                "tool_strict_level": composed.tool_strict_level,
            },
        )

    # -- hand_over and parse -----------------------------------------------------------------------------------------
    def _request(self, request: Mapping[str, Any]) -> Any:
        body: dict[str, Any] = {"messages": [{"role": "user", "content": ""}], "model": "tito-audit"}
        if request.get("tools"):
            body["tools"] = request["tools"]
        if request.get("template_kwargs"):
            body["chat_template_kwargs"] = request["template_kwargs"]
        return self.request_type.model_validate(body)

    def _parser(self, model: SimpleNamespace, parser_cls: Any, chat: Any, request: Mapping[str, Any]) -> Any:
        parser = parser_cls(
            model.tokenizer,
            chat.tools,
            chat_template_kwargs=chat.chat_template_kwargs or {},
            model_config=model.config,
        )
        if request.get("prompt_ids"):
            parser.set_prompt_token_ids(request["prompt_ids"])
        return parser

    def _adjusted(self, model: SimpleNamespace, parser_cls: Any, request: Mapping[str, Any]) -> Any:
        """The chat request as a parser made for it adjusts it (``renderers/online_renderer.py``)."""
        chat = self._request(request)
        tool_choice = chat.tool_choice or "none"
        if parser_cls.always_adjust_request or parser_cls.reasoning_parser_cls is not None or tool_choice != "none":
            chat = self._parser(model, parser_cls, chat, request).adjust_request(request=chat)
        return chat

    def hand_over(self, model: SimpleNamespace, parser_cls: Any, request: HandOverRequest) -> HandOverAnswer:
        chat = self._adjusted(model, parser_cls, request)
        ids = [int(i) for i in request["ids"]]
        sampling = chat.to_sampling_params(max(len(ids), 1), {})
        engine_request = SimpleNamespace(
            request_id="tito-audit",
            sampling_params=sampling,
            prompt_token_ids=[int(i) for i in request.get("prompt_ids") or []],
            prompt_embeds=None,
        )
        detokenizer = self.detokenizer.from_new_request(model.tokenizer, engine_request)
        detokenizer.update(ids, bool(request.get("stopped")))
        return HandOverAnswer(
            text=detokenizer.get_next_output_text(finished=True, delta=False),
            skip_special_tokens=bool(sampling.skip_special_tokens),
        )

    def parse(self, model: SimpleNamespace, parser_cls: Any, request: ParseRequest) -> ParseAnswer:
        chat = self._request(request)
        parser = self._parser(model, parser_cls, chat, request)
        parser.set_history_tool_call_count(int(request.get("earlier_calls") or 0))
        text = str(request["text"])
        ids = request.get("ids") or model.tokenizer.encode(text, add_special_tokens=False)
        reasoning, content, calls = parser.parse(text, chat, enable_auto_tools=True, model_output_token_ids=ids)
        fields = self.assemble(chat, reasoning, content, calls, enable_auto_tools=True, parser_cls=parser_cls)
        return ParseAnswer(
            reasoning=fields.reasoning,
            content=fields.content,
            tool_calls=[
                {"id": call.id, "name": call.function.name, "arguments": call.function.arguments}
                for call in fields.tool_calls
            ],
        )

    # -- render (engine-rendered models) -----------------------------------------------------------------------------
    def render(self, model: SimpleNamespace, request: RenderRequest) -> RenderAnswer:
        """Each ``[k, add_generation_prompt]`` of ``prefixes``: the text vLLM's renderer hands the engine for
        ``messages[:k]`` (the module docstring, ``render``), or the one-line reason it refused."""
        if model.renderer is None:
            config = SimpleNamespace(
                model_config=SimpleNamespace(
                    **RENDERER_CONFIG,
                    hf_config=model.config.hf_config,
                    hf_text_config=model.config.hf_text_config,
                    supports_multimodal_inputs=False,
                ),
                parallel_config=SimpleNamespace(_api_process_rank=0),
            )
            model.renderer = self.renderers.load_renderer(model.mode, config, model.tokenizer)
        texts: list[str | None] = []
        errors: list[str | None] = []
        for k, add_generation_prompt in request["prefixes"]:
            try:
                texts.append(self._render_one(model.renderer, request, int(k), bool(add_generation_prompt)))
                errors.append(None)
            except Exception as exc:  # vLLM's server answers such a request with an error
                texts.append(None)
                errors.append(_error_text(exc))
        return RenderAnswer(texts=texts, errors=errors)

    def _render_one(self, renderer: Any, request: RenderRequest, k: int, add_generation_prompt: bool) -> str:
        body: dict[str, Any] = {
            "messages": request["messages"][:k],
            "model": "tito-audit",
            "add_generation_prompt": add_generation_prompt,
        }
        if request.get("tools"):
            body["tools"] = request["tools"]
        if request.get("template_kwargs"):
            body["chat_template_kwargs"] = request["template_kwargs"]
        chat = self.request_type.model_validate(body)
        tools = None if chat.tools is None else [tool.model_dump() for tool in chat.tools]
        params = chat.build_chat_params(None, "auto").with_defaults({"tools": tools, "tokenize": False})
        _, prompt = renderer.render_messages(chat.messages, params)
        text = prompt.get("prompt")
        if not isinstance(text, str):
            raise ValueError("vLLM's renderer handed the engine token ids, not text")
        return text


def _model_type(config: Path) -> str | None:
    try:
        value = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _error_text(exc: BaseException) -> str:
    """``exc`` on one line, at most 400 characters; vLLM names a tokenizer by its folder, a temporary one here, which
    is named the same way in every run (reports are byte for byte the same)."""
    return one_line(TEMPORARY_FOLDER.sub("the model's tokenizer folder", one_line(exc, limit=sys.maxsize)), 400, "...")


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever vLLM prints goes to standard error, never into the answers
    requests = sys.stdin.buffer
    try:
        runtime = VLLMRuntime()
    except Exception as exc:  # reported to the parent as the first answer
        write_message(replies, error(f"vLLM cannot be imported: {_error_text(exc)}", ErrorKind.IMPORT))
        return
    while (request := read_message(requests)) is not None:
        try:
            is_request = isinstance(request, dict)
            answer = runtime.handle(request) if is_request else error("not a request", ErrorKind.INTERNAL)
        except Exception as exc:
            answer = error(f"{type(exc).__name__}: {_error_text(exc)}", ErrorKind.INTERNAL)
        write_message(replies, answer)


if __name__ == "__main__":
    main()
