"""The APIs the gateway speaks, each a module that maps its requests and answers onto the same sessions and buffers
and implements :class:`~.interface.Dialect`: :mod:`.chat` (OpenAI's chat completions, whole or streamed as the engine
samples), :mod:`.responses` (OpenAI's Responses API; :mod:`.responses_output` its answer and events) and
:mod:`.messages` (Anthropic's Messages API). The web layer serves each of :data:`DIALECTS` at its path: a new API is
one module here and one name in :data:`DIALECTS`."""

from __future__ import annotations

from tito_audit.gateway.dialects.chat import ChatCompletions
from tito_audit.gateway.dialects.interface import Dialect
from tito_audit.gateway.dialects.messages import Messages
from tito_audit.gateway.dialects.responses import Responses

DIALECTS: tuple[type[Dialect], ...] = (ChatCompletions, Responses, Messages)
"""Every API the gateway speaks, in the order its routes are listed."""

__all__ = ["DIALECTS", "Dialect"]
