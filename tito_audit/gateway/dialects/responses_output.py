"""The Responses API's answer: the response object and its output items, and a streamed turn as Responses events
(see :mod:`.responses` for the mapping)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from tito_audit.gateway.completion_stream import Delta
from tito_audit.gateway.protocol import Answer
from tito_audit.gateway.turn_stream import Event, Failed, Finished, Started, sse


class Shape:
    """The Responses objects of one answer."""

    def __init__(
        self, response_id: str, body: dict[str, Any], previous: str | None, namespaces: dict[str, str] | None = None
    ) -> None:
        self.id = response_id
        self.body = body
        self.previous = previous
        self.namespaces = namespaces or {}
        """The namespace of each function offered from a ``namespace`` tool: its calls go back with it."""
        self.created = int(time.time())

    def call_item(self, item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
        """A ``function_call`` item, with the ``namespace`` of a function offered from a namespace tool (the client
        looks the function up in it)."""
        return call_item(item_id, call_id, name, arguments, status, self.namespaces.get(name))

    def items(self, message: dict) -> list[dict]:
        items: list[dict] = []
        if message.get("reasoning_content"):
            items.append(reasoning_item(f"rs_{uuid.uuid4().hex}", message["reasoning_content"], "completed"))
        if message.get("content"):
            items.append(message_item(f"msg_{uuid.uuid4().hex}", message["content"], "completed"))
        for call in message.get("tool_calls") or []:
            function = call["function"]
            items.append(
                self.call_item(
                    f"fc_{uuid.uuid4().hex}", call["id"], function["name"], function["arguments"], "completed"
                )
            )
        return items

    def response(self, answer: Answer | None, output: list[dict], status: str | None = None, model: str = "") -> dict:
        body = self.body
        finish = answer.finish if answer is not None else None
        if status is None:
            status = "incomplete" if finish == "length" else "completed"
        out: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": answer.model if answer is not None else model,
            "output": output,
            "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
            "previous_response_id": self.previous,
            "temperature": body.get("temperature"),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p"),
            "truncation": "disabled",
            "usage": None,
            "metadata": body.get("metadata") or {},
        }
        if answer is not None:
            out["usage"] = {
                "input_tokens": answer.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": answer.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": answer.prompt_tokens + answer.completion_tokens,
            }
            out["tito"] = answer.tito
        return out


def reasoning_item(item_id: str, text: str, status: str) -> dict:
    content = [{"type": "reasoning_text", "text": text}] if status == "completed" else []
    return {"id": item_id, "type": "reasoning", "summary": [], "content": content, "status": status}


def message_item(item_id: str, text: str, status: str) -> dict:
    content = (
        [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if status == "completed" else []
    )
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str, namespace: str | None = None) -> dict:
    item = {"id": item_id, "type": "function_call", "call_id": call_id, "name": name}
    if namespace is not None:
        item["namespace"] = namespace
    return {**item, "arguments": arguments, "status": status}


async def events(stream: AsyncIterator[Event], shape: Shape) -> AsyncIterator[Any]:
    """A streamed turn as Responses events (see :mod:`.responses`); the :class:`Answer` itself after the last. The
    items are done once the turn ends; ``response.completed`` (``response.incomplete``) waits until the turn is kept,
    and a turn that is not gets ``error`` and ``response.failed`` instead."""
    sequence = 0
    opened: dict[str, int] = {}
    items: list[dict] = []
    texts: list[str] = []

    def frame(kind: str, **fields: Any) -> str:
        nonlocal sequence
        sequence += 1
        return sse(json.dumps({"type": kind, "sequence_number": sequence - 1, **fields}, ensure_ascii=False), kind)

    def open_item(key: str, item: dict) -> list[str]:
        opened[key] = len(items)
        items.append(item)
        texts.append("")
        out = [frame("response.output_item.added", output_index=opened[key], item=item)]
        if item["type"] in ("reasoning", "message"):
            part = {"type": "reasoning_text", "text": ""} if item["type"] == "reasoning" else _text_part("")
            out.append(
                frame(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=opened[key],
                    content_index=0,
                    part=part,
                )
            )
        return out

    model = ""
    finished: tuple[Answer, dict] | None = None
    async for event in stream:
        if isinstance(event, Started):
            model = event.model
            created = shape.response(None, [], "in_progress", model)
            created["tito"] = {"session": event.session, "stream": event.info}
            yield frame("response.created", response=created)
            yield frame("response.in_progress", response=created)
        elif isinstance(event, Delta):
            for line in _delta(event, shape, opened, items, texts, open_item, frame):
                yield line
        elif isinstance(event, Finished):
            answer = event.answer
            for index, item in enumerate(items):
                for line in _close(item, texts[index], index, frame):
                    yield line
            finished = (answer, shape.response(answer, items))
        elif isinstance(event, Failed):
            yield frame("error", code=event.code, message=event.message, param=None)
            failed = shape.response(None, items, "failed", model)
            failed["error"] = {"code": event.code, "message": event.message}
            yield frame("response.failed", response=failed)
            return
    if finished is not None:  # the turn is kept
        answer, final = finished
        yield frame("response.incomplete" if final["status"] == "incomplete" else "response.completed", response=final)
        yield answer


def _text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _delta(delta: Delta, shape: Shape, opened: dict, items: list, texts: list, open_item: Any, frame: Any) -> list[str]:
    out: list[str] = []
    if delta.field == "reasoning_content":
        if "reasoning" not in opened:
            out += open_item("reasoning", reasoning_item(f"rs_{uuid.uuid4().hex}", "", "in_progress"))
        event = "response.reasoning_text.delta"
        out.append(_grown(event, opened["reasoning"], items, texts, frame, content_index=0, delta=delta.text))
    elif delta.field == "content":
        if "message" not in opened:
            out += open_item("message", message_item(f"msg_{uuid.uuid4().hex}", "", "in_progress"))
        event = "response.output_text.delta"
        out.append(
            _grown(event, opened["message"], items, texts, frame, content_index=0, delta=delta.text, logprobs=[])
        )
    elif delta.field == "call":
        out += open_item(
            f"call{delta.index}",
            shape.call_item(f"fc_{uuid.uuid4().hex}", delta.call_id or "", delta.name or "", "", "in_progress"),
        )
    elif delta.field == "arguments":
        event = "response.function_call_arguments.delta"
        out.append(_grown(event, opened[f"call{delta.index}"], items, texts, frame, delta=delta.text))
    return out


def _grown(event: str, index: int, items: list, texts: list, frame: Any, **fields: Any) -> str:
    """The event carrying a streamed piece (``fields["delta"]``) of output item ``index``, whose text grows by it."""
    texts[index] += fields["delta"]
    return frame(event, item_id=items[index]["id"], output_index=index, **fields)


def _close(item: dict, text: str, index: int, frame: Any) -> list[str]:
    kind, item_id = item["type"], item["id"]
    if kind == "function_call":
        item.update(arguments=text, status="completed")
        return [
            frame("response.function_call_arguments.done", item_id=item_id, output_index=index, arguments=text),
            frame("response.output_item.done", output_index=index, item=item),
        ]
    if kind == "reasoning":
        item.update(reasoning_item(item_id, text, "completed"))
        part = {"type": "reasoning_text", "text": text}
        done = frame("response.reasoning_text.done", item_id=item_id, output_index=index, content_index=0, text=text)
    else:
        item.update(message_item(item_id, text, "completed"))
        part = _text_part(text)
        done = frame(
            "response.output_text.done", item_id=item_id, output_index=index, content_index=0, text=text, logprobs=[]
        )
    return [
        done,
        frame("response.content_part.done", item_id=item_id, output_index=index, content_index=0, part=part),
        frame("response.output_item.done", output_index=index, item=item),
    ]
