"""OpenAI's chat completions (``POST /v1/chat/completions``): answered whole (the gateway's own turn,
:meth:`~tito_audit.gateway.gateway.Gateway.chat`), or streamed as the engine samples in the OpenAI chunk format
(``chat.completion.chunk``).

Streamed, the first chunk carries the role and, in ``tito.stream``, whether the answer streams as it is sampled
(``incremental``) or once the engine has finished (``buffered``, with why: a parser that reads whole completions).
Then reasoning (``reasoning_content``), content and tool calls (the first piece of a call with its ``id``, ``type``
and ``name``, then pieces of its ``arguments``) as they come; the last chunk has the finish reason and the whole
``tito`` record; with ``stream_options.include_usage`` a usage chunk follows; then, once the turn is kept, ``data:
[DONE]``. An engine that breaks off mid-stream, or a turn that cannot be kept (``store_failed``, ``unknown_session``),
ends the stream with ``data: {"error": {...}}`` instead (the OpenAI clients raise it), and the session is as it was.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse

from tito_audit.gateway.completion_stream import Delta
from tito_audit.gateway.dialects.interface import Dialect
from tito_audit.gateway.protocol import error_body, read_request, session_headers
from tito_audit.gateway.turn_stream import Event, Failed, Finished, Started, open_response, sse

if TYPE_CHECKING:
    from starlette.responses import Response

    from tito_audit.gateway.protocol import SessionName


class ChatCompletions(Dialect):
    """``POST /v1/chat/completions`` (see the module docstring)."""

    path = "/v1/chat/completions"

    async def handle(self, body: Any, header: SessionName | None) -> Response:
        if isinstance(body, dict) and body.get("stream"):  # relayed as the engine samples
            asked = read_request(body)
            return await open_response(
                self.gateway, asked, header, lambda turn: chunks(turn.events(), asked.include_usage)
            )
        answer = await self.gateway.chat(body, header)
        return JSONResponse(answer.response(), headers=session_headers(answer.tito["session"]))


async def chunks(events: AsyncIterator[Event], include_usage: bool) -> AsyncIterator[str]:
    """The events of a streamed turn as chat-completion chunks (see the module docstring)."""
    head: dict[str, Any] = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk"}
    head["created"] = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return sse(json.dumps({**head, "choices": [choice], **more}, ensure_ascii=False))

    async for event in events:
        if isinstance(event, Started):
            head["model"] = event.model
            yield chunk({"role": "assistant", "content": ""}, tito={"session": event.session, "stream": event.info})
        elif isinstance(event, Delta):
            yield chunk(_delta(event))
        elif isinstance(event, Finished):
            answer = event.answer
            yield chunk({}, answer.finish, tito=answer.tito)
            if include_usage:
                yield sse(json.dumps({**head, "choices": [], "usage": answer.usage()}))
        elif isinstance(event, Failed):
            yield sse(json.dumps(error_body(event.status, event.code, event.message)))
            return
    yield "data: [DONE]\n\n"


def _delta(delta: Delta) -> dict[str, Any]:
    if delta.field == "call":
        function = {"name": delta.name, "arguments": ""}
        return {"tool_calls": [{"index": delta.index, "id": delta.call_id, "type": "function", "function": function}]}
    if delta.field == "arguments":
        return {"tool_calls": [{"index": delta.index, "function": {"arguments": delta.text}}]}
    return {delta.field: delta.text}
