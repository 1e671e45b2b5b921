"""The buffer's step operations a session performs: commit a step, keep the buffer on a ``warn`` break, continue from
the template's render on ``rerender``, append the history-free bridge; decoding a completion as it reads in the buffer,
checking the sampled ids, rendering a step's prompt. The log-probabilities of the sampled ids move with the buffer
(:mod:`~tito_audit.session.buffer_logprobs`). :class:`~tito_audit.session.session.TitoSession` owns one
:class:`BufferSteps` and hands it its state at each call."""

from __future__ import annotations

from collections.abc import Sequence

from tito_audit.audit.public import Join, join
from tito_audit.conversations.conversation import Message
from tito_audit.model.render import RenderedPrefix, RenderError
from tito_audit.model.token_ids import token_ids
from tito_audit.session.breaks import SessionBreak, render_refused
from tito_audit.session.buffer_logprobs import Logprobs, carried
from tito_audit.session.policies import history_free_bridge, relocations, stand_in_suffix
from tito_audit.session.settings import SessionSettings
from tito_audit.session.state import FINISHED, NEW, OPEN, SessionState
from tito_audit.session.turn_records import PendingTurn

DECODE_CONTEXT = 16
"""Tokens of the buffer decoded with a new completion, so that decoders that treat the first token of a
sequence specially (a leading space dropped) decode the completion as it reads in the buffer."""


