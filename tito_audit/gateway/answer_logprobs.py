"""Log-probabilities a request asks for (``logprobs``, ``top_logprobs``) and the OpenAI shape they are answered in
(``choices[].logprobs.content``). What the engine is asked and how its answer is read: :mod:`.engine_logprobs`; the
session keeps the sampled ids' log-probabilities beside the buffer (:mod:`tito_audit.session.buffer_logprobs`), the
alternatives are answered, not kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tito_audit.gateway.errors import RequestError
from tito_audit.model.tokens import TokenCodec

MAX_TOP_LOGPROBS = 20
"""The most alternatives a request may ask for (OpenAI's limit, and vLLM's default ``--max-logprobs``)."""
CONTEXT = 16
"""Ids before a token decoded with it, so that a token reads as it does in the text (a leading space kept)."""


@dataclass(frozen=True)
class Wanted:
    """What a request asks: logprobs in the answer, and how many alternatives per token."""

    answer: bool = False
    top: int = 0


def wanted(body: dict[str, Any]) -> Wanted:
    """The request's ``logprobs`` and ``top_logprobs``, checked as OpenAI checks them (400 naming the field)."""
    answer = body.get("logprobs", False)
    top = body.get("top_logprobs")
    if answer is None:
        answer = False
    if type(answer) is not bool:
        raise RequestError(400, "invalid_request", "logprobs must be true or false")
    if top is None:
        return Wanted(answer, 0)
    if type(top) is not int or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise RequestError(400, "invalid_request", f"top_logprobs must be an integer from 0 to {MAX_TOP_LOGPROBS}")
    if not answer:
        raise RequestError(400, "invalid_request", "top_logprobs needs logprobs: true")
    return Wanted(True, top)


def openai_logprobs(
    codec: TokenCodec, before: Sequence[int], ids: Sequence[int], values: Sequence[float | None], top: Any, k: int
) -> dict[str, Any]:
    """``choices[].logprobs`` as OpenAI answers it: ``{"content": [{token, logprob, bytes, top_logprobs}]}``, one
    entry per sampled id (the stop token included: it was sampled), each token decoded as it reads after the ids
    before it; ``bytes`` is null where a token is part of a character. A position without a log-probability (a stop
    token the engine gave none for) reads -9999.0, as vLLM writes an impossible one."""
    context = list(before[-CONTEXT:])
    content = []
    for position, token_id in enumerate(ids):
        head = codec.decode(context)
        alternatives = _unique(sorted(top[position], key=lambda pair: -pair[1]))[:k] if top and k else []
        value = values[position]
        content.append(
            {
                **_token(codec, context, head, token_id),
                "logprob": value if value is not None else -9999.0,
                "top_logprobs": [{**_token(codec, context, head, i), "logprob": v} for i, v in alternatives],
            }
        )
        context = [*context, token_id][-CONTEXT:]
    return {"content": content}


def _token(codec: TokenCodec, context: list[int], head: str, token_id: int) -> dict[str, Any]:
    whole = codec.decode([*context, token_id])
    text = whole[len(head) :] if whole.startswith(head) else codec.decode([token_id])
    broken = "\ufffd" in text
    return {"token": text, "bytes": None if broken else list(text.encode("utf-8"))}


def _unique(pairs: list[tuple[int, float]]) -> list[tuple[int, float]]:
    seen: set[int] = set()
    unique = []
    for i, v in pairs:
        if i not in seen:
            seen.add(i)
            unique.append((i, v))
    return unique
