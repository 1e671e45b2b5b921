"""transformers' own parser: ``tokenizer.parse_response`` with the response template the tokenizer ships."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from tito_audit.conversations.conversation import ASSISTANT, Message
from tito_audit.parse.parser import ParseInput, ParserUnavailable


class TransformersParser:
    """``tokenizer.parse_response(text, prefix=prompt, tools=tools)``; the reasoning field it calls ``thinking``
    is the message's ``reasoning_content``."""

    name = "hf"

    def __init__(self, tokenizer: Any) -> None:
        if getattr(tokenizer, "response_template", None) is None or not hasattr(tokenizer, "parse_response"):
            legacy = " (its legacy response_schema is not read by this transformers)" if _has_legacy(tokenizer) else ""
            raise ParserUnavailable(f"--parser hf: the tokenizer ships no response_template{legacy}")
        self._tokenizer = tokenizer

    def parse(self, given: ParseInput) -> Message:
        parsed = self._tokenizer.parse_response(given.text, prefix=given.prompt, tools=given.tools)
        message: Message = {"role": ASSISTANT, "content": parsed.get("content") or None}
        thinking = parsed.get("reasoning_content") or parsed.get("thinking")
        if thinking:
            message["reasoning_content"] = thinking
        calls = []
        for index, call in enumerate(parsed.get("tool_calls") or []):
            function = call.get("function", call)
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                with contextlib.suppress(ValueError):
                    arguments = json.loads(arguments)
            calls.append(
                {
                    "id": call.get("id") or f"call_{given.call_id_seed[:16]}{index}",
                    "type": "function",
                    "function": {"name": function.get("name"), "arguments": arguments},
                }
            )
        if calls:
            message["tool_calls"] = calls
        return message


def _has_legacy(tokenizer: Any) -> bool:
    init = getattr(tokenizer, "init_kwargs", None) or {}
    return "response_schema" in init
