"""Anthropic's Messages API (``POST /v1/messages``) on the same sessions and buffers as chat completions.

A request becomes the messages a chat request would carry: the top-level ``system`` (a string or text blocks) a
system message first; a ``user`` message's ``tool_result`` blocks one tool message each (``tool_use_id`` the call it
answers, its text content; ``is_error`` is not rendered), then its text blocks one user message; an ``assistant``
message one assistant turn (``thinking`` blocks its ``reasoning_content``, ``text`` blocks its content, ``tool_use``
blocks its ``tool_calls``: ``id``, ``name``, ``input`` as the arguments; ``redacted_thinking`` is dropped). Tools
(``name``, ``description``, ``input_schema``) become functions with ``input_schema`` as their parameters;
``tool_choice`` ``auto``/``any``/``tool``/``none`` becomes ``auto``/``required``/the named function/``none``;
``max_tokens``, ``temperature``, ``top_p``, ``top_k`` and ``stop_sequences`` go to the engine (``thinking`` does not:
the template's settings decide). The answer goes back as a ``thinking`` block (``signature`` empty), a ``text``
block and one ``tool_use`` block per call (``input`` the arguments), with ``stop_reason`` ``tool_use``, ``end_turn``
or ``max_tokens``. The session is ``X-Session-Id``, else ``metadata.user_id``, else a new one. Errors have Anthropic's
shape (``{"type": "error", "error": {"type", "message"}}``, with the gateway's ``code``). Streamed: ``message_start``,
per block ``content_block_start``, its ``content_block_delta`` events (``thinking_delta``, ``text_delta``,
``input_json_delta``), the blocks' ``content_block_stop`` at the end, ``message_delta`` (stop reason, output tokens,
the ``tito`` record) and, once the turn is kept, ``message_stop``; an engine that breaks off, or a turn that cannot be
kept, sends an ``error`` event instead.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse, Response

from tito_audit.gateway.completion_stream import Delta
from tito_audit.gateway.dialects.interface import Dialect
from tito_audit.gateway.errors import RequestError
from tito_audit.gateway.protocol import (
    Answer,
    SessionName,
    joined_text,
    not_acted_on,
    read_request,
    session_headers,
    take_message,
)
from tito_audit.gateway.turn_stream import Event, Failed, Finished, Started, open_response, sse

MESSAGES_FIELDS = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "max_tokens", "temperature", "top_p", "top_k"}
    | {"stop_sequences", "stream", "metadata"}
)
"""The Messages request's fields the gateway acts on; any other (``thinking``, ``context_management``,
``output_config``, ...) is accepted and listed in the session's record as not acted on."""
STOP_REASONS = {"tool_calls": "tool_use", "stop": "end_turn", "length": "max_tokens"}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
}


def error_body(status: int, code: str, message: str) -> dict[str, Any]:
    """An error in Anthropic's shape (the gateway's ``code`` beside its ``type``)."""
    kind = ERROR_TYPES.get(status) or (
        "invalid_request_error" if status < 500 else "overloaded_error" if status == 503 else "api_error"
    )
    return {"type": "error", "error": {"type": kind, "message": message, "code": code}}


class Messages(Dialect):
    """``POST /v1/messages`` (see the module docstring), its refusals in Anthropic's shape."""

    path = "/v1/messages"

    async def handle(self, body: Any, header: SessionName | None) -> Response:
        if not isinstance(body, dict):
            raise RequestError(400, "invalid_request", "the request body must be a JSON object")
        metadata = body.get("metadata")
        user = (
            metadata.get("user_id") if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str) else None
        )
        names: list[str] = []
        named = user_session(user) if user else None
        request = read_request(chat_body(body, user, names), names, named, not_acted_on(body, MESSAGES_FIELDS))
        request.dialect = "messages"
        message_id = f"msg_{uuid.uuid4().hex}"
        if body.get("stream"):
            return await open_response(self.gateway, request, header, lambda turn: events(turn.events(), message_id))
        answer = await self.gateway.turn(request, header)
        return JSONResponse(message(answer, message_id), headers=session_headers(answer.tito["session"]))

    def error_body(self, status: int, code: str, message: str) -> dict[str, Any]:
        return error_body(status, code, message)