class BufferSteps:
    """The operations that change a session's buffer (see the module docstring), on the
    :class:`~tito_audit.session.state.SessionState` each call is handed; the session's settings are read, never
    written."""

    def __init__(self, settings: SessionSettings) -> None:
        self.settings = settings

    def history_free(
        self,
        state: SessionState,
        completion: list[int] | None,
        assistant: Message,
        appended: list[Message],
        logprobs: Logprobs | None,
    ) -> None:
        """``bridge="history-free"``: the completion as sampled, then the stand-in suffix of the new messages (appended
        in place: a step costs what it appends)."""
        pending = PendingTurn(
            len(state.messages), completion, len(state.buffer), self.settings.machinery.stop_ids, assistant, logprobs
        )
        start = len(state.buffer) + len(completion or [])
        suffix = history_free_bridge(self.settings.machinery, appended, self.settings.tools, pending, state.steps + 1)
        state.steps += 1
        ids = (completion or []) + suffix
        text = self.decode_in_context(state, ids)
        state.buffer += ids
        state.mask += [1] * len(completion or []) + [0] * len(suffix)
        state.logprobs += pending.sampled_logprobs + [None] * len(suffix)
        state.view_ids += ids
        state.view_text += text
        state.messages += [assistant, *appended]
        if completion:
            state.sampled_spans.append(pending.span)
        state.turns.append(pending.done((start, start + len(suffix)), bridged="stand-in"))

    def open_with(self, state: SessionState, history: list[Message], prompt: RenderedPrefix) -> None:
        """``start``: the buffer is the first prompt's ids, none of them sampled."""
        state.messages = history
        state.buffer, state.mask, state.logprobs = list(prompt.ids), [0] * len(prompt.ids), [None] * len(prompt.ids)
        state.view_ids, state.view_text = list(prompt.ids), prompt.text
        state.phase = OPEN

    def append_last(
        self, state: SessionState, completion: list[int] | None, assistant: Message, logprobs: Logprobs | None
    ) -> None:
        """``finish``: the last completion as sampled, no bridge after it; the session is finished."""
        pending = PendingTurn(
            len(state.messages), completion, len(state.buffer), self.settings.machinery.stop_ids, assistant, logprobs
        )
        if completion is not None:
            state.buffer += completion
            state.mask += [1] * len(completion)
            state.logprobs += pending.sampled_logprobs
            state.view_ids += completion
            state.sampled_spans.append(pending.span)
        state.turns.append(pending.done((len(state.buffer), len(state.buffer))))
        state.messages.append(assistant)
        state.phase = FINISHED

    def join(self, state: SessionState, view_text: str, completion: list[int] | None, prompt: RenderedPrefix) -> Join:
        codec = self.settings.machinery.codec
        if not codec.piecewise:
            return join(codec, view_text, prompt)

        # Backends that tokenize message by message (mistral-common) have no single-string encoding: the
        # canonical buffer is the template's ids so far plus the completion's canonical pieces.
        def canonical() -> list[int]:
            return state.view_ids + (codec.encode(codec.decode(completion)) if completion else [])

        return join(codec, view_text, prompt, canonical)

    def decode_in_context(self, state: SessionState, completion: list[int]) -> str:
        """The completion's text as it reads after the buffer (see :data:`DECODE_CONTEXT`), kept in the state's
        ``decoded``: a server parses a completion at one turn and appends it at the next (on a fork of the same state),
        and decodes it once."""
        key = (len(state.buffer), state.steps, tuple(completion))
        for known, text in state.decoded:
            if known == key:
                return text
        text = self.decode_after_buffer(state, completion)
        state.decoded = ((key, text), *state.decoded[:1])
        return text

    def decode_after_buffer(self, state: SessionState, completion: list[int]) -> str:
        """:meth:`decode_in_context`, decoded now (nothing kept)."""
        codec = self.settings.machinery.codec
        before = state.buffer[-DECODE_CONTEXT:]
        head = codec.decode(before)
        whole = codec.decode(before + completion)
        if whole.startswith(head):
            return whole[len(head) :]
        # a character split across the join (the buffer ended inside a UTF-8 sequence): decode it all
        return codec.decode(state.buffer + completion)[len(codec.decode(state.buffer)) :]

    def commit(
        self,
        state: SessionState,
        messages: list[Message],
        buffer: list[int],
        mask: list[int],
        view_ids: list[int],
        view_text: str,
        pending: PendingTurn,
    ) -> None:
        sampled = pending.sampled_logprobs  # the completion's, then None over the bridge
        state.logprobs = state.logprobs + sampled + [None] * (len(buffer) - len(state.logprobs) - len(sampled))
        state.messages, state.buffer, state.mask = messages, buffer, mask
        state.view_ids, state.view_text = view_ids, view_text
        if pending.completion:
            state.sampled_spans.append(pending.span)

    def keep_buffer(
        self,
        state: SessionState,
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
        suffix = stand_in_suffix(
            self.settings.machinery, appended, self.settings.tools, self.settings.clock, pending, details
        )
        if suffix is None:
            return False
        details.handled = "warned; buffer kept as sampled, new messages bridged with the stand-in suffix"
        self.commit(state, messages, buffer + suffix, mask + [0] * len(suffix), list(prompt.ids), prompt.text, pending)
        state.turns.append(pending.done((len(buffer), len(buffer) + len(suffix)), details))
        return True

    def rerender(
        self,
        state: SessionState,
        details: SessionBreak,
        messages: list[Message],
        buffer: list[int],
        mask: list[int],
        prompt: RenderedPrefix,
        pending: PendingTurn,
    ) -> None:
        """Continue from ``ids(R)``; the loss mask keeps what is still sampled (see :data:`POLICIES`), and the
        log-probabilities follow it (:mod:`~tito_audit.session.buffer_logprobs`)."""
        spans = state.sampled_spans + ([pending.span] if pending.completion else [])
        self.restart_from(state, prompt, buffer, mask, state.logprobs + pending.sampled_logprobs, spans)
        details.handled = ("warned; " if self.settings.on_break == "warn" else "") + "re-rendered from the template"
        state.messages = messages
        ids = state.buffer
        state.turns.append(pending.done((len(ids), len(ids)), details))

    def restart_from(
        self,
        state: SessionState,
        prompt: RenderedPrefix,
        buffer: list[int] | None = None,
        mask: list[int] | None = None,
        logprobs: list[float | None] | None = None,
        spans: list[tuple[int, int]] | None = None,
    ) -> None:
        """The buffer becomes ``ids(R)`` of ``prompt``; the loss mask, the log-probabilities and the sampled spans
        of ``buffer`` (by default the session's own) are carried onto it where the sampled ids survive unchanged."""
        buffer = state.buffer if buffer is None else buffer
        mask = state.mask if mask is None else mask
        logprobs = state.logprobs if logprobs is None else logprobs
        spans = state.sampled_spans if spans is None else spans
        ids = list(prompt.ids)
        kept, placed = relocations(buffer, spans, ids)
        state.mask = carried(mask, kept, placed, len(ids), 0)
        state.logprobs = carried(logprobs, kept, placed, len(ids), None)
        state.buffer, state.view_ids, state.view_text = ids, list(ids), prompt.text
        state.sampled_spans = [(found, found + end - begin) for begin, end, found in placed]

    def completion(self, value: Sequence[int] | None) -> list[int] | None:
        """The sampled ids as plain ints (lists, numpy arrays, torch tensors, array.array), each a token of the
        vocabulary; anything else is bad input naming the position (never a TitoBreak, never in the buffer)."""
        if value is None:
            return None
        return token_ids(value, "completion_ids", self.settings.machinery.codec.id_limit)

    def require_new(self, state: SessionState) -> None:
        if state.phase != NEW:
            raise RuntimeError("start() was already called on this session; open a new one with spawn()")

    def require_open(self, state: SessionState) -> None:
        if state.phase == NEW:
            raise RuntimeError("call start(messages) first")
        if state.phase == FINISHED:
            raise RuntimeError("this session is finished; open a new one with spawn()")

    def render(self, messages: list[Message], *, step: int, roles: list[str]) -> RenderedPrefix:
        machinery, key = self.settings.machinery, (len(messages), True)
        try:
            with machinery.lock, machinery.rendering(self.settings.clock):
                return machinery.renderer.prefixes(list(messages), self.settings.tools, [key])[key]
        except RenderError as exc:
            raise render_refused(step, len(messages), roles, exc) from None
