"""A completion read while the engine samples it: ids in, pieces of the assistant message out, settled on the
session's own parse at the end.

:class:`CompletionStream` decodes the ids as they read in the session's buffer (the stop token left out, a character
whose bytes are not all there yet held back; incrementally, :class:`_Decoded`: each piece costs what its own ids
cost, not what the whole completion does), hands each new piece of text to an incremental parser
(:mod:`tito_audit.parse.incremental`) and turns what it reads into :class:`Delta` objects. The message a session
appends is always the parse of the whole completion (:meth:`~tito_audit.session.TitoSession.parse`), as for a
turn that was not streamed; so that the pieces add up to that message, some text waits:

- whitespace at the end of the reasoning or the content, until text follows it (a parser strips it before a call);
- content that begins with whitespace while tool calls may still come, until the turn ends (a parser strips it when
  a call follows and keeps it otherwise);
- reasoning and content that come after a tool call began, until the turn ends (a parser drops text after calls);
- a call's arguments lose the whitespace outside strings (the answer carries them as compact JSON).

:meth:`CompletionStream.finish` then adds what the whole parse has beyond what was sent (text an incremental
detector held back and never released). When what was sent is not a prefix of the whole parse, the turn *diverged*:
the client keeps what it got (its echo is compared with that), the session appends its parse, and the field is
named (``diverged``). Without an incremental parser, everything is sent at the end (``mode`` ``buffered``).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tito_audit.parse.incremental import Increment, IncrementalParser, incremental
from tito_audit.parse.parser import ParseInput
from tito_audit.session import TitoSession
from tito_audit.session.steps import DECODE_CONTEXT

TEXT_FIELDS = ("reasoning_content", "content")
PARTIAL = "\ufffd"
"""What a decoder writes for bytes that are not (yet) a whole character."""
MAX_CHARACTER_BYTES = 4
"""UTF-8 writes a character in at most 4 bytes: at most 4 byte tokens of one character are still to come."""


@dataclass(frozen=True)
class Delta:
    """A piece of the answer: ``reasoning_content`` or ``content`` text, a new tool ``call`` (``index``, ``call_id``,
    ``name``), or ``arguments`` text of call ``index``."""

    field: str
    text: str = ""
    index: int = 0
    call_id: str | None = None
    name: str | None = None


@dataclass
class _Text:
    sent: str = ""
    held: str = ""
    hold_all: bool = False

    def take(self, text: str) -> str:
        self.held += text
        if self.hold_all:
            return ""
        cut = len(self.held.rstrip())
        out, self.held = self.held[:cut], self.held[cut:]
        self.sent += out
        return out


@dataclass
class _Call:
    call_id: str
    name: str
    sent: str = ""
    minifier: _Minifier = field(default_factory=lambda: _Minifier())


class _Minifier:
    """JSON text with the whitespace outside strings dropped, piece by piece; nothing after the first whole value
    (a detector that sends the next call's arguments under this call's index: held, the whole parse decides)."""

    def __init__(self) -> None:
        self.in_string = False
        self.escaped = False
        self.depth = 0
        self.whole = False

    def feed(self, text: str) -> str:
        out = []
        for char in text:
            if self.whole:
                break
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif char == "\\":
                    self.escaped = True
                elif char == '"':
                    self.in_string = False
            elif char == '"':
                self.in_string = True
            elif char in " \t\r\n":
                continue
            elif char in "{[":
                self.depth += 1
            elif char in "}]":
                self.depth -= 1
                self.whole = self.depth <= 0
            out.append(char)
        return "".join(out)


class _Decoded:
    """A completion's text as it reads after the session's buffer, decoded as its ids come in.

    The text is *settled* up to an id after which no character waits for more bytes; each call decodes only the ids
    past that point, after :data:`~tito_audit.session.steps.DECODE_CONTEXT` ids of context (as
    :meth:`~tito_audit.session.TitoSession.decode_completion` reads a completion after the buffer), so a
    completion of n ids costs O(n) to stream, not O(n^2). A decoder whose text for the window is not a continuation of
    its context's text is read whole by the caller instead, as every piece was before."""

    def __init__(self, decode: Callable[[list[int]], str], before: list[int]) -> None:
        self._decode = decode
        self._before = before
        self._settled = 0
        self._parts: list[str] = []
        self._length = 0

    def since(self, ids: list[int], end: int, start: int) -> str | None:
        """The text of ``ids[:end]`` from character ``start`` on (``start`` at most its length); None when the new ids
        do not read as a continuation of the text before them (the caller decodes the whole completion)."""
        piece = self._window(ids, self._settled, end)
        if piece is None:
            return None
        base = self._length  # where ``piece`` begins in the text
        if not piece.endswith(PARTIAL):
            self._settle(piece, end)
        else:  # settle before the ids whose bytes a character still waits for (at most 3 of them)
            for cut in range(end - 1, max(self._settled, end - MAX_CHARACTER_BYTES), -1):
                head = self._window(ids, self._settled, cut)
                if head is not None and not head.endswith(PARTIAL) and piece.startswith(head):
                    self._settle(head, cut)
                    break
        if start >= base:
            return piece[start - base :]
        return "".join(self._parts)[start:base] + piece

    def waiting(self, end: int) -> int:
        """How many of the first ``end`` ids are past the settled text."""
        return end - self._settled

    def _window(self, ids: list[int], begin: int, end: int) -> str | None:
        """The text of ``ids[begin:end]`` as it reads after what comes before it; None when it does not read as a
        continuation of that context (a decoder that groups byte tokens, SentencePiece's byte fallback, reads a
        character still in pieces with the whole characters before it as invalid bytes)."""
        for extra in range(MAX_CHARACTER_BYTES + 1):  # a context that begins inside a character begins earlier
            context = self._context(ids, begin, DECODE_CONTEXT + extra)
            head = self._decode(context)
            if not head.startswith(PARTIAL) or len(context) < DECODE_CONTEXT + extra:
                break
        text = self._decode(context + ids[begin:end])
        return text[len(head) :] if text.startswith(head) else None

    def _context(self, ids: list[int], begin: int, size: int) -> list[int]:
        """The ``size`` ids before ``ids[begin]``, the buffer's last ids before the completion's first."""
        if begin >= size:
            return ids[begin - size : begin]
        return self._before[max(0, len(self._before) - (size - begin)) :] + ids[:begin]

    def _settle(self, piece: str, end: int) -> None:
        self._parts.append(piece)
        self._length += len(piece)
        self._settled = end


