"""The buffer's step operations a session performs: commit a step, keep the buffer on a ``warn`` break, continue from
the template's render on ``rerender``, append the history-free bridge; decoding a completion as it reads in the buffer,
checking the sampled ids, rendering a step's prompt. The log-probabilities of the sampled ids move with the buffer
(:mod:`~tito_audit.session.logprobs`). :class:`~tito_audit.session.session.TitoSession` is built on them."""

from __future__ import annotations

from collections.abc import Sequence

from tito_audit.audit.core.join import Join, join
from tito_audit.conversations.conversation import Message
from tito_audit.model.render import RenderedPrefix, RenderError
from tito_audit.model.token_ids import token_ids
from tito_audit.session.breaks import SessionBreak, render_refused
from tito_audit.session.logprobs import Logprobs, carried
from tito_audit.session.machinery import Machinery
from tito_audit.session.policies import history_free_bridge, relocations, stand_in_suffix
from tito_audit.session.turns import PendingTurn, SessionTurn

DECODE_CONTEXT = 16
"""Tokens of the buffer decoded with a new completion, so that decoders that treat the first token of a
sequence specially (a leading space dropped) decode the completion as it reads in the buffer."""


class BufferSteps:
    """The state of a session's buffer and the operations that change it (see the module docstring)."""

    _machinery: Machinery
    _tools: list[dict] | None
    _messages: list[Message]
    _buffer: list[int]
    _mask: list[int]
    _logprobs: list[float | None]
    _view_ids: list[int]
    _view_text: str
    _sampled_spans: list[tuple[int, int]]
    _turns: list[SessionTurn]
    _steps: int
    _state: str
    on_break: str
    clock: object
    _decoded: tuple[tuple[tuple[int, int, tuple[int, ...]], str], ...] = ()
    """The last two completions :meth:`_decode_in_context` decoded (a server's stream reads one without its stop
    token, its parse with it), each keyed by the buffer's length, the steps taken and the ids."""

    def _history_free(
        self, completion: list[int] | None, assistant: Message, appended: list[Message], logprobs: Logprobs | None
    ) -> None:
        """``bridge="history-free"``: the completion as sampled, then the stand-in suffix of the new messages (appended
        in place: a step costs what it appends)."""
        pending = PendingTurn(len(self._messages), completion, len(self._buffer), self.stop_ids, assistant, logprobs)
        start = len(self._buffer) + len(completion or [])
        suffix = history_free_bridge(self._machinery, appended, self._tools, pending, self._steps + 1)
        self._steps += 1
        ids = (completion or []) + suffix
        text = self._decode_in_context(ids)
        self._buffer += ids
        self._mask += [1] * len(completion or []) + [0] * len(suffix)
        self._logprobs += pending.sampled_logprobs + [None] * len(suffix)
        self._view_ids += ids
        self._view_text += text
        self._messages += [assistant, *appended]
        if completion:
            self._sampled_spans.append(pending.span)
        self._turns.append(pending.done((start, start + len(suffix)), bridged="stand-in"))

    def _join(self, view_text: str, completion: list[int] | None, prompt: RenderedPrefix) -> Join:
        codec = self._machinery.codec
        if not codec.piecewise:
            return join(codec, view_text, prompt)

        # Backends that tokenize message by message (mistral-common) have no single-string encoding: the
        # canonical buffer is the template's ids so far plus the completion's canonical pieces.
        def canonical() -> list[int]:
            return self._view_ids + (codec.encode(codec.decode(completion)) if completion else [])

        return join(codec, view_text, prompt, canonical)

    def _decode_in_context(self, completion: list[int]) -> str:
        """The completion's text as it reads after the buffer (see :data:`DECODE_CONTEXT`), kept (:attr:`_decoded`): a
        server parses a completion at one turn and appends it at the next (on a fork of the same state), and decodes
        it once."""
        key = (len(self._buffer), self._steps, tuple(completion))
        for known, text in self._decoded:
            if known == key:
                return text
        text = self._decode_after_buffer(completion)
        self._decoded = ((key, text), *self._decoded[:1])
        return text

    def _decode_after_buffer(self, completion: list[int]) -> str:
        """:meth:`_decode_in_context`, decoded now (nothing kept)."""
        codec = self._machinery.codec
        before = self._buffer[-DECODE_CONTEXT:]
        head = codec.decode(before)
        whole = codec.decode(before + completion)
        if whole.startswith(head):
            return whole[len(head) :]
        # a character split across the join (the buffer ended inside a UTF-8 sequence): decode it all
        return codec.decode(self._buffer + completion)[len(codec.decode(self._buffer)) :]

    def _commit(
        self,
        messages: list[Message],
        buffer: list[int],
        mask: list[int],
        view_ids: list[int],
        view_text: str,
        pending: PendingTurn,
    ) -> None:
        sampled = pending.sampled_logprobs  # the completion's, then None over the bridge
        self._logprobs = self._logprobs + sampled + [None] * (len(buffer) - len(self._logprobs) - len(sampled))
        self._messages, self._buffer, self._mask = messages, buffer, mask
        self._view_ids, self._view_text = view_ids, view_text
        if pending.completion:
            self._sampled_spans.append(pending.span)

    def _keep_buffer(
        self,
        details: SessionBreak,
        messages: list[Message],
        appended: list[Message],
        buffer: list[int],
        mask: list[int],
        prompt: RenderedPrefix,
        pending: PendingTurn,
    ) -> bool:
        """``warn``: keep the buffer as sampled and bridge with the template's history-free suffix; False when
        that suffix cannot be had (the stand-in is refused, or the turn was cut without its terminator)."""
        suffix = stand_in_suffix(self._machinery, appended, self._tools, self.clock, pending, details)
        if suffix is None:
            return False
        details.handled = "warned; buffer kept as sampled, new messages bridged with the stand-in suffix"
        self._commit(messages, buffer + suffix, mask + [0] * len(suffix), list(prompt.ids), prompt.text, pending)
        self._turns.append(pending.done((len(buffer), len(buffer) + len(suffix)), details))
        return True

    def _rerender(
        self,
        details: SessionBreak,
        messages: list[Message],
        buffer: list[int],
        mask: list[int],
        prompt: RenderedPrefix,
        pending: PendingTurn,
    ) -> None:
        """Continue from ``ids(R)``; the loss mask keeps what is still sampled (see :data:`POLICIES`), and the
        log-probabilities follow it (:mod:`~tito_audit.session.logprobs`)."""
        spans = self._sampled_spans + ([pending.span] if pending.completion else [])
        self._restart_from(prompt, buffer, mask, self._logprobs + pending.sampled_logprobs, spans)
        details.handled = ("warned; " if self.on_break == "warn" else "") + "re-rendered from the template"
        self._messages = messages
        ids = self._buffer
        self._turns.append(pending.done((len(ids), len(ids)), details))

    def _restart_from(
        self,
        prompt: RenderedPrefix,
        buffer: list[int] | None = None,
        mask: list[int] | None = None,
        logprobs: list[float | None] | None = None,
        spans: list[tuple[int, int]] | None = None,
    ) -> None:
        """The buffer becomes ``ids(R)`` of ``prompt``; the loss mask, the log-probabilities and the sampled spans
        of ``buffer`` (by default the session's own) are carried onto it where the sampled ids survive unchanged."""
        buffer = self._buffer if buffer is None else buffer
        mask = self._mask if mask is None else mask
        logprobs = self._logprobs if logprobs is None else logprobs
        spans = self._sampled_spans if spans is None else spans
        ids = list(prompt.ids)
        kept, placed = relocations(buffer, spans, ids)
        self._mask = carried(mask, kept, placed, len(ids), 0)
        self._logprobs = carried(logprobs, kept, placed, len(ids), None)
        self._buffer, self._view_ids, self._view_text = ids, list(ids), prompt.text
        self._sampled_spans = [(found, found + end - begin) for begin, end, found in placed]

    def _completion(self, value: Sequence[int] | None) -> list[int] | None:
        """The sampled ids as plain ints (lists, numpy arrays, torch tensors, array.array), each a token of the
        vocabulary; anything else is bad input naming the position (never a TitoBreak, never in the buffer)."""
        if value is None:
            return None
        return token_ids(value, "completion_ids", self._machinery.codec.id_limit)

    def _require_open(self) -> None:
        if self._state == "new":
            raise RuntimeError("call start(messages) first")
        if self._state == "finished":
            raise RuntimeError("this session is finished; open a new one with spawn()")

    def _render(self, messages: list[Message], *, step: int, roles: list[str]) -> RenderedPrefix:
        machinery, key = self._machinery, (len(messages), True)
        try:
            with machinery.lock, machinery.rendering(self.clock):
                return machinery.renderer.prefixes(list(messages), self._tools, [key])[key]
        except RenderError as exc:
            raise render_refused(step, len(messages), roles, exc) from None
