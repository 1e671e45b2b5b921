"""The OpenAI chat-completions shapes a gateway reads and writes: the request checked into plain messages, the
response and its streamed chunks, and the error body.

Messages are taken in the form the template renders (as SGLang does before rendering): text content parts joined
into one string, each call's ``arguments`` (a JSON string on the wire) parsed into an object. A bad request is a
:class:`~tito_audit.gateway.errors.RequestError` with its status and one line naming the field at fault.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tito_audit.gateway.errors import RequestError
from tito_audit.gateway.sampling_engines import PASSED_THROUGH, dumps
from tito_audit.session.inputs import MAX_DEPTH, too_deep

ROLES = ("system", "developer", "user", "assistant", "tool")
KEPT = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content")
TOOL_CHOICES = ("auto", "none", "required")


SessionName = tuple[str, str]
"""A session id a request names, and what named it (``the X-Session-Id header``, ``user``)."""


@dataclass
class ChatRequest:
    model: str
    messages: list[dict]
    tools: list[dict] | None
    tool_choice: Any
    stream: bool
    include_usage: bool
    sampling: dict[str, Any]
    user: str | None
    session_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    """What the client calls each message (``messages[3]``, ``input[2]``, ``messages[1].content[0]``), for errors."""
    named: SessionName | None = None
    """The session the body names, and the field that names it (``user``, ``prompt_cache_key``,
    ``metadata.user_id``)."""
    ignored: list[str] = field(default_factory=list)
    """The request's fields the gateway does not act on (accepted, listed in the session's record)."""
    dialect: str = "chat"
    """The API the request came in (``chat``, ``responses``, ``messages``): a refusal is said in its terms."""

    def name(self, index: int) -> str:
        return self.names[index] if index < len(self.names) else f"messages[{index}]"


CHAT_FIELDS = frozenset(
    {"model", "messages", "tools", "tool_choice", "n", "stream", "stream_options", "user", "max_completion_tokens"}
    | {"logprobs", "top_logprobs", "max_tokens", "stop", *PASSED_THROUGH}
)
"""The chat request's fields the gateway acts on; any other is accepted and listed as not acted on."""


def not_acted_on(body: dict[str, Any], acted_on: frozenset[str]) -> list[str]:
    """The fields of ``body`` the gateway does not act on (sorted): accepted, listed once in the session's record."""
    return sorted(key for key in body if key not in acted_on)