class CompletionStream:
    """One completion of ``session`` (the step's copy, its buffer the prompt), read as its ids arrive."""

    def __init__(self, session: TitoSession, parser: Any, tools: list[dict] | None) -> None:
        self._session = session
        self._stops = session.stop_ids
        reasoning_open = bool(parser is not None and session.reasoning_open)
        self._parser: IncrementalParser | None
        self._parser, self.why_buffered = incremental(parser, tools, reasoning_open)
        self._whole = (parser, tools, reasoning_open)
        self._calls_may_come = bool(tools)
        self.mode = "incremental" if self._parser is not None else "buffered"
        self.ids: list[int] = []
        self._fed_parts: list[str] = []
        self._fed_length = 0
        self._decoded = _Decoded(self._decode, session.buffer_tail(DECODE_CONTEXT))
        self._texts = {name: _Text() for name in TEXT_FIELDS}
        self._calls: list[_Call] = []
        self._seed = uuid.uuid4().hex
        self.diverged: list[str] = []

    # -- while the engine samples -------------------------------------------------------------------------------
    def feed(self, ids: list[int]) -> list[Delta]:
        """The pieces of the answer ``ids`` (the next ids the engine sampled) add; call it in a worker thread."""
        self.ids += ids
        if self._parser is None:
            return []
        end = len(self.ids) - 1 if self.ids and self.ids[-1] in self._stops else len(self.ids)
        text = self._decoded.since(self.ids, end, self._fed_length)
        if text is None and self._decoded.waiting(end) <= MAX_CHARACTER_BYTES:
            return []  # a character still in pieces: it reads once its bytes are there
        if text is None:
            whole = self._decode_whole(self.ids[:end])
            if not whole.startswith(self._fed):  # a decoder that reads earlier ids anew: wait for the whole completion
                return []
            text = whole[self._fed_length :]
        new = text.rstrip(PARTIAL)  # a character whose bytes are not all there yet
        if not new:
            return []
        self._fed_parts.append(new)
        self._fed_length += len(new)
        return self._read(self._parser.feed(new))

    @property
    def _fed(self) -> str:
        """The text handed to the incremental parser so far."""
        if len(self._fed_parts) > 1:
            self._fed_parts = ["".join(self._fed_parts)]
        return self._fed_parts[0] if self._fed_parts else ""

    def _read(self, increment: Increment) -> list[Delta]:
        out: list[Delta] = []
        content = self._texts["content"]
        if self._calls_may_come and not content.sent and not content.held and increment.content[:1].isspace():
            content.hold_all = True
        if increment.calls and not self._calls:
            out += self._settle_text()
        if self._calls or increment.calls:
            for text in self._texts.values():
                text.hold_all = True
        for name, piece in (("reasoning_content", increment.reasoning), ("content", increment.content)):
            if piece and (taken := self._texts[name].take(piece)):
                out.append(Delta(name, taken))
        for call in increment.calls:
            out += self._call_piece(call.index, call.name, call.arguments)
        return out

    def _settle_text(self) -> list[Delta]:
        """Before the first call: the reasoning and content as the whole parse reads the text so far (what was held
        is sent now when it is theirs, so that the answer's parts come in their order)."""
        if not any(text.held for text in self._texts.values()):
            return []
        parser, tools, reasoning_open = self._whole
        try:
            given = ParseInput(self._fed, tools, self._session.prompt_text, reasoning_open)
            with self._session.lock:
                settled = parser.parse(given)
        except Exception:  # the whole parse at the end decides
            return []
        out: list[Delta] = []
        for name, text in self._texts.items():
            value = settled.get(name) or ""
            if text.held and value.startswith(text.sent) and len(value) > len(text.sent):
                out.append(Delta(name, value[len(text.sent) :]))
                text.sent, text.held = value, ""
        return out

    def _call_piece(self, index: int, name: str | None, arguments: str, call_id: str | None = None) -> list[Delta]:
        out: list[Delta] = []
        if index == len(self._calls) and name:
            call_id = call_id or f"call_{hashlib.sha256(f'{self._seed}:{index}'.encode()).hexdigest()[:24]}"
            self._calls.append(_Call(call_id, name))
            out.append(Delta("call", index=index, call_id=self._calls[index].call_id, name=name))
        if index < len(self._calls) and arguments and (text := self._calls[index].minifier.feed(arguments)):
            self._calls[index].sent += text
            out.append(Delta("arguments", text, index))
        return out

    # -- once the engine ended ----------------------------------------------------------------------------------
    def finish(self, wire: dict[str, Any]) -> tuple[list[Delta], dict[str, Any]]:
        """The pieces still to send so that the answer adds up to ``wire`` (the whole parse as the non-streamed answer
        carries it: :func:`~tito_audit.gateway.protocol.wire_message`), and the message as the client got it."""
        out: list[Delta] = []
        if self._parser is not None:
            whole = self._decode_whole(self.ids[:-1] if self.ids and self.ids[-1] in self._stops else self.ids)
            if whole.startswith(self._fed):  # the rest, then what the parser held back
                rest, self._fed_parts, self._fed_length = whole[self._fed_length :], [whole], len(whole)
                out += self._read(self._parser.feed(rest).add(self._parser.end()) if rest else self._parser.end())
        got: dict[str, Any] = {"role": "assistant"}
        for name, text in self._texts.items():
            final = wire.get(name) or ""
            if final.startswith(text.sent):
                rest = final[len(text.sent) :]
            else:
                self.diverged.append(name)
                rest = text.held
            if rest:
                out.append(Delta(name, rest))
            got[name] = text.sent + rest
        calls = [(c["function"]["name"], c["function"]["arguments"], c["id"]) for c in wire.get("tool_calls") or []]
        for index, (name, arguments, call_id) in enumerate(calls):
            if index == len(self._calls):  # a call the stream did not show yet: the whole parse's id
                out += self._call_piece(index, name, "", call_id)
            call = self._calls[index]
            if call.name == name and arguments.startswith(call.sent):
                rest = arguments[len(call.sent) :]
                if rest:
                    out.append(Delta("arguments", rest, index))
                call.sent = arguments
            elif "tool_calls" not in self.diverged:
                self.diverged.append("tool_calls")
        if len(self._calls) > len(calls) and "tool_calls" not in self.diverged:
            self.diverged.append("tool_calls")
        got["content"] = got["content"] or None
        if not got["reasoning_content"]:
            got.pop("reasoning_content")
        if self._calls:
            got["tool_calls"] = [
                {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.sent}}
                for c in self._calls
            ]
        return out, got

    @property
    def lock(self) -> Any:
        """The model's lock (reentrant) that decoding takes: a caller that holds it feeds without waiting."""
        return self._session.lock

    def info(self) -> dict[str, Any]:
        """What the first event says of the stream: ``incremental``, or ``buffered`` and why."""
        if self.mode == "buffered":
            return {"mode": "buffered", "why": self.why_buffered}
        return {"mode": "incremental"}

    def _decode_whole(self, ids: list[int]) -> str:
        """The whole completion ``ids`` as it reads in the session's buffer."""
        return self._session.decode_completion(ids)

    def _decode(self, ids: list[int]) -> str:
        session = self._session
        with session.lock:  # the codec's caches are shared by the model's sessions
            return session.codec.decode(ids)
