"""A completion read while the engine samples it: ids in, pieces of the assistant message out, settled on the
session's own parse at the end.

:class:`CompletionStream` decodes the ids as they read in the session's buffer (the stop token left out, a character
whose bytes are not all there yet held back), hands each new piece of text to an incremental parser
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
from dataclasses import dataclass, field
from typing import Any

from tito_audit.parse.incremental import Increment, IncrementalParser, incremental
from tito_audit.parse.parser import ParseInput

TEXT_FIELDS = ("reasoning_content", "content")


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


class CompletionStream:
    """One completion of ``session`` (the step's copy, its buffer the prompt), read as its ids arrive."""

    def __init__(self, session: Any, parser: Any, tools: list[dict] | None) -> None:
        self._session = session
        self._stops = session.stop_ids
        reasoning_open = bool(parser is not None and session._parser is not None and session._parser.reasoning_open)
        self._parser: IncrementalParser | None
        self._parser, self.why_buffered = incremental(parser, tools, reasoning_open)
        self._whole = (parser, tools, reasoning_open)
        self._calls_may_come = bool(tools)
        self.mode = "incremental" if self._parser is not None else "buffered"
        self.ids: list[int] = []
        self._fed = ""
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
        visible = self.ids[:-1] if self.ids and self.ids[-1] in self._stops else self.ids
        text = self._decode(visible)
        if not text.startswith(self._fed):  # a decoder that reads earlier ids anew: wait for the whole completion
            return []
        new = text[len(self._fed) :].rstrip("\ufffd")  # a character whose bytes are not all there yet
        if not new:
            return []
        self._fed += new
        return self._read(self._parser.feed(new))

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
        for piece in increment.calls:
            out += self._call_piece(piece.index, piece.name, piece.arguments)
        return out

    def _settle_text(self) -> list[Delta]:
        """Before the first call: the reasoning and content as the whole parse reads the text so far (what was held
        is sent now when it is theirs, so that the answer's parts come in their order)."""
        if not any(text.held for text in self._texts.values()):
            return []
        parser, tools, reasoning_open = self._whole
        try:
            given = ParseInput(self._fed, tools, self._session._view_text, reasoning_open)
            with self._session._machinery.lock:
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
            whole = self._decode(self.ids[:-1] if self.ids and self.ids[-1] in self._stops else self.ids)
            if whole.startswith(self._fed):  # the rest, then what the parser held back
                rest, self._fed = whole[len(self._fed) :], whole
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

    def info(self) -> dict[str, Any]:
        """What the first event says of the stream: ``incremental``, or ``buffered`` and why."""
        if self.mode == "buffered":
            return {"mode": "buffered", "why": self.why_buffered}
        return {"mode": "incremental"}

    def _decode(self, ids: list[int]) -> str:
        session = self._session
        with session._machinery.lock:  # the codec's caches are shared by the model's sessions
            return session._decode_in_context(ids)
