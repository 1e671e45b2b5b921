"""The engines' streaming modes: the sampled ids as the engine sends them, piece by piece.

- ``vllm``: ``POST /v1/completions`` with ``stream: true`` and ``return_token_ids``: server-sent events whose
  ``choices[0].token_ids`` are the ids sampled since the last event, the last one with ``finish_reason`` and
  ``stop_reason`` (the matched stop id), then ``data: [DONE]``;
- ``sglang``: ``POST /generate`` with ``stream: true``: events whose ``output_ids`` are all the ids so far (SGLang's
  default) or only the new ones (``--incremental-streaming-output``), told apart by ``meta_info.completion_tokens``
  and by whether an event's ids start with the ids already seen; the last event's ``meta_info.finish_reason`` says
  how it ended (``matched``: the stop id, put back when left out of the ids);
- the fake engine streams its turn in pieces of a few ids (:meth:`~tito_audit.gateway.fake.FakeEngine.stream`);
- any other engine answers whole, in one piece.

An engine that fails raises :class:`~tito_audit.gateway.sampling_engines.EngineError` as :meth:`generate` does:
``--engine-timeout`` bounds the wait for each event, an ``error`` event is ``engine_error``, an event that is not JSON
or has no ids where the engine puts them is ``engine_bad_response``. Every engine's stream is cut at ``max_tokens`` ids
(finish ``length``; the engine's stream is closed there) and ends at its deadline (``--engine-deadline``: 504
``engine_timeout``), however the engine paces its events.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

from tito_audit.errors import one_line
from tito_audit.gateway.errors import EngineError
from tito_audit.gateway.sampling_engines import (
    EngineOutput,
    EngineRequest,
    HttpEngine,
    _Read,
    answer_limit,
    busy,
    posted,
    sglang_body,
    vllm_body,
    with_matched_stop,
    within_max_tokens,
)


@dataclass
class EnginePiece:
    """Ids the engine sampled since its last piece; the last piece has ``output`` (all ids, how it finished)."""

    ids: list[int]
    output: EngineOutput | None = None


UNBOUNDED = 1 << 62
"""The ids a request that names no ``max_tokens`` may get (the gateway always names one)."""


@dataclass(frozen=True)
class Deadline:
    """When an engine's turn must be over (``--engine-deadline`` seconds after it was asked)."""

    seconds: float
    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(seconds, time.monotonic() + seconds)

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise EngineError(
                504, "engine_timeout", f"the engine's turn ran past --engine-deadline ({self.seconds:g} s)"
            )


async def stream(engine: Any, request: EngineRequest, deadline: Deadline) -> AsyncIterator[EnginePiece]:
    """The engine's ids for ``request`` piece by piece, at most ``max_tokens`` of them, until ``deadline`` (see the
    module docstring)."""
    max_tokens = int(request.sampling.get("max_tokens") or 0) or UNBOUNDED
    async with contextlib.aclosing(_pieces(engine, request, deadline)) as pieces:
        seen: list[int] = []
        async for piece in pieces:
            deadline.check()
            if piece.output is not None:
                output = within_max_tokens(piece.output, max_tokens)
                yield EnginePiece(output.ids[len(seen) :], output)
                return
            if len(seen) + len(piece.ids) > max_tokens:  # sampled past what was asked: cut, the stream closed
                taken = piece.ids[: max_tokens - len(seen)]
                yield EnginePiece(taken, EngineOutput(seen + taken, "length"))
                return
            seen += piece.ids
            yield piece


async def _pieces(engine: Any, request: EngineRequest, deadline: Deadline) -> AsyncGenerator[EnginePiece, None]:
    if callable(getattr(engine, "stream", None)):
        async for piece in engine.stream(request):
            yield piece
    elif isinstance(engine, HttpEngine) and engine.api in ("vllm", "sglang"):
        async for piece in _http(engine, request, deadline):
            yield piece
    else:
        output = await engine.generate(request)
        yield EnginePiece(list(output.ids), output)


