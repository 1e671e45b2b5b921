"""vLLM's tool-call and reasoning parsers, by name, as vLLM 0.33's OpenAI server runs them on a finished completion.

They run in a worker process of their own (:mod:`tito_audit.parse.vllm_worker` inside it,
:mod:`tito_audit.parse.vllm_process` starting and asking it), never in tito-audit's: importing
any vLLM module imports torch, and with torch importable transformers reports it available and takes other code
paths, so a verdict would depend on whether vLLM is installed; vLLM's metadata also pins transformers and fastapi
below ours. ``make vllm`` installs vLLM, CPU torch and what they import into ``.venv/vllm-engine``, a folder only the
worker puts on its path, after this environment's own packages (docs/vllm.md: the measured costs). Where vLLM is
importable in this environment itself (a user who serves with vLLM), the worker uses that.

What the adapter does with a completion, and so what vLLM's server does (the worker's docstring cites the files):

1. the hand-over (:meth:`VLLMParser.hand_over`): the sampled ids decoded by vLLM's own detokenizer with the settings
   the request ends up with once the parser adjusted it (``skip_special_tokens`` off for the parsers that read
   special tokens when tools are declared, else on), the stop token left out of the text (it stays in the ids);
2. the parse (:meth:`VLLMParser.parse`): vLLM's composed parser (harmony for gpt-oss) on that text and the sampled
   ids, with the prompt's ids, the request's tools and template keyword arguments (``enable_thinking``) and the
   calls earlier in the conversation; the message's fields picked as the server picks them;
3. call ids in the form vLLM writes them (``chatcmpl-tool-`` and 16 hex digits, 9 letters and digits for Mistral's
   parser, ``functions.NAME:N`` for Kimi's), with the random part derived from the completion instead of drawn, so
   that reports are reproducible;
4. the message returned is the one the next render sees: each call's ``arguments`` turned back into an object
   (vLLM's renderer turns a string that is not a JSON object into ``{}``), a ``null`` content into ``""``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from functools import cache
from pathlib import Path
from typing import Any

from tito_audit.conversations.conversation import ASSISTANT, Message
from tito_audit.errors import BadInputError
from tito_audit.model.standin import has_vocabulary
from tito_audit.parse.handover import Sampled, parse_input
from tito_audit.parse.parser import ParseInput, ParserNeedsTokenizer, ParserRefused, ParserUnavailable
from tito_audit.parse.vllm_process import (
    INSTALL,
    VERSION,
    WorkerError,
    available,
    engine_folder,
    model_files,
    shutdown,
    tokenizer_mode,
    worker,
    worker_environment,
)

__all__ = [
    "ENGINE",
    "INSTALL",
    "VERSION",
    "VLLMParser",
    "available",
    "check_names",
    "engine_folder",
    "model_files",
    "reasoning_parser_names",
    "rendered_arguments",
    "shutdown",
    "stable_call_id",
    "tokenizer_mode",
    "tool_parser_names",
    "worker",
    "worker_environment",
]

ENGINE = "vllm"


@cache
def _names() -> dict[str, list[str]]:
    running, _ = worker()
    return running.ask({"op": "names"})


def tool_parser_names() -> list[str]:
    """The tool-call parser names vLLM registers (raises :class:`ParserUnavailable` when vLLM is not installed)."""
    return list(_names()["tool"])


def reasoning_parser_names() -> list[str]:
    return list(_names()["reasoning"])


def check_names(tool: str | None, reasoning: str | None) -> None:
    """Refuse parser names vLLM does not register (:class:`BadInputError` naming ``--parser`` and the known names)."""
    for kind, name, known in (
        ("tool-call", tool, tool_parser_names()),
        ("reasoning", reasoning, reasoning_parser_names()),
    ):
        if name is not None and name not in known:
            raise BadInputError(f"--parser: unknown vLLM {kind} parser {name!r} (known: {', '.join(known)})")


class VLLMParser:
    """One vLLM tool-call parser and, optionally, one reasoning parser, for one model's tokenizer."""

    engine = ENGINE
    runs_apart = True
    """Its parse runs in vLLM's worker process: nothing of the model this process holds is read while it waits, so a
    session does not hold the model's lock through it (a stalled worker would stall every session of the model)."""

    def __init__(self, tool: str | None, reasoning: str | None, model_dir: Path | None) -> None:
        if tool is None and reasoning is None:
            raise BadInputError("--parser vllm: name a tool-call parser, a reasoning parser or both")
        self.tool = tool
        self.reasoning = reasoning
        self.name = "vllm " + "+".join(part for part in (tool or "no tool parser", reasoning) if part)
        check_names(tool, reasoning)
        if model_dir is None:
            raise ParserNeedsTokenizer(f"--parser {self.name}: vLLM's parsers need the model's folder (its tokenizer)")
        self.model_dir = Path(model_dir)
        self._files = model_files(self.model_dir)
        if not has_vocabulary(self._files):
            raise ParserNeedsTokenizer(
                f"--parser {self.name}: vLLM's parsers read the model's tokenizer, and this folder has none "
                "(a template-only model, audited at text level)"
            )
        self._key = hashlib.sha256(json.dumps(self._files, sort_keys=True).encode()).hexdigest()
        self._opened: set[int] = set()
        """The workers (by generation) this parser's model is opened in."""
        self._lock = threading.Lock()
        self.harmony = False
        self._ask({"op": "ping"}, opening=True)

    def _ask(self, request: dict[str, Any], opening: bool = False) -> dict[str, Any]:
        running, generation = worker()
        with self._lock:
            if generation not in self._opened:
                try:
                    opened = running.ask(
                        {"op": "open", "model": self._key, "files": self._files}
                        | {"tool": self.tool, "reasoning": self.reasoning}
                    )
                except WorkerError as exc:
                    if exc.kind == "import":
                        raise ParserUnavailable(f"--parser {self.name}: {exc}") from None
                    if exc.kind in ("tokenizer", "parser"):
                        raise ParserRefused(f"--parser {self.name}: {exc}") from None
                    raise BadInputError(f"--parser {self.name}: {exc}") from None
                self.harmony = bool(opened.get("harmony"))
                self._opened.add(generation)
        if opening:
            return {}
        request = request | {"model": self._key, "tool": self.tool, "reasoning": self.reasoning}
        try:
            return running.ask(request)
        except WorkerError as exc:
            raise BadInputError(f"--parser {self.name}: vLLM's parser raised on a completion: {exc}") from None

    def hand_over(self, sampled: Sampled) -> ParseInput:
        """What vLLM's engine hands its parser for ``sampled`` (the module docstring, step 1); without ids (a caller
        with text only), the text with its stop token trimmed."""
        if not sampled.ids:
            text = sampled.text[: -len(sampled.stop)] if sampled.stopped and sampled.stop else sampled.text
            return parse_input(sampled, text)
        answer = self._ask(
            {
                "op": "hand_over",
                "ids": list(sampled.ids),
                "prompt_ids": list(sampled.prompt_ids),
                "stopped": sampled.stopped,
                "tools": sampled.tools,
                "template_kwargs": _json_safe(sampled.template_kwargs),
            }
        )
        return parse_input(sampled, str(answer["text"]))

    def parse(self, given: ParseInput) -> Message:
        answer = self._ask(
            {
                "op": "parse",
                "text": given.text,
                "ids": list(given.ids),
                "prompt_ids": list(given.prompt_ids),
                "tools": given.tools,
                "template_kwargs": _json_safe(given.template_kwargs),
                "earlier_calls": given.earlier_calls,
            }
        )
        message: Message = {"role": ASSISTANT, "content": answer.get("content") or ""}
        if answer.get("reasoning"):
            message["reasoning_content"] = answer["reasoning"]
        calls = answer.get("tool_calls") or []
        if calls:
            message["tool_calls"] = [
                {
                    "id": stable_call_id(str(call.get("id") or ""), f"{given.call_id_seed}:{index}:{call['name']}"),
                    "type": "function",
                    "function": {"name": call["name"], "arguments": rendered_arguments(call.get("arguments"))},
                }
                for index, call in enumerate(calls)
            ]
        return message


