"""OpenAI's Responses API (``POST /v1/responses``) on the same sessions and buffers as chat completions.

Input items become the messages a chat request would carry: ``instructions`` a system message first; a ``message``
item (roles ``user``, ``system``, ``developer``, ``assistant``; a string or ``input_text``/``output_text`` parts) a
message; the assistant-side items that follow each other (``reasoning``, an assistant ``message``, ``function_call``)
one assistant turn (``reasoning_content``, ``content``, ``tool_calls`` with ``call_id`` as the call's id and
``arguments`` parsed); a ``function_call_output`` a tool message answering ``call_id``. The answer goes back the
other way: a ``reasoning`` item (``reasoning_text`` content), a ``message`` item (``output_text``), one
``function_call`` item per call (``call_id`` the call's id); ``status`` ``incomplete`` with ``max_output_tokens`` when
the turn was cut. The session is ``X-Session-Id``, else the session of ``previous_response_id``, else ``user``, else a
new one; with ``previous_response_id`` the input holds only what follows that response, and the history is that
response's chain (its inputs and answers, not its instructions, as OpenAI's API does). Streamed, the events are
``response.created``, ``response.in_progress``, for each item ``response.output_item.added``, its deltas
(``response.reasoning_text.delta``, ``response.output_text.delta``, ``response.function_call_arguments.delta``), then
at the end the ``.done`` events, ``response.output_item.done`` and, once the turn is kept, ``response.completed``
(``response.incomplete``); an engine that breaks off, or a turn that cannot be kept, sends ``error`` and
``response.failed`` instead. A ``previous_response_id`` the gateway does not know, or whose session ended, is 400
``previous_response_not_found``, as OpenAI's API answers a response id it does not have.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response

from tito_audit.gateway.dialects.interface import Dialect
from tito_audit.gateway.dialects.responses_output import Shape, events
from tito_audit.gateway.errors import RequestError
from tito_audit.gateway.protocol import (
    Answer,
    ChatRequest,
    SessionName,
    joined_text,
    not_acted_on,
    read_request,
    session_headers,
    take_message,
)
from tito_audit.gateway.turn_stream import TurnStream, open_response

if TYPE_CHECKING:
    from tito_audit.gateway.gateway import Gateway

REMEMBERED = 65536
"""Response ids whose session the gateway still knows (older ones, and those of a session that ended: 400
``previous_response_not_found``, as OpenAI's API answers a response id it does not have)."""
ASSISTANT_SIDE = ("reasoning", "function_call")
RESPONSES_FIELDS = frozenset(
    {"model", "input", "instructions", "tools", "tool_choice", "stream", "previous_response_id", "user"}
    | {"prompt_cache_key", "max_output_tokens", "temperature", "top_p", "top_k", "seed"}
)
"""The Responses request's fields the gateway acts on; any other (``parallel_tool_calls``, ``reasoning``, ``include``,
``store``, ``client_metadata``, ...) is accepted and listed in the session's record as not acted on."""


class Responses(Dialect):
    """``POST /v1/responses`` for one gateway: the response ids it answered, by session."""

    path = "/v1/responses"

    def __init__(self, gateway: Gateway) -> None:
        super().__init__(gateway)
        self.owners: OrderedDict[str, str] = OrderedDict()

    async def handle(self, body: Any, header: SessionName | None) -> Response:
        if not isinstance(body, dict):
            raise RequestError(400, "invalid_request", "the request body must be a JSON object")
        previous = body.get("previous_response_id")
        if previous is not None and not isinstance(previous, str):
            raise RequestError(400, "invalid_request", "previous_response_id: a response id (resp_...)")
        owner = self.owners.get(previous) if previous else None
        if previous and owner is None:
            raise RequestError(
                400, "previous_response_not_found", f"previous_response_id: no response {previous!r} is known here"
            )
        if previous and header and owner != header[0]:
            raise RequestError(
                400, "invalid_request", f"previous_response_id: {previous!r} is a response of another session"
            )
        named = header or ((owner, "previous_response_id") if owner is not None else None)
        inputs, names = items_to_messages(body.get("input"))
        history = self._chain(owner, previous) if previous else []
        earlier = [f"previous_response_id {previous}: message {i}" for i in range(len(history))]
        request = chat_request(body, history + inputs, earlier + names)
        response_id = f"resp_{uuid.uuid4().hex}"
        shape = Shape(response_id, body, previous, offered_tools(body.get("tools"))[1])
        if body.get("stream"):
            return await open_response(
                self.gateway, request, named, lambda turn: self._frames(turn, shape, previous, inputs)
            )
        answer = await self.gateway.turn(request, named)
        self._remember(answer.tito["session"], response_id, previous, inputs, answer.message)
        return JSONResponse(
            shape.response(answer, shape.items(answer.message)), headers=session_headers(answer.tito["session"])
        )

    async def _frames(
        self, turn: TurnStream, shape: Shape, previous: str | None, inputs: list[dict]
    ) -> AsyncIterator[str]:
        finished: Answer | None = None
        async for frame in events(turn.events(), shape):
            if isinstance(frame, Answer):
                finished = frame
                continue
            yield frame
        if finished is not None and turn.committed:
            self._remember(turn.session_id, shape.id, previous, inputs, finished.message, turn.entry)

    def _chain(self, session_id: str | None, previous: str) -> list[dict]:
        entry = self.gateway.store.get(session_id or "")
        if entry is None or entry.session is None:
            why = self.gateway.store.why_gone(session_id or "")
            raise RequestError(
                400,
                "previous_response_not_found",
                f"previous_response_id: {previous!r} was answered in session {session_id!r}, which is gone: {why}",
            )
        chain = entry.dialect.get("responses", {})
        out: list[list[dict]] = []
        current: str | None = previous
        while current is not None:
            if current not in chain:
                raise RequestError(400, "previous_response_not_found", f"previous_response_id: {previous!r} is gone")
            current, inputs, answer = chain[current]
            out.append([*inputs, answer])
        return [message for part in reversed(out) for message in part]

    def _remember(
        self,
        session_id: str,
        response_id: str,
        previous: str | None,
        inputs: list[dict],
        wire: dict,
        turned: Any = None,
    ) -> None:
        """The response ``response_id`` in its session's chain; ``turned``: the session the turn was kept in (a
        session deleted since, or a newer one under its id, is not given it)."""
        entry = self.gateway.store.get(session_id)
        if entry is None or (turned is not None and entry is not turned):
            return
        try:
            answer = take_message(wire, "the answer")
        except RequestError:  # a streamed call cut before its arguments were whole: as the client got it
            answer = {k: v for k, v in wire.items() if v is not None}
        entry.dialect.setdefault("responses", {})[response_id] = (previous, inputs, answer)
        self.owners[response_id] = session_id
        while len(self.owners) > REMEMBERED:
            self.owners.popitem(last=False)


def items_to_messages(value: Any) -> tuple[list[dict], list[str]]:
    """The ``input`` (a string or a list of items) as messages in the form the template renders, and the item each
    comes from (``input[2]``)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}], ["input"]
    if not isinstance(value, list) or not value:
        raise RequestError(400, "invalid_request", "input: a string or a non-empty list of items")
    messages: list[dict] = []
    turn: dict | None = None
    for index, item in enumerate(value):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise RequestError(400, "invalid_request", f"{where}: an item must be an object")
        kind = item.get("type") or ("message" if "role" in item else None)
        assistant_side = kind in ASSISTANT_SIDE or (kind == "message" and item.get("role") == "assistant")
        if assistant_side and turn is None:
            turn = {"role": "assistant", "content": "", "_where": where}
            messages.append(turn)
        if kind == "message":
            if item.get("role") == "assistant":
                assert turn is not None
                turn["content"] += _text(item.get("content"), f"{where}.content")
            else:
                turn = None
                messages.append(
                    {
                        "role": item.get("role"),
                        "content": _text(item.get("content"), f"{where}.content"),
                        "_where": where,
                    }
                )
        elif kind == "reasoning":
            assert turn is not None
            parts = item.get("content") or item.get("summary") or []
            turn["reasoning_content"] = turn.get("reasoning_content", "") + _text(parts, f"{where}.content")
        elif kind == "function_call":
            assert turn is not None
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
                raise RequestError(400, "invalid_request", f"{where}: a function_call needs call_id and name")
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"},
            }
            turn.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            turn = None
            if not isinstance(item.get("call_id"), str):
                raise RequestError(400, "invalid_request", f"{where}.call_id: the id of the call this output answers")
            output = item.get("output")
            content = output if isinstance(output, str) else _text(output, f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": content, "_where": where})
        else:
            raise RequestError(
                400,
                "invalid_request",
                f"{where}.type: {kind!r} is not supported (message, reasoning, function_call, function_call_output)",
            )
    taken = [take_message({k: v for k, v in m.items() if k != "_where"}, m["_where"]) for m in messages]
    return taken, [m["_where"] for m in messages]


def _text(value: Any, where: str) -> str:
    return joined_text(value, where, text_type=None, null=False)


def chat_request(body: dict[str, Any], messages: list[dict], names: list[str] | None = None) -> ChatRequest:
    """The chat request the Responses request ``body`` makes with ``messages`` (its input, after its history;
    ``names``: what the client calls each)."""
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise RequestError(400, "invalid_request", "instructions: a string")
    names = list(names or [])
    if instructions:
        messages = [{"role": "system", "content": instructions}, *messages]
        names = ["instructions", *names] if names else names
    chat: dict[str, Any] = {"messages": messages, "user": body.get("user")}
    for key in ("temperature", "top_p", "top_k", "seed"):
        if body.get(key) is not None:
            chat[key] = body[key]
    limit = body.get("max_output_tokens")
    if limit is not None:
        if type(limit) is not int or limit < 1:
            raise RequestError(400, "invalid_request", "max_output_tokens must be a positive integer")
        chat["max_tokens"] = limit
    functions, _, skipped = offered_tools(body.get("tools"))
    if functions:
        chat["tools"] = functions
    choice = body.get("tool_choice", "auto")
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise RequestError(400, "invalid_request", "tool_choice: auto, none, required or {type: function, name}")
        choice = {"type": "function", "function": {"name": choice["name"]}}
    chat["tool_choice"] = choice
    ignored = not_acted_on(body, RESPONSES_FIELDS) + skipped
    return read_request(chat, names, body_name(body), ignored)


def body_name(body: dict[str, Any]) -> tuple[str, str] | None:
    """The session a Responses body names: ``user``, else ``prompt_cache_key`` (Codex sends its session's id there)."""
    for field in ("user", "prompt_cache_key"):
        value = body.get(field)
        if isinstance(value, str) and value:
            return value, field
    return None


def offered_tools(tools: Any) -> tuple[list[dict], dict[str, str], list[str]]:
    """The functions a Responses ``tools`` list offers the model, in chat's form: each ``function`` tool, and each
    function of a ``namespace`` tool (as the engine offers any function; its calls are answered with their
    ``namespace``); the namespace of each such function; and the tools that are not the model's to call (hosted tools
    the client asks the server to run, such as ``web_search``: no engine runs them), listed as not acted on."""
    if not tools:
        return [], {}, []
    if not isinstance(tools, list):
        raise RequestError(400, "invalid_request", "tools: a list of tools")
    functions: list[dict] = []
    namespaces: dict[str, str] = {}
    skipped: list[str] = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "namespace":
            space = tool.get("name")
            inner = tool.get("tools")
            if not isinstance(space, str) or not isinstance(inner, list):
                raise RequestError(400, "invalid_request", f"{where}: a namespace tool has a name and a list of tools")
            for number, function in enumerate(inner):
                made = _tool(function, f"{where}.tools[{number}]")
                namespaces[made["function"]["name"]] = space
                functions.append(made)
        elif kind == "function":
            functions.append(_tool(tool, where))
        elif isinstance(kind, str):
            skipped.append(f"{where} ({kind}: a tool the server runs, not offered to the model)")
        else:
            raise RequestError(400, "invalid_request", f"{where}.type: a tool needs a type (function, namespace)")
    seen: dict[str, int] = {}
    for number, function in enumerate(functions):
        name = function["function"]["name"]
        if name in seen:
            raise RequestError(
                400, "invalid_request", f"tools: the function {name!r} is offered twice (in a namespace and beside it)"
            )
        seen[name] = number
    return functions, namespaces, skipped


def _tool(tool: Any, where: str) -> dict:
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
        raise RequestError(
            400, "invalid_request", f"{where}: only function tools ({{type: function, name, parameters}})"
        )
    function: dict[str, Any] = {"name": tool["name"]}  # in the order chat clients send them: the template dumps them
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}