def read_request(
    body: Any,
    names: list[str] | None = None,
    named: SessionName | None = None,
    ignored: list[str] | None = None,
) -> ChatRequest:
    """The request ``body`` (parsed JSON) checked; raises :class:`RequestError` (400) naming the field. ``names``:
    what a dialect's client calls each message (default ``messages[i]``); ``named``: the session a dialect's body
    names (default: chat's ``user``); ``ignored``: the dialect's fields it does not act on (default: chat's)."""
    if not isinstance(body, dict):
        raise RequestError(400, "invalid_request", "the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "invalid_request", "messages: a non-empty list of messages is required")
    taken = [take_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
    tools = body.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(_is_tool(t) for t in tools)):
        raise RequestError(400, "invalid_request", "tools: a list of {type: function, function: {name, ...}}")
    tool_choice = body.get("tool_choice", "auto")
    if not (tool_choice in TOOL_CHOICES or _named_choice(tool_choice)):
        raise RequestError(400, "invalid_request", "tool_choice: auto, none, required or {type: function, ...}")
    if body.get("n", 1) != 1:
        raise RequestError(400, "invalid_request", "n: a session samples one answer per turn (n must be 1)")
    sampling = {key: body[key] for key in PASSED_THROUGH if body.get(key) is not None}
    if body.get("max_completion_tokens") is not None:
        sampling["max_tokens"] = body["max_completion_tokens"]
    for key in ("max_tokens", "top_k", "seed"):
        if key in sampling and (type(sampling[key]) is not int or (key == "max_tokens" and sampling[key] < 1)):
            raise RequestError(400, "invalid_request", f"{key} must be a positive integer")
    for key in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        if key in sampling and not isinstance(sampling[key], (int, float)):
            raise RequestError(400, "invalid_request", f"{key} must be a number")
    options = body.get("stream_options") or {}
    user = body.get("user")
    user = user if isinstance(user, str) and user else None
    if named is None and user is not None:
        named = (user, "user")
    return ChatRequest(
        model=str(body.get("model") or ""),
        messages=taken,
        tools=tools or None,
        tool_choice=tool_choice,
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        sampling=sampling,
        user=user,
        names=list(names or []),
        named=named,
        ignored=ignored if ignored is not None else not_acted_on(body, CHAT_FIELDS),
    )


def take_message(value: Any, where: str) -> dict:
    """One message in the form the template renders (see the module docstring)."""
    if not isinstance(value, dict):
        raise RequestError(400, "invalid_request", f"{where}: a message must be an object with a role")
    role = value.get("role")
    if role not in ROLES:
        raise RequestError(400, "invalid_request", f"{where}.role: one of {', '.join(ROLES)}, not {role!r}")
    message: dict[str, Any] = {k: value[k] for k in KEPT if k in value and value[k] is not None}
    message["role"] = role
    message["content"] = _content(value.get("content"), f"{where}.content")
    calls = value.get("tool_calls")
    if calls:
        if role != "assistant" or not isinstance(calls, list):
            raise RequestError(400, "invalid_request", f"{where}.tool_calls: a list, on assistant messages only")
        message["tool_calls"] = [_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
    else:
        message.pop("tool_calls", None)
    return message


def _content(value: Any, where: str) -> str:
    return joined_text(value, where)


def joined_text(
    value: Any, where: str, *, text_type: str | None = "text", noun: str = "parts", null: bool = True
) -> str:
    """A message's text: a string, None (when ``null``) or a list of text parts joined. ``text_type`` is the type a
    part must have (None: any part with a ``text``, as the Responses API's ``input_text``/``output_text``); ``noun``
    names the parts in the one-line error (``parts`` for OpenAI, ``blocks`` for Anthropic)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for part in value:
            typed = text_type is None or (isinstance(part, dict) and part.get("type") == text_type)
            if not (typed and isinstance(part, dict) and isinstance(part.get("text"), str)):
                raise RequestError(400, "invalid_request", f"{where}: only text {noun} are supported")
            texts.append(part["text"])
        return "".join(texts)
    nulls = ", null" if null else ""
    raise RequestError(400, "invalid_request", f"{where}: a string{nulls} or a list of text {noun}")


def _call(value: Any, where: str) -> dict:
    function = value.get("function") if isinstance(value, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise RequestError(400, "invalid_request", f"{where}: {{id, type: function, function: {{name, arguments}}}}")
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
            deep = too_deep(arguments)
        except ValueError:
            raise RequestError(400, "invalid_request", f"{where}.function.arguments is not valid JSON") from None
        except RecursionError:
            deep = True
        if deep:
            raise RequestError(
                400, "nested_too_deeply", f"{where}.function.arguments is nested deeper than {MAX_DEPTH} levels"
            )
    call = {"type": "function", "function": {"name": function["name"], "arguments": arguments}}
    if isinstance(value.get("id"), str):
        call = {"id": value["id"], **call}
    return call


def _is_tool(value: Any) -> bool:
    return isinstance(value, dict) and isinstance((value.get("function") or {}).get("name"), str)


def _named_choice(value: Any) -> bool:
    return isinstance(value, dict) and isinstance((value.get("function") or {}).get("name"), str)


def comparable(message: dict) -> dict:
    """What must match when a client sends history again: everything but ``reasoning_content`` (clients commonly
    drop it; the gateway appends its own record of the turn anyway), with empty and missing content alike."""
    out = {k: v for k, v in message.items() if k != "reasoning_content" and v not in (None, "", [])}
    if "tool_calls" in out:
        out["tool_calls"] = [
            {"id": c.get("id"), "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in out["tool_calls"]
        ]
    return out


# -- responses --------------------------------------------------------------------------------------------------
def wire_message(message: dict) -> dict:
    """The assistant message as the OpenAI response carries it (arguments as JSON strings, empty content null)."""
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or None}
    if message.get("reasoning_content"):
        out["reasoning_content"] = message["reasoning_content"]
    calls = message.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [
            {
                "id": call.get("id") or f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": _arguments(call["function"])},
            }
            for call in calls
        ]
    return out


def _arguments(function: dict) -> str:
    arguments = function.get("arguments", {})
    return arguments if isinstance(arguments, str) else dumps(arguments)


def finish_reason(message: dict, engine_finish: str) -> str:
    if engine_finish == "length":
        return "length"
    return "tool_calls" if message.get("tool_calls") else "stop"


@dataclass
class Answer:
    """One turn's answer, shaped for the non-streamed response and for the chunks."""

    model: str
    message: dict
    """The wire message (:func:`wire_message`)."""
    finish: str
    prompt_tokens: int
    completion_tokens: int
    tito: dict[str, Any]
    logprobs: dict[str, Any] | None = None
    """``choices[].logprobs`` (``{"content": [...]}``) when the request asked (``logprobs: true``)."""
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))

    def usage(self) -> dict[str, int]:
        total = self.prompt_tokens + self.completion_tokens
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens, "total_tokens": total}

    def response(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": self.message, "finish_reason": self.finish, "logprobs": self.logprobs}],
            "usage": self.usage(),
            "tito": self.tito,
        }

    def chunks(self, include_usage: bool, piece: int = 16) -> Iterator[dict[str, Any]]:
        """The answer as OpenAI chunks: the role, reasoning and content in pieces of ``piece`` characters, each call
        (id and name first, then its arguments in pieces), the finish reason (with the ``tito`` record), usage."""

        def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> dict[str, Any]:
            # the log-probabilities ride on the last chunk whole (the text is cut in characters, not tokens)
            logprobs = self.logprobs if finish is not None else None
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
            body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model}
            return {**body, "choices": [choice], **more}

        yield chunk({"role": "assistant", "content": ""})
        for key in ("reasoning_content", "content"):
            text = self.message.get(key) or ""
            for start in range(0, len(text), piece):
                yield chunk({key: text[start : start + piece]})
        for index, call in enumerate(self.message.get("tool_calls") or []):
            head = {"index": index, "id": call["id"], "type": "function"}
            yield chunk({"tool_calls": [{**head, "function": {"name": call["function"]["name"], "arguments": ""}}]})
            arguments = call["function"]["arguments"]
            for start in range(0, len(arguments), piece):
                part = {"index": index, "function": {"arguments": arguments[start : start + piece]}}
                yield chunk({"tool_calls": [part]})
        yield chunk({}, self.finish, tito=self.tito)
        if include_usage:
            yield {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": self.usage(),
            }