RANDOM_IDS = (
    (re.compile(r"^(chatcmpl-tool-)([0-9a-f]{16})$"), "0123456789abcdef"),
    (re.compile(r"^(call_(?:\d+_)?)([0-9a-f]{16})$"), "0123456789abcdef"),
    (re.compile(r"^()([A-Za-z0-9]{9})$"), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"),
)
"""The call ids vLLM draws at random (``renderers/chat_utils/tool_call.py`` ``make_tool_call_id``, the parsers that
write ``call_`` ids, ``parser/mistral.py`` ``MistralToolCall.generate_random_id``): their fixed part, and the
alphabet of their random part."""


def stable_call_id(drawn: str, seed: str) -> str:
    """``drawn`` with its random part derived from ``seed`` instead (ids a parser reads from the text, Kimi's
    ``functions.NAME:N``, stay as they are).

    >>> stable_call_id("chatcmpl-tool-0123456789abcdef", "a") == stable_call_id("chatcmpl-tool-fedcba9876543210", "a")
    True
    >>> stable_call_id("functions.ls:0", "a")
    'functions.ls:0'
    """
    for pattern, alphabet in RANDOM_IDS:
        match = pattern.match(drawn)
        if match:
            digest = hashlib.sha256(seed.encode()).digest()
            random_part = "".join(alphabet[byte % len(alphabet)] for byte in digest[: len(match.group(2))])
            return match.group(1) + random_part
    return drawn


def rendered_arguments(raw: Any) -> Any:
    """A call's arguments as vLLM's renderer hands them to the template (``renderers/chat_utils/chat_message.py``
    ``_postprocess_messages``): a JSON object string as the object, anything else (not JSON, not an object, empty) as
    ``{}``."""
    if isinstance(raw, dict):
        return raw
    if not raw or not isinstance(raw, str):
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _json_safe(values: dict[str, Any]) -> dict[str, Any]:
    """Template keyword arguments as JSON carries them (a value JSON cannot carry goes as its text)."""
    return json.loads(json.dumps(values, default=str))
