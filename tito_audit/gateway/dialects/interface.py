"""What an API the gateway speaks implements: one :class:`Dialect` per module of :mod:`tito_audit.gateway.dialects`.

A dialect maps its API's requests onto the sessions and buffers every dialect shares (a
:class:`~tito_audit.gateway.protocol.ChatRequest`, one turn of :class:`~tito_audit.gateway.gateway.Gateway`) and the
answer back, whole or streamed (the events of :mod:`~tito_audit.gateway.turn_stream`). The web layer
(:mod:`~tito_audit.gateway.app`) serves each dialect of :data:`~tito_audit.gateway.dialects.DIALECTS` at its
:attr:`~Dialect.path`: it reads the body (size and depth bounded), checks the bearer token and answers every refusal
in the dialect's :meth:`~Dialect.error_body`, logged in one line.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from tito_audit.gateway import protocol

if TYPE_CHECKING:
    from starlette.responses import Response

    from tito_audit.gateway.gateway import Gateway
    from tito_audit.gateway.protocol import SessionName


class Dialect(ABC):
    """One API on one gateway: made once per server (a dialect may keep what it needs between requests: the Responses
    API its response ids)."""

    path: ClassVar[str]
    """The route it is served at (``POST``)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    @abstractmethod
    async def handle(self, body: Any, header: SessionName | None) -> Response:
        """The answer to one request: ``body`` is the parsed JSON, ``header`` the session the request's headers name
        (None: none). Raises a :class:`~tito_audit.gateway.errors.GatewayError` for a request it refuses or a turn it
        does not answer."""

    def error_body(self, status: int, code: str, message: str) -> dict[str, Any]:
        """A refusal in the API's own shape (OpenAI's, unless the dialect says otherwise)."""
        return protocol.error_body(status, code, message)
