"""The turns a session records: where each completion and each bridge sit in the buffer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tito_audit.session.breaks import SessionBreak
from tito_audit.session.buffer_logprobs import padded


@dataclass(frozen=True)
class SessionTurn:
    """One assistant turn as the session recorded it."""

    message_index: int
    sampled: bool
    """False when the assistant message was appended without sampled ids (its tokens are the template's)."""
    stopped: bool | None
    """Whether the completion ends with a stop token (None when not sampled); a completion without one was cut
    by the engine's length limit, and the template's terminator comes with the bridge, outside the loss."""
    completion: tuple[int, int]
    """Where the sampled ids sit in the buffer (start, end); empty when not sampled."""
    bridge: tuple[int, int]
    """Where the bridge appended after this turn sits in the buffer; empty for the last turn."""
    broke: SessionBreak | None = None
    message: dict[str, Any] | None = None
    """The assistant message appended for this turn (the parser's, when the session parsed the completion)."""
    bridged: str = "template"
    """How the bridge after this turn was made: ``template`` (the template's render of the whole conversation, checked
    at this step), ``local`` (a short local render, ``bridge="auto"``: the whole conversation is checked later, see
    :mod:`tito_audit.session.deferred`) or ``stand-in`` (``bridge="history-free"``: never checked)."""


@dataclass(frozen=True)
class PendingTurn:
    """The turn an ``extend``/``finish`` call appends, before its bridge is known."""

    message_index: int
    completion: list[int] | None
    start: int
    stop_ids: frozenset[int]
    message: dict[str, Any] | None = None
    logprobs: list[float | None] | None = None
    """The engine's log-probability of each sampled id, checked (:mod:`tito_audit.session.buffer_logprobs`)."""

    @property
    def sampled_logprobs(self) -> list[float | None]:
        """One entry per sampled id (``None`` where none was given); empty when not sampled."""
        return padded(self.logprobs, len(self.completion or []))

    @property
    def stopped(self) -> bool | None:
        if self.completion is None:
            return None
        return bool(self.completion) and self.completion[-1] in self.stop_ids

    @property
    def span(self) -> tuple[int, int]:
        return (self.start, self.start + len(self.completion or []))

    def done(
        self, bridge: tuple[int, int], broke: SessionBreak | None = None, bridged: str = "template"
    ) -> SessionTurn:
        return SessionTurn(
            self.message_index,
            self.completion is not None,
            self.stopped,
            self.span,
            bridge,
            broke,
            self.message,
            bridged,
        )
