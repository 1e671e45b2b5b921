"""``tito-audit serve MODEL --engine URL|standin|fake``: the TITO gateway (see README, "Gateway")."""

from __future__ import annotations

import errno
import re
import socket
import warnings
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from tito_audit.cli.app import app
from tito_audit.cli.options import (
    KwargOpt,
    MaxCharsOpt,
    MaxRenderBytesOpt,
    MaxSecondsOpt,
    ModelArg,
    ModelSource,
    StopTokenOpt,
    parse_kwargs,
    with_option_groups,
)
from tito_audit.cli.outcomes import err
from tito_audit.errors import AuditError, BadInputError
from tito_audit.model.render_guard import RenderLimits

INSTALL = "pip install -e '.[gateway]' -c constraints.txt"

EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        metavar="ENGINE",
        help="The engine's base URL (http://HOST:PORT), llamacpp:PATH (a GGUF sampled on CPU in a process of its own: "
        "the llamacpp extra), standin[:SEED] (an engine on 127.0.0.1 that writes as the model family does, vLLM- or "
        "SGLang-shaped as --engine-api says; no GPU) or 'fake' (built in, no GPU).",
    ),
]
EngineApiOpt = Annotated[
    str,
    typer.Option(
        "--engine-api",
        metavar="API",
        help="vllm (/v1/completions with token ids) or sglang (/generate with input_ids).",
    ),
]
ParserOpt = Annotated[
    str,
    typer.Option(
        "--parser",
        metavar="PARSER",
        help="auto, sglang, vllm, hf, TOOL[,REASONING], vllm:TOOL[,REASONING], text (the completion is the content: "
        "models without tool calls or "
        "reasoning, as Gemma 3) or template (the fake engine's own message; --engine fake only).",
    ),
]
HostOpt = Annotated[
    str, typer.Option("--host", metavar="HOST", help="Address to bind (loopback unless you say otherwise).")
]
PortOpt = Annotated[int, typer.Option("--port", metavar="PORT", min=0, max=65535, help="Port to listen on.")]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key", metavar="KEY", envvar="TITO_GATEWAY_API_KEY", help="Require 'Authorization: Bearer TOKEN'."
    ),
]
IdleOpt = Annotated[
    float,
    typer.Option("--session-idle", metavar="SECONDS", min=1, help="Seconds after which an idle session is dropped."),
]
MaxSessionsOpt = Annotated[
    int,
    typer.Option(
        "--max-sessions",
        min=1,
        help="Most sessions kept at once; also the most requests sent to an HTTP engine at once (a session has one "
        "under way at most: the engine connection pool holds as many).",
    ),
]
OnBreakOpt = Annotated[
    str, typer.Option("--on-break", metavar="POLICY", help="raise, warn or rerender (see TitoSession).")
]
BridgeOpt = Annotated[
    str,
    typer.Option(
        "--bridge",
        metavar="BRIDGE",
        help="auto (tool steps the template's proof covers bridged from a short local render, the whole conversation "
        "checked when a session's record is read), template (checked every step) or history-free.",
    ),
]
TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--engine-timeout",
        metavar="SECONDS",
        min=0.1,
        help="Seconds to wait for the engine (streamed: for each event).",
    ),
]
DeadlineOpt = Annotated[
    float,
    typer.Option(
        "--engine-deadline",
        metavar="SECONDS",
        min=1,
        help="Seconds an engine's whole turn may take, streamed or not (504 past it, the turn not kept).",
    ),
]
MaxBytesOpt = Annotated[
    int, typer.Option("--max-request-bytes", metavar="BYTES", min=1024, help="Largest request body accepted.")
]
EngineModelOpt = Annotated[
    str | None,
    typer.Option("--engine-model", metavar="NAME", help="The model name the engine serves (default: MODEL's id)."),
]
MaxTokensOpt = Annotated[
    int, typer.Option("--max-tokens", min=1, help="max_tokens for requests that name none (engines default low).")
]
FakeSeedOpt = Annotated[
    int,
    typer.Option("--seed", help="Seed of the fake and stand-in engines (and of llamacpp's turns that name no seed)."),
]
SessionBytesOpt = Annotated[
    str,
    typer.Option(
        "--max-session-bytes",
        metavar="SIZE",
        help="Most memory one session may hold, estimated (413 past it): 256MiB, 1GiB, bytes.",
    ),
]
TotalBytesOpt = Annotated[
    str,
    typer.Option(
        "--max-total-bytes", metavar="SIZE", help="Most memory all sessions together may hold, estimated (507 past it)."
    ),
]
StoreOpt = Annotated[
    Path | None,
    typer.Option(
        "--store",
        metavar="FILE",
        help="Keep sessions in this SQLite file (WAL; each turn on disk before its answer): a restarted server "
        "continues them. Default: memory only, lost when the server stops. One file per server process.",
    ),
]
OnRewriteOpt = Annotated[
    str | None,
    typer.Option(
        "--on-rewrite",
        metavar="MODE",
        help="branch (a request that rewrites history, a side request, a compaction: a new branch of the session, "
        "kept as a training sample) or refuse (400). Default: branch; refuse with --store.",
        show_default=False,
    ),
]
MaxModelLenOpt = Annotated[
    int | None,
    typer.Option(
        "--max-model-len",
        metavar="TOKENS",
        min=1,
        help="The context the engine serves the model with (its --max-model-len). Default: the model's config.json.",
        show_default=False,
    ),
]
MatchOpt = Annotated[
    str,
    typer.Option(
        "--match", metavar="MATCHER", help="What counts as the same message: strict, tool-call-format or role-content."
    ),
]
UNITS = {"": 1, "b": 1} | {f"{p}{s}": 1 << (10 * (i + 1)) for i, p in enumerate("kmg") for s in ("", "b", "ib")}
SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def size_in_bytes(value: str, option: str) -> int:
    """``256MiB``, ``8GiB``, ``1.5G`` or a number of bytes (K, M, G are powers of 1024, as KiB, MiB, GiB)."""
    match = SIZE.fullmatch(value)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in UNITS or float(match.group(1)) * UNITS[unit] < 1 << 20:
        raise BadInputError(f"{option} expects a size of at least 1MiB like 256MiB or 8GiB, not {value!r}")
    return int(float(match.group(1)) * UNITS[unit])


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` as uvicorn would bind it (address reuse on, IPv6 for an address with
    a colon); a port in use, a port the user may not bind or a host that is not an address of this machine is bad
    input naming the option (exit 2, before anything else is said)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.set_inheritable(True)
        return sock
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            why = f"--port {port}: {host}:{port} is already in use (another server listens there); give another --port"
        elif exc.errno == errno.EACCES:
            why = f"--port {port}: permission denied (ports below 1024 need privileges); give another --port"
        else:
            why = f"--host {host}: cannot listen there ({exc.strerror or exc}); give an address of this machine"
        raise BadInputError(why) from None


@app.command("serve")
@with_option_groups
def serve_command(
    model: ModelArg,
    source: ModelSource,
    engine: EngineOpt = "fake",
    engine_api: EngineApiOpt = "vllm",
    parser: ParserOpt = "auto",
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    api_key: ApiKeyOpt = None,
    session_idle: IdleOpt = 900.0,
    max_sessions: MaxSessionsOpt = 1024,
    on_break: OnBreakOpt = "warn",
    bridge: BridgeOpt = "auto",
    engine_timeout: TimeoutOpt = 300.0,
    engine_deadline: DeadlineOpt = 1800.0,
    max_request_bytes: MaxBytesOpt = 8 * 1024 * 1024,
    engine_model: EngineModelOpt = None,
    max_tokens: MaxTokensOpt = 2048,
    max_render_chars: MaxCharsOpt = RenderLimits.max_chars,
    max_render_seconds: MaxSecondsOpt = RenderLimits.max_seconds,
    max_render_bytes: MaxRenderBytesOpt = RenderLimits.max_bytes,
    max_session_bytes: SessionBytesOpt = "256MiB",
    max_total_bytes: TotalBytesOpt = "8GiB",
    seed: FakeSeedOpt = 0,
    store: StoreOpt = None,
    on_rewrite: OnRewriteOpt = None,
    match: MatchOpt = "strict",
    max_model_len: MaxModelLenOpt = None,
    kwarg: KwargOpt = [],  # noqa: B006
    stop_token: StopTokenOpt = [],  # noqa: B006
) -> None:
    """Serve MODEL as an OpenAI-compatible chat endpoint that keeps each session's sampled tokens (exit 2 if it cannot
    start).

    Sessions live in this process's memory unless --store names a file: without it they are lost when the server
    stops (GET /sessions/ID first); with it a restarted server continues every stored session.

    Bounds: --max-sessions, --max-session-bytes, --max-total-bytes, --max-render-chars, --max-render-seconds,
    --max-render-bytes.

    Endpoints: POST /v1/chat/completions (OpenAI chat), POST /v1/responses (OpenAI Responses), POST /v1/messages
    (Anthropic Messages); GET /sessions (a page of sessions, each with its trainable summary), GET /sessions/ID (the
    session's ids, loss mask, log-probabilities, turns, breaks, branches), DELETE /sessions/ID; GET /healthz.

    Statuses: 400 a bad request (or, under --on-rewrite refuse, a history that differs from the session's), 401 no or
    a wrong --api-key, 404 an unknown or ended session (or path), 405 a method a path does not serve, 413 a request,
    render or session too large, 422 a break under --on-break raise or a render the template refused, 502 the engine
    failed or answered badly, 503 every session busy, 504 the engine did not answer within --engine-timeout, 507
    --max-total-bytes reached or --store could not write (each code and when: docs/gateway.md)."""
    try:
        import httpx  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise AuditError(f"serve needs the gateway extra ({exc.name} is missing): {INSTALL}") from None
    from tito_audit.gateway.gateway import Gateway, GatewayConfig
    from tito_audit.gateway.server import serve
    from tito_audit.session import TitoBreakWarning

    # a break is answered in the response and logged in one line by the gateway; not a multi-line warning per step
    warnings.filterwarnings("ignore", category=TitoBreakWarning)

    config = GatewayConfig(
        model=model,
        engine=engine,
        engine_api=engine_api,
        parser=parser,
        host=host,
        port=port,
        api_key=api_key or None,
        session_idle=session_idle,
        max_sessions=max_sessions,
        on_break=on_break,
        bridge=bridge,
        engine_timeout=engine_timeout,
        engine_deadline=engine_deadline,
        max_request_bytes=max_request_bytes,
        seed=seed,
        engine_model=engine_model,
        max_tokens=max_tokens,
        max_render_chars=max_render_chars,
        max_render_seconds=max_render_seconds,
        max_render_bytes=max_render_bytes,
        max_session_bytes=size_in_bytes(max_session_bytes, "--max-session-bytes"),
        max_total_bytes=size_in_bytes(max_total_bytes, "--max-total-bytes"),
        template_kwargs=parse_kwargs(kwarg),
        stop_tokens=tuple(stop_token),
        mirrors=tuple(source.mirror),
        cache_dir=source.cache_dir,
        revision=source.revision,
        allow_hub=not source.no_hub,
        trust_remote_code=source.trust_remote_code,
        template=source.template,
        template_name=source.template_name,
        store=store,
        on_rewrite=on_rewrite,
        match=match,
        max_model_len=max_model_len,
    )
    sock = bind(host, port)  # before the model loads and before any banner: a busy port is one error line
    try:
        gateway = Gateway(config)
    except AuditError as exc:  # its text may hold brackets (pip extras) that the console would read as markup
        sock.close()
        raise type(exc)(escape(str(exc))) from None
    except BaseException:
        sock.close()
        raise
    port = sock.getsockname()[1]  # --port 0: the port the system chose
    if host not in ("127.0.0.1", "localhost", "::1") and not api_key:
        err.print(f"warning: serving on {host} without --api-key: anyone who reaches it can use it", highlight=False)
    err.print(
        f"tito-audit gateway: {gateway.model_id} on http://{host}:{port}/v1 (engine {gateway.engine.name}, "
        f"parser {gateway.parser_name}, on_break {on_break}, bridge {bridge}, on_rewrite {config.rewrites}, "
        f"match {match}, context {gateway.context.tokens} ({gateway.context.source}); "
        + (f"sessions in {store}, {len(gateway.store)} restored)" if store is not None else "sessions in memory only)"),
        highlight=False,
        soft_wrap=True,
    )
    # the proof is made before the first request, not on its time
    try:
        proved = gateway.prove()
    except BaseException:
        sock.close()
        raise
    err.print(f"bridge {bridge}: {proved}", highlight=False, soft_wrap=True)
    serve(gateway, sock)
