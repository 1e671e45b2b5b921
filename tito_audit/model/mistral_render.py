"""Rendering through mistral-common (a Mistral vocabulary with ``tekken.json``): no Jinja, its own ids.

mistral-common renders no conversation that ends with an assistant turn; such a turn is rendered as a continuation
and closed with the end-of-sequence token, as the backend writes it in history. It tokenizes message by message, so
its ids are its own (not the encoding of its text).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tito_audit.model.boundary_types import HFTokenizer

Message = dict[str, Any]


def _call(
    tokenizer: HFTokenizer,
    messages: list[Message],
    tools: list[dict] | None,
    gp: bool,
    kwargs: Mapping[str, Any],
    tokenize: bool,
) -> Any:
    logging.getLogger("transformers").setLevel(logging.ERROR)
    ends_with_assistant = bool(messages) and messages[-1].get("role") == "assistant"
    extra: dict[str, Any] = (
        {"continue_final_message": True} if ends_with_assistant and not gp else {"add_generation_prompt": gp}
    )
    if tokenize:
        extra["return_dict"] = False
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=tokenize, **extra, **kwargs)


def _closes_assistant(messages: list[Message], gp: bool) -> bool:
    return bool(messages) and messages[-1].get("role") == "assistant" and not gp


def mistral_text(
    tokenizer: HFTokenizer, messages: list[Message], tools: list[dict] | None, gp: bool, kwargs: Mapping[str, Any]
) -> str:
    """render(M, gp) through mistral-common."""
    text = _call(tokenizer, messages, tools, gp, kwargs, tokenize=False)
    return text + tokenizer.eos_token if _closes_assistant(messages, gp) else text


def mistral_ids(
    tokenizer: HFTokenizer, messages: list[Message], tools: list[dict] | None, gp: bool, kwargs: Mapping[str, Any]
) -> list[int]:
    """ids(M, gp) as mistral-common tokenizes them."""
    ids = list(_call(tokenizer, messages, tools, gp, kwargs, tokenize=True))
    return [*ids, tokenizer.eos_token_id] if _closes_assistant(messages, gp) else ids
