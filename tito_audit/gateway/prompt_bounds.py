"""A prompt the model can serve, by the rule of the engine the gateway stands for (``--engine-api``), or the request
is refused (400 ``context_length_exceeded``) before the session holds anything of it:

- ``sglang``: the prompt and the ``max_tokens`` asked together within the model's context
  (:func:`~tito_audit.model.context_window.context_of`); past it, refused;
- ``vllm``: ``max_tokens`` itself within the context (``renderers/params.py`` refuses more), the prompt alone
  within the context, and the ``max_tokens`` sampled lowered to what the context leaves (vLLM 0.33:
  ``entrypoints/serve/utils/api_utils.py`` ``get_max_tokens``; ``renderers/params.py`` no longer takes ``max_tokens``
  from the prompt's room). A prompt that fills the context leaves nothing to sample: refused.

Two checks, the cheap one first:

- before anything is rendered, from the request's text alone: no token of the vocabulary covers more than
  :meth:`PromptBounds.token_bytes` bytes, so text of B bytes is at least B / that many tokens. Only the text every
  template renders is counted (the content of system, user and tool messages, without the whitespace around it that a
  template may trim), after the tokenizer's normalizer; a request whose text alone passes the context is refused
  without rendering or tokenizing anything (a 1.9 M-character message to a model of 131,072 tokens is, at
  Qwen2.5's 132 bytes a token at most, not: it is rendered and counted, then refused). It runs in the worker thread
  that prepares the step (the vocabulary's longest token is found once, the first time a text is long enough to
  need it: a fraction of a second);
- after the step is prepared on its copy of the session: the prompt's exact length. The copy is dropped, and what the
  model's caches took of its texts is dropped with it.
"""

from __future__ import annotations

import math
import threading

from tito_audit.gateway.errors import RequestError
from tito_audit.gateway.protocol import ChatRequest
from tito_audit.model.context_window import Context
from tito_audit.session import TitoSession
from tito_audit.session.machinery import Machinery

TOKEN_BYTES_MARGIN = 4
"""Added to the longest token's decoded bytes: a decoder that drops a word's leading space when a token stands
alone, or writes one replacement character (3 bytes) for a byte, still gives a bound."""


LOWERS_MAX_TOKENS = frozenset({"vllm"})
"""The engine APIs whose server lowers ``max_tokens`` to what the context leaves instead of refusing the request."""


class PromptBounds:
    """The context checks of one gateway (see the module docstring); thread-safe."""

    def __init__(self, context: Context, machinery: Machinery, engine_api: str = "sglang") -> None:
        self.context = context
        self.lowers = engine_api in LOWERS_MAX_TOKENS
        """Whether ``max_tokens`` is lowered to what the context leaves (vLLM) rather than refused (SGLang)."""
        self._machinery = machinery
        self._lock = threading.Lock()
        self._token_bytes: int | None = None

    def token_bytes(self) -> int:
        """The most bytes one token of the vocabulary covers (its decoded text, plus a margin), computed once, the
        first time a request's text is long enough to need it."""
        with self._lock:
            if self._token_bytes is None:
                machinery = self._machinery
                codec = machinery.codec
                with machinery.lock:
                    longest = max(len(codec.decode([i]).encode("utf-8")) for i in range(codec.id_limit))
                self._token_bytes = longest + TOKEN_BYTES_MARGIN
            return self._token_bytes

    def check_text(self, request: ChatRequest, max_tokens: int) -> None:
        """Refuse ``request`` when its rendered text alone passes the context (see the module docstring). A Messages
        request is refused here only when its text alone passes the whole context: its clients read the refusal's
        numbers to ask again for fewer tokens, so the prompt's exact size is said, after the render."""
        room = self.context.tokens - (max_tokens if request.dialect != "messages" and not self.lowers else 0)
        texts = [m["content"].strip() for m in request.messages if m["role"] != "assistant" and m.get("content")]
        characters = sum(map(len, texts))
        if characters <= room or characters * 4 <= room * self.token_bytes():  # 4 bytes a character at most
            return
        codec = self._machinery.codec
        size = sum(len(codec.normalize(text).encode("utf-8")) for text in texts)
        least = math.ceil(size / self.token_bytes())
        if least > room:
            said = f"the messages' text alone is {size:,} bytes, at least {least:,} tokens"
            raise self._refusal(said, least, max_tokens, request.dialect)

    def check_prompt(self, trial: TitoSession, prompt_tokens: int, max_tokens: int, dialect: str = "chat") -> int:
        """The ``max_tokens`` the engine samples for a prepared step whose prompt is ``prompt_tokens`` long: as asked,
        or lowered to what the context leaves where the engine lowers it; a step the engine refuses is refused here,
        and its session copy ``trial`` forgets what the model's caches keep of it."""
        left = self.context.tokens - prompt_tokens
        if max_tokens <= left:
            return max_tokens
        if self.lowers and left > 0 and max_tokens <= self.context.tokens:
            return left
        trial.forget()
        raise self._refusal(f"the prompt is {prompt_tokens:,} tokens", prompt_tokens, max_tokens, dialect)

    def _refusal(self, prompt: str, tokens: int, max_tokens: int, dialect: str) -> RequestError:
        context = self.context
        if dialect == "messages":  # Anthropic's own words, which its clients read to ask again for fewer tokens
            return RequestError(
                400,
                "context_length_exceeded",
                f"input length and `max_tokens` exceed context limit: {tokens} + {max_tokens} > {context.tokens}, "
                f"decrease input length or `max_tokens` and try again ({prompt}; the model's context: "
                f"{context.source})",
            )
        if self.lowers and max_tokens <= context.tokens:  # the engine samples what the context leaves
            return RequestError(
                400,
                "context_length_exceeded",
                f"{prompt}: that fills the model's context of {context.tokens:,} tokens ({context.source}), leaving "
                "nothing to sample; shorten the conversation",
            )
        return RequestError(
            400,
            "context_length_exceeded",
            f"{prompt}: with max_tokens {max_tokens:,} that passes the model's context of {context.tokens:,} tokens "
            f"({context.source}); shorten the conversation or ask for fewer tokens",
        )