def user_session(user_id: str) -> tuple[str, str]:
    """The session ``metadata.user_id`` names: the ``session_id`` of a user id that is a JSON object holding one (as
    Claude Code writes it: device, account and session), else the user id itself."""
    try:
        value = json.loads(user_id) if user_id.startswith("{") else None
    except ValueError:
        value = None
    if isinstance(value, dict) and isinstance(value.get("session_id"), str) and value["session_id"]:
        return value["session_id"], "metadata.user_id's session_id"
    return user_id, "metadata.user_id"


def chat_body(body: dict[str, Any], user: str | None, names: list[str] | None = None) -> dict[str, Any]:
    """The chat request body the Messages request ``body`` makes (see the module docstring); ``names`` gets what the
    client calls each message (``messages[1].content[0]`` for a tool result)."""
    names = names if names is not None else []
    messages: list[dict] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _text(system, "system")})
        names.append("system")
    given = body.get("messages")
    if not isinstance(given, list) or not given:
        raise RequestError(400, "invalid_request", "messages: a non-empty list of messages is required")
    for index, item in enumerate(given):
        made = _message(item, f"messages[{index}]")
        messages += [message for message, _ in made]
        names += [name for _, name in made]
    chat: dict[str, Any] = {"messages": messages, "user": user}
    if body.get("max_tokens") is not None:
        chat["max_tokens"] = body["max_tokens"]
    for key in ("temperature", "top_p", "top_k"):
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    tools = body.get("tools")
    if tools:
        if not isinstance(tools, list):
            raise RequestError(400, "invalid_request", "tools: a list of tools ({name, description, input_schema})")
        chat["tools"] = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools)]
    chat["tool_choice"] = _choice(body.get("tool_choice"))
    return chat


def _message(item: Any, where: str) -> list[tuple[dict, str]]:
    """The chat messages of one Messages message, each with what the client calls it."""
    if not isinstance(item, dict) or item.get("role") not in ("user", "assistant", "system"):
        raise RequestError(400, "invalid_request", f"{where}.role: user, assistant or system")
    content = item.get("content")
    if item["role"] == "system":  # a system message inside the conversation, rendered where it stands
        return [(take_message({"role": "system", "content": _text(content, f"{where}.content")}, where), where)]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        raise RequestError(400, "invalid_request", f"{where}.content: a string or a list of content blocks")
    if item["role"] == "assistant":
        return [(_assistant(blocks, where), where)]
    out: list[tuple[dict, str]] = []
    texts: list[str] = []
    for number, block in enumerate(blocks):
        at = f"{where}.content[{number}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise RequestError(400, "invalid_request", f"{at}.tool_use_id: the id of the tool_use it answers")
            result = {
                "role": "tool",
                "tool_call_id": block["tool_use_id"],
                "content": _text(block.get("content"), f"{at}.content"),
            }
            out.append((take_message(result, at), at))
        elif kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        else:
            raise RequestError(
                400, "invalid_request", f"{at}.type: {kind!r} is not supported in a user message (text, tool_result)"
            )
    if texts or not out:
        out.append((take_message({"role": "user", "content": "".join(texts)}, where), where))
    return out


def _assistant(blocks: list[Any], where: str) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    for number, block in enumerate(blocks):
        at = f"{where}.content[{number}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            message["content"] += block["text"]
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            message["reasoning_content"] = message.get("reasoning_content", "") + block["thinking"]
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use" and isinstance(block.get("id"), str) and isinstance(block.get("name"), str):
            arguments = block.get("input") if block.get("input") is not None else {}
            call = {"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": arguments}}
            message.setdefault("tool_calls", []).append(call)
        else:
            raise RequestError(
                400,
                "invalid_request",
                f"{at}.type: {kind!r} is not supported in an assistant message (text, thinking, tool_use)",
            )
    return take_message(message, where)


