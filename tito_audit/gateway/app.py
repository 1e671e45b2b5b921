"""The gateway's HTTP layer (Starlette): routes (one per API of :data:`~.dialects.DIALECTS`, at the path it declares,
then the sessions' own), the bearer token, the request size limit, errors as JSON with one line of message (in the
route's API's shape: :meth:`~.dialects.interface.Dialect.error_body`), and streamed turns as server-sent events
(:mod:`.turn_stream`, each dialect's events in :mod:`.dialects`)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tito_audit.gateway.dialects import DIALECTS, Dialect
from tito_audit.gateway.encoding import json_stream
from tito_audit.gateway.errors import GatewayError, RequestError
from tito_audit.gateway.gateway import Gateway
from tito_audit.gateway.protocol import SessionName, error_body, requested_session
from tito_audit.gateway.resends import body_digest
from tito_audit.gateway.session_lookup import header_name
from tito_audit.session.inputs import MAX_DEPTH, too_deep

log = logging.getLogger("tito_audit.gateway")

Handler = Callable[[Request], Awaitable[Response]]
ErrorShape = Callable[[int, str, str], dict[str, Any]]
"""How a route writes an error's JSON body (OpenAI's shape, or its API's own): status, code, message."""


def create_app(gateway: Gateway) -> Starlette:
    """The ASGI application serving ``gateway``."""
    config = gateway.config

    def authorized(request: Request) -> bool:
        if not config.api_key:
            return True
        given = request.headers.get("authorization", "")
        key = request.headers.get("x-api-key", "")  # Anthropic's clients send the key in x-api-key
        return hmac.compare_digest(given.encode(), f"Bearer {config.api_key}".encode()) or hmac.compare_digest(
            key.encode(), config.api_key.encode()
        )

    async def guarded(request: Request, handler: Handler, shape: ErrorShape = error_body) -> Response:
        def failure(status: int, code: str, message: str, session: str | None = None) -> JSONResponse:
            refused(request, status, code, message, session or request.path_params.get("session_id"))
            gateway.resends.refused(getattr(request.state, "body_digest", None), status, code, message)
            return JSONResponse(shape(status, code, message), status_code=status)

        if not authorized(request):
            return failure(401, "unauthorized", "a valid bearer token is required (Authorization: Bearer TOKEN)")
        try:
            return await handler(request)
        except GatewayError as exc:
            return failure(exc.status, exc.code, str(exc), exc.session)
        except ClientDisconnect:
            return failure(400, "client_disconnected", "the client went away before the request was read")
        except Exception as exc:  # the server stays up; the client gets one line
            log.exception("gateway: unexpected error")
            return failure(500, "internal_error", f"internal error: {type(exc).__name__}: {exc}"[:300])

    async def read_json(request: Request) -> Any:
        limit = config.max_request_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise RequestError(413, "request_too_large", f"the request body is larger than {limit} bytes")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise RequestError(413, "request_too_large", f"the request body is larger than {limit} bytes")
        request.state.body_digest = body_digest(bytes(body))  # what tells a resent request (:mod:`.resends`)
        try:
            decoded = json.loads(body)
            deep = too_deep(decoded)
        except ValueError as exc:
            raise RequestError(400, "invalid_json", f"the request body is not valid JSON ({exc})") from None
        except RecursionError:  # nested past what the decoder reads
            deep = True
        if deep:  # refused before anything that recurses (copies, comparisons, renders) meets it
            raise RequestError(400, "nested_too_deeply", f"the request body is nested deeper than {MAX_DEPTH} levels")
        return decoded

    def served(dialect: Dialect) -> Route:
        """The route of one API the gateway speaks: the body read, then the dialect's answer."""

        async def handler(request: Request) -> Response:
            return await dialect.handle(await read_json(request), header_id(request))

        return route(dialect.path, handler, ["POST"], dialect.error_body)

    records = asyncio.Semaphore(1)

    async def get_session(request: Request) -> Response:
        """The record (a record of tens of MB, and its check's render of the whole conversation, must not stall the
        event loop): the session's state taken now (a 404 before anything is sent), the record built and checked in
        a worker thread, one at a time, and sent as it is encoded, piece by piece between other requests
        (:mod:`.encoding`)."""
        build = gateway.record_builder(request.path_params["session_id"])
        async with records:
            record = await asyncio.to_thread(build)
        return StreamingResponse(json_stream(record), media_type="application/json")

    async def list_sessions(request: Request) -> Response:
        """A page of the sessions (``?after=N&limit=M``): what a trainer collects rollouts it never named from."""
        after = _query_int(request, "after", 0, 0)
        limit = _query_int(request, "limit", 100, 1, 1000)
        async with records:
            page = await asyncio.to_thread(gateway.listing, after, limit)
        return JSONResponse(page)

    async def delete_session(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        if not gateway.store.delete(session_id):
            raise gateway.store.missing(session_id)
        await asyncio.to_thread(gateway.give_back)  # the memory is back when DELETE answers
        return JSONResponse({"deleted": session_id})

    async def health(request: Request) -> Response:
        return JSONResponse(gateway.health())

    def route(path: str, handler: Handler, methods: list[str], shape: ErrorShape = error_body) -> Route:
        async def endpoint(request: Request) -> Response:
            return await guarded(request, handler, shape)

        return Route(path, endpoint, methods=methods)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sweeper = asyncio.create_task(_sweep(gateway))
        try:
            yield
        finally:
            sweeper.cancel()
            await gateway.engine.close()
            gateway.close_store()

    return Starlette(
        routes=[
            *(served(dialect(gateway)) for dialect in DIALECTS),
            route("/sessions", list_sessions, ["GET"]),
            route("/sessions/{session_id}", get_session, ["GET"]),
            route("/sessions/{session_id}", delete_session, ["DELETE"]),
            Route("/healthz", health, methods=["GET"]),
        ],
        lifespan=lifespan,
        exception_handlers={HTTPException: unrouted},
    )


async def unrouted(request: Request, exc: Exception) -> Response:
    """A path or method the gateway does not serve: the HTTP status, logged in one line like every refusal."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    code = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
    message = f"{request.method} {request.url.path} is not served here"
    refused(request, status, code, message, None)
    return JSONResponse(error_body(status, code, message), status_code=status)


def refused(request: Request, status: int, code: str, message: str, session: str | None) -> None:
    """Log a refusal (every 4xx and 5xx) in one line: status, code, session, the request and the message."""
    log.warning(
        "gateway: %s %s %s: %d %s (session %s): %s",
        request.method,
        request.url.path,
        request.headers.get("user-agent", "-")[:60],
        status,
        code,
        session or "-",
        " ".join(message.split())[:400],
    )


def _query_int(request: Request, name: str, default: int, least: int, most: int | None = None) -> int:
    """A whole-number query parameter, or a 400 naming it."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < least or (most is not None and int(raw) > most):
        bound = f"from {least} to {most}" if most is not None else f"of at least {least}"
        raise RequestError(400, "invalid_request", f"{name} must be a whole number {bound}, not {raw!r}")
    return int(raw)


def header_id(request: Request) -> SessionName | None:
    """The session the request's headers name: ``X-Session-Id``
    (:func:`~tito_audit.gateway.protocol.requested_session`), else a harness's own session header
    (:func:`~tito_audit.gateway.session_lookup.header_name`)."""
    headers = dict(request.scope["headers"])
    named = requested_session(headers.get(b"x-session-id"), headers.get(b"x-session-id*"))
    if named is not None:
        return named, "the X-Session-Id header"
    return header_name(headers)


async def _sweep(gateway: Gateway) -> None:
    """Drop idle sessions even when no request comes, and give back the memory of the sessions that ended (expired,
    evicted) since the last sweep: memory stays bounded while agents are gone."""
    period = max(1.0, min(gateway.store.idle_seconds / 2, 30.0))
    while True:
        await asyncio.sleep(period)
        gateway.store.get("")  # expires the idle ones
        try:
            await asyncio.to_thread(gateway.give_back)
        except Exception as exc:  # the sweeper goes on; the memory is given back at the next sweep
            log.warning("gateway: giving back the memory of ended sessions failed: %s", " ".join(str(exc).split()))