async def _http(engine: HttpEngine, request: EngineRequest, deadline: Deadline) -> AsyncIterator[EnginePiece]:
    import httpx

    path, body = (vllm_body if engine.api == "vllm" else sglang_body)(request)
    body["stream"] = True
    reader = _VllmEvents() if engine.api == "vllm" else _SglangEvents()
    limit = answer_limit(int(request.sampling.get("max_tokens") or 0), request.top_logprobs)
    try:
        response = await posted(engine.client, engine.url + path, body)
        async with contextlib.aclosing(response):
            if response.status_code >= 400:
                text = (await response.aread()).decode("utf-8", "replace")
                raise EngineError(
                    502,
                    "engine_error",
                    f"the engine answered HTTP {response.status_code}: {text[:200].strip() or '(empty)'}",
                )
            async for line in _lines(response, deadline, limit):
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                piece = reader.read(_event(data, engine.api))
                if piece.ids or piece.output is not None:
                    yield piece
                if piece.output is not None:
                    return
    except httpx.PoolTimeout:
        raise busy(engine.connections) from None
    except httpx.TimeoutException:
        raise EngineError(504, "engine_timeout", f"the engine sent nothing within {engine.timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise EngineError(502, "engine_unreachable", f"the engine's stream broke off ({one_line(exc)})") from None
    ended = reader.ended(request.stop_ids)
    if ended is None:
        raise EngineError(502, "engine_bad_response", "the engine's stream ended without saying how the turn finished")
    yield ended


async def _lines(response: Any, deadline: Deadline, limit: int) -> AsyncIterator[str]:
    """The lines of the engine's stream, the deadline checked at every piece of bytes that comes (an engine that
    never ends a line is still bounded: a line longer than ``limit`` bytes is refused)."""
    pending = b""
    async for chunk in response.aiter_bytes():
        deadline.check()
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode("utf-8", "replace")
        if len(pending) > limit:
            raise EngineError(
                502, "engine_bad_response", f"an event of the engine's stream is longer than {limit} bytes"
            )
    if pending:
        yield pending.rstrip(b"\r").decode("utf-8", "replace")


def _event(data: str, api: str) -> dict[str, Any]:
    try:
        event = json.loads(data)
    except ValueError:
        raise EngineError(502, "engine_bad_response", "an event of the engine's stream is not JSON") from None
    except RecursionError:
        raise EngineError(502, "engine_bad_response", "an event of the engine's stream is nested too deeply") from None
    if isinstance(event, dict) and event.get("error"):
        error = event["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise EngineError(502, "engine_error", f"the engine's stream failed: {' '.join(str(message).split())[:200]}")
    if not isinstance(event, dict):
        raise EngineError(502, "engine_bad_response", f"an event of the engine's stream is not what {api} sends")
    return event


def _ids(value: Any, where: str) -> list[int]:
    if not isinstance(value, list):
        raise EngineError(
            502, "engine_bad_response", f"the engine's stream has no token ids where it puts them ({where})"
        )
    return value


class _VllmEvents:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.finish: _Read | None = None

    def read(self, event: dict[str, Any]) -> EnginePiece:
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return EnginePiece([])  # a usage event
        choice = choices[0]
        new = _ids(choice.get("token_ids"), "choices[0].token_ids")
        self.ids += new
        if choice.get("finish_reason") is not None:
            self.finish = _Read(list(self.ids), str(choice["finish_reason"]), choice.get("stop_reason"))
        return EnginePiece(new)

    def ended(self, stop_ids: list[int]) -> EnginePiece | None:
        if self.finish is None:
            return None
        output = with_matched_stop(self.finish, stop_ids)
        return EnginePiece(output.ids[len(self.ids) :], output)


class _SglangEvents:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.cumulative: bool | None = None
        self.finish: _Read | None = None

    def read(self, event: dict[str, Any]) -> EnginePiece:
        got = _ids(event.get("output_ids"), "output_ids")
        meta_info = event.get("meta_info")
        meta = meta_info if isinstance(meta_info, dict) else {}
        reason = meta.get("finish_reason")
        if self.cumulative is None and self.ids:
            counted = meta.get("completion_tokens")
            starts = got[: len(self.ids)] == self.ids
            self.cumulative = starts and (not isinstance(counted, int) or len(got) >= counted - (reason is not None))
        new = got[len(self.ids) :] if self.cumulative else got
        self.ids += new
        if reason is not None:
            kind = reason.get("type", "stop") if isinstance(reason, dict) else str(reason)
            matched = reason.get("matched") if isinstance(reason, dict) else None
            self.finish = _Read(list(self.ids), "length" if kind == "length" else "stop", matched)
        return EnginePiece(new)

    def ended(self, stop_ids: list[int]) -> EnginePiece | None:
        if self.finish is None:
            return None
        output = with_matched_stop(self.finish, stop_ids)
        return EnginePiece(output.ids[len(self.ids) :], output)
