"""Tool results answer calls: a tool message names (``tool_call_id``; Responses ``function_call_output.call_id``,
Messages ``tool_result.tool_use_id``) a call of the assistant turn it follows, else it is refused (400
``tool_call_not_found``) before the session is looked at, so that a result nobody asked for never enters a buffer a
trainer reads.

The request carries the whole conversation, each assistant turn with the ids of its calls as the client got them;
under ``--match strict`` the history check compares those ids with the session's own, so the calls a tool message can
answer are the session's. A harness that renames call ids (its own ids in the history and the tool results) is
served with ``--match tool-call-format``, which compares no call ids and checks none here. A tool message without
an id names nothing to check.
"""

from __future__ import annotations

from tito_audit.gateway.errors import RequestError
from tito_audit.gateway.protocol import ChatRequest


def check_tool_results(request: ChatRequest) -> None:
    """Refuse ``request`` (400) at its first tool message whose id names no call of the assistant turn before it."""
    calls: list[str] = []
    turn: str | None = None
    for index, message in enumerate(request.messages):
        if message["role"] == "assistant":
            calls = [call["id"] for call in message.get("tool_calls") or [] if isinstance(call.get("id"), str)]
            turn = request.name(index)
        elif message["role"] == "tool" and isinstance(message.get("tool_call_id"), str):
            call_id = message["tool_call_id"]
            if call_id in calls:
                continue
            before = (
                f"the calls of the assistant turn before it ({turn}) are {', '.join(map(repr, calls)) or 'none'}"
                if turn is not None
                else "no assistant turn comes before it"
            )
            raise RequestError(
                400,
                "tool_call_not_found",
                f"{request.name(index)} answers call id {call_id!r}, a call the session never issued: {before} "
                "(a harness that renames call ids: serve with --match tool-call-format)",
            )
