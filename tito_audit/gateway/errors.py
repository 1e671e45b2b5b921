"""The gateway's exceptions, each defined once, and the one line an exception's message is told in.

A request or turn the gateway does not answer is a :class:`GatewayError`: the HTTP status the client gets, a ``code``
for the error JSON and one line of message (the web layer answers and logs every one the same way, in the shape of
the route's API). Two kinds: :class:`RequestError`, what the client sent or the session's state refuses, and
:class:`EngineError`, the engine that failed. The engine's process (``llamacpp:``) and the stand-in engine have
exceptions of their own below, turned into an :class:`EngineError` (or an HTTP status) where they are caught.
"""

from __future__ import annotations


class GatewayError(Exception):
    """A request or turn the gateway does not answer: ``status`` is what the client gets, ``code`` names the cause in
    the error JSON, the message is one line."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.session: str | None = None
        """The session the request or turn was for, once known (the log line names it)."""


class RequestError(GatewayError):
    """A request the gateway refuses (what it sent, or the state of its session), or a turn it does not keep."""


class EngineError(GatewayError):
    """The engine failed (502 down or answering nonsense, 503 busy, 504 late)."""


class EngineProcessEnded(Exception):
    """The engine's process ended while asked; the message says how, in one line."""


class EngineProcessTimeout(Exception):
    """The engine's process did not answer in time (it was killed)."""


class EngineProcessError(Exception):
    """The engine's process answered a request with an error (it goes on); the message is its line."""


class StandinRefused(Exception):
    """A request the stand-in engine refuses: ``status`` is its HTTP status, the message its one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