def session_headers(session_id: str) -> dict[str, str]:
    """The response headers naming the session. A printable ASCII id is ``X-Session-Id`` as it is; any other id
    (HTTP header values are ASCII) is its UTF-8 bytes percent-encoded, as the id goes in ``/sessions/{id}``, and
    ``X-Session-Id*`` carries the same in RFC 8187's form (``UTF-8''%D0%BA…``) to say that it is encoded."""
    if session_id.isascii() and session_id.isprintable():
        return {"X-Session-Id": session_id}
    encoded = _percent_encoded(session_id)
    return {"X-Session-Id": encoded, "X-Session-Id*": f"UTF-8''{encoded}"}


def _percent_encoded(session_id: str) -> str:
    return urllib.parse.quote(session_id, safe="")


def requested_session(raw: bytes | None, extended: bytes | None) -> str | None:
    """The session a request names in its headers: ``X-Session-Id`` read as UTF-8 (its raw bytes: clients send UTF-8
    text as is), or ``X-Session-Id*`` in RFC 8187's form (``UTF-8''`` then the id percent-encoded), which wins over an
    ``X-Session-Id`` that is its percent-encoded fallback (the headers a response carries, sent back)."""
    plain = extended_id = None
    if raw is not None:
        try:
            plain = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise RequestError(400, "invalid_request", "the X-Session-Id header is not UTF-8 text") from None
    if extended is not None:
        charset, _, rest = extended.decode("latin-1").partition("'")
        _, _, encoded = rest.partition("'")
        try:
            if charset.lower() != "utf-8" or "'" not in rest:
                raise ValueError
            extended_id = urllib.parse.unquote(encoded, errors="strict")
        except ValueError:
            raise RequestError(
                400, "invalid_request", "the X-Session-Id* header must be UTF-8'' then the id percent-encoded"
            ) from None
    if plain is not None and extended_id is not None and plain not in (extended_id, _percent_encoded(extended_id)):
        raise RequestError(400, "invalid_request", "X-Session-Id and X-Session-Id* name different sessions")
    return extended_id if extended_id is not None else plain


def error_body(status: int, code: str, message: str) -> dict[str, Any]:
    """The OpenAI error JSON; ``type`` says whose fault: the request's (4xx), the engine's (502, 504) or the
    gateway's own (503 too many sessions busy, 507 out of its memory budget, 500)."""
    kind = "invalid_request_error" if status < 500 else "engine_error" if status in (502, 504) else "server_error"
    return {"error": {"message": message, "type": kind, "code": code, "param": None}, "status": status}
