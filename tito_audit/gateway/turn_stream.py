"""A turn streamed while the engine samples it, for every dialect.

:meth:`TurnStream.open` does what a turn does before the engine answers (the session's lock, the step on a copy, the
byte reservation) and waits for the engine's first piece, so that a request the gateway refuses, or an engine that
is down, is answered with its status before anything is streamed. :meth:`TurnStream.events` then gives
:class:`Started`, the answer's pieces (:class:`~tito_audit.gateway.completion_stream.Delta`) as the engine samples them
and the session's parser reads them, and :class:`Finished`; or :class:`Failed` when the engine breaks off (the session
is as it was). The turn is committed only after the consumer took :class:`Finished` and asked for more, that is once
the dialect sent the answer's last piece, and before it ends the stream: a turn that cannot be kept (a ``--store``
write that failed, a session deleted meanwhile) is a :class:`Failed` after :class:`Finished`, which the dialect
sends instead of its normal end. A client that goes away before the commit leaves the session as it was.
The session's lock is taken and released in one place (:meth:`~tito_audit.gateway.sessions.SessionStore.turn`, entered
on the turn's exit stack); :func:`open_response` closes the turn if no response takes it, and :class:`TurnResponse`
closes it however the response ends (:meth:`TurnStream.close`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from tito_audit.gateway import engine_stream
from tito_audit.gateway.completion_stream import CompletionStream, Delta
from tito_audit.gateway.errors import EngineError, GatewayError, RequestError
from tito_audit.gateway.protocol import Answer, ChatRequest, SessionName, session_headers, wire_message
from tito_audit.gateway.records import CpuTime
from tito_audit.gateway.session_lookup import Found
from tito_audit.gateway.turn_steps import checked, pending_of, record_of, with_logprobs
from tito_audit.gateway.turn_transaction import Turn

if TYPE_CHECKING:
    from tito_audit.gateway.gateway import Gateway

log = logging.getLogger("tito_audit.gateway")


@dataclass(frozen=True)
class Started:
    info: dict[str, Any]
    """``{"mode": "incremental"}``, or ``{"mode": "buffered", "why": ...}`` when the parser cannot stream."""
    model: str
    prompt_tokens: int
    session: str


@dataclass(frozen=True)
class Finished:
    answer: Answer


@dataclass(frozen=True)
class Failed:
    status: int
    code: str
    message: str


Event = Started | Delta | Finished | Failed


class TurnStream:
    """One streamed turn of one session (see the module docstring)."""

    def __init__(self, gateway: Gateway, request: ChatRequest, session_id: str) -> None:
        self.gateway = gateway
        self.request = request
        self.session_id = session_id
        self.entry: Any = None
        self.transaction: Turn | None = None
        """The turn's transaction on its session (:meth:`~tito_audit.gateway.sessions.SessionStore.turn`)."""
        self.step: Any = None
        self.completion: CompletionStream | None = None
        self.pieces: Any = None
        self.first: Any = None
        self.committed = False
        self.closed = False
        self.started = time.perf_counter()
        self.engine_seconds = 0.0
        self.found: Found | None = None
        self.cpu = CpuTime()
        """The CPU time of the turn's own work (the record's ``gateway_cpu_ms``)."""
        self._exit = contextlib.AsyncExitStack()

    @classmethod
    async def open(cls, gateway: Gateway, request: ChatRequest, header: SessionName | str | None) -> TurnStream:
        found = gateway.find(request, header)
        turn = cls(gateway, request, found.session_id)
        try:
            return await turn._opened(found)
        except GatewayError as exc:
            exc.session = turn.session_id
            raise

    async def _opened(self, found: Found) -> TurnStream:
        turn, gateway, request = self, self.gateway, self.request
        turn.found = found
        sampling = gateway.sampling(request)
        gateway.check_request(request)
        try:
            transaction = await turn._exit.enter_async_context(gateway.store.turn(turn.session_id))
            turn.transaction, turn.entry = transaction, transaction.entry
            step, sampling = await asyncio.to_thread(turn.cpu.timed, gateway.prepare, turn.entry, request, sampling)
            step.found, step.ignored = found, request.ignored
            turn.step = step
            transaction.reserve(step, sampling["max_tokens"])
            turn.completion = CompletionStream(step.trial, gateway.parser, step.tools)
            engine_request = gateway.engine_request(request, step, turn.session_id, sampling)
            deadline = engine_stream.Deadline.after(gateway.config.engine_deadline)
            turn.pieces = engine_stream.stream(gateway.engine, engine_request, deadline)
            asked = time.perf_counter()
            turn.first = await turn.pieces.__anext__()
            turn.engine_seconds += time.perf_counter() - asked
        except StopAsyncIteration:
            await turn.close()
            raise EngineError(502, "engine_empty", "the engine's stream ended before it sent anything") from None
        except BaseException:
            await turn.close()
            raise
        return turn

    async def events(self) -> AsyncIterator[Event]:
        """The turn's events (see the module docstring); the turn is committed when the consumer asks for more
        after :class:`Finished`."""
        gateway, step, completion = self.gateway, self.step, self.completion
        assert completion is not None
        yield Started(completion.info(), self.request.model or gateway.model_id, len(step.prompt), self.session_id)
        try:
            piece = self.first
            while True:
                for delta in await _fed(completion, piece.ids, self.cpu):
                    yield delta
                if piece.output is not None:
                    break
                asked = time.perf_counter()
                piece = await self.pieces.__anext__()
                self.engine_seconds += time.perf_counter() - asked
            output = piece.output
            parse = gateway.parser is not None
            ids, message = await asyncio.to_thread(self.cpu.timed, checked, step, output, parse)
            rest, got = await asyncio.to_thread(self.cpu.timed, completion.finish, wire_message(message))
            pending = with_logprobs(pending_of(ids, message, got, output.finish_reason), output)
        except GatewayError as exc:
            log.warning(
                "gateway: session %s: the stream ends with %d %s: %s", self.session_id, exc.status, exc.code, exc
            )
            yield Failed(exc.status, exc.code, str(exc))
            return
        except StopAsyncIteration:
            yield Failed(502, "engine_bad_response", "the engine's stream ended without saying how the turn finished")
            return
        for delta in rest:
            yield delta
        record = record_of(self.entry, step, pending)
        record["found"] = self.found.record() if self.found is not None else None
        record["stream"] = {**completion.info(), "diverged": completion.diverged}
        gateway.finish_record(record, self.engine_seconds, time.perf_counter() - self.started, self.cpu.seconds)
        answer = Answer(
            model=self.request.model or gateway.model_id,
            message=pending.wire,
            finish=pending.finish,
            prompt_tokens=len(step.prompt),
            completion_tokens=len(pending.ids),
            tito=record,
        )
        yield Finished(answer)
        assert self.transaction is not None
        try:  # the answer's last piece went out: the turn is committed now, or the stream ends with why not
            self.transaction.commit(step, pending)
        except RequestError as exc:
            log.warning(
                "gateway: session %s: the streamed turn was not kept: %d %s: %s",
                self.entry.id,
                exc.status,
                exc.code,
                exc,
            )
            yield Failed(exc.status, exc.code, str(exc))
            return
        self.committed = True

    async def close(self) -> None:
        """Release the session (idempotent): an uncommitted turn leaves it as it was; the engine's stream is closed,
        then the session's lock released (:meth:`~tito_audit.gateway.sessions.SessionStore.turn`), whatever fails."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.pieces is not None:
                await self.pieces.aclose()
        except Exception as exc:  # the engine's stream failed while closing: nothing of it is kept anyway
            log.debug("gateway: closing the engine's stream: %s", exc)
        finally:
            await self._exit.aclose()


SMALL_PIECE = 8
"""A piece of at most this many ids (vLLM sends one an event) is read on the event loop when the model's lock is free
(it costs less than the hop to a worker thread); a larger one, or one that would wait for the lock, in a thread."""


async def _fed(completion: CompletionStream, ids: list[int], cpu: CpuTime) -> list[Delta]:
    """The pieces of the answer ``ids`` add (:meth:`CompletionStream.feed`, its CPU time counted in ``cpu``), never
    waiting on the event loop for the model's lock (a render in another thread may hold it for seconds)."""
    lock = completion.lock
    if len(ids) <= SMALL_PIECE and lock.acquire(blocking=False):
        try:
            return cpu.timed(completion.feed, ids)
        finally:
            lock.release()
    return await asyncio.to_thread(cpu.timed, completion.feed, ids)


async def open_response(
    gateway: Gateway,
    request: ChatRequest,
    header: SessionName | str | None,
    frames: Callable[[TurnStream], AsyncIterator[str]],
) -> TurnResponse:
    """A streamed turn opened and its response (the events ``frames`` makes of it): whatever fails in between, the
    turn is closed (nothing holds its session's lock but a response that will close it)."""
    turn = await TurnStream.open(gateway, request, header)
    try:
        return TurnResponse(frames(turn), turn, session_headers(turn.session_id))
    except BaseException:
        await turn.close()
        raise


class TurnResponse(StreamingResponse):
    """Server-sent events of a streamed turn; the turn is closed however the response ends."""

    def __init__(self, frames: AsyncIterator[str], turn: TurnStream, headers: dict[str, str] | None = None) -> None:
        super().__init__(frames, media_type="text/event-stream", headers=headers)
        self.turn = turn

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.turn.close()


def sse(data: str, event: str | None = None) -> str:
    """One server-sent event."""
    return (f"event: {event}\n" if event else "") + f"data: {data}\n\n"