def _text(value: Any, where: str) -> str:
    return joined_text(value, where, noun="blocks", null=False)


def _tool(tool: Any, where: str) -> dict:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or tool.get("type") not in (None, "custom"):
        raise RequestError(400, "invalid_request", f"{where}: only client tools ({{name, description, input_schema}})")
    function: dict[str, Any] = {"name": tool["name"]}  # in the order chat clients send them: the template dumps them
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = tool.get("input_schema") or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def _choice(value: Any) -> Any:
    if value is None:
        return "auto"
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "tool" and isinstance(value.get("name"), str):
        return {"type": "function", "function": {"name": value["name"]}}
    if kind in ("auto", "none", "any"):
        return {"any": "required"}.get(kind, kind)
    raise RequestError(
        400, "invalid_request", "tool_choice: {type: auto}, {type: any}, {type: none} or {type: tool, name}"
    )


def blocks(wire: dict) -> list[dict]:
    """The answer's content blocks."""
    out: list[dict] = []
    if wire.get("reasoning_content"):
        out.append({"type": "thinking", "thinking": wire["reasoning_content"], "signature": ""})
    if wire.get("content"):
        out.append({"type": "text", "text": wire["content"]})
    for call in wire.get("tool_calls") or []:
        out.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": _input(call["function"]["arguments"]),
            }
        )
    return out


def _input(arguments: str) -> Any:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {"arguments": value}


def message(answer: Answer, message_id: str) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": blocks(answer.message),
        "stop_reason": STOP_REASONS.get(answer.finish, "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": answer.prompt_tokens, "output_tokens": answer.completion_tokens},
        "tito": answer.tito,
    }


async def events(stream: AsyncIterator[Event], message_id: str) -> AsyncIterator[str]:
    """A streamed turn as Messages events (see the module docstring)."""
    opened: dict[str, int] = {}
    kept = False

    def frame(kind: str, **fields: Any) -> str:
        return sse(json.dumps({"type": kind, **fields}, ensure_ascii=False), kind)

    def start(key: str, block: dict) -> str:
        opened[key] = len(opened)
        return frame("content_block_start", index=opened[key], content_block=block)

    async for event in stream:
        if isinstance(event, Started):
            head: dict[str, object] = {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": event.model,
                "content": [],
            }
            head.update(
                stop_reason=None, stop_sequence=None, usage={"input_tokens": event.prompt_tokens, "output_tokens": 0}
            )
            head["tito"] = {"session": event.session, "stream": event.info}
            yield frame("message_start", message=head)
        elif isinstance(event, Delta):
            if event.field == "reasoning_content":
                if "thinking" not in opened:
                    yield start("thinking", {"type": "thinking", "thinking": "", "signature": ""})
                yield frame(
                    "content_block_delta",
                    index=opened["thinking"],
                    delta={"type": "thinking_delta", "thinking": event.text},
                )
            elif event.field == "content":
                if "text" not in opened:
                    yield start("text", {"type": "text", "text": ""})
                yield frame(
                    "content_block_delta", index=opened["text"], delta={"type": "text_delta", "text": event.text}
                )
            elif event.field == "call":
                yield start(
                    f"call{event.index}", {"type": "tool_use", "id": event.call_id, "name": event.name, "input": {}}
                )
            elif event.field == "arguments":
                delta = {"type": "input_json_delta", "partial_json": event.text}
                yield frame("content_block_delta", index=opened[f"call{event.index}"], delta=delta)
        elif isinstance(event, Finished):
            answer = event.answer
            for index in sorted(opened.values()):
                yield frame("content_block_stop", index=index)
            stop = {"stop_reason": STOP_REASONS.get(answer.finish, "end_turn"), "stop_sequence": None}
            yield frame(
                "message_delta", delta=stop, usage={"output_tokens": answer.completion_tokens}, tito=answer.tito
            )
            kept = True
        elif isinstance(event, Failed):
            yield frame("error", error=error_body(event.status, event.code, event.message)["error"])
            return
    if kept:  # message_stop once the turn is kept (one that is not ends with the error event above)
        yield frame("message_stop")
