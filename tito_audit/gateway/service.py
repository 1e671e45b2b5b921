"""The gateway without its web layer: settings, the model and parser chosen once, and what each endpoint does."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit.errors import BadInputError
from tito_audit.gateway.engines import ENGINE_APIS, EngineRequest, make_engine
from tito_audit.gateway.fake import FakeEngine
from tito_audit.gateway.protocol import Answer, RequestError, read_request
from tito_audit.gateway.store import SessionStore
from tito_audit.gateway.turns import break_record, prepare, settle, turn_record
from tito_audit.parse import sglang
from tito_audit.parse.choice import choose_parser
from tito_audit.parse.parser import CompletionParser
from tito_audit.session import TitoSession
from tito_audit.session.machinery import Machinery, ModelSourceSettings, machinery_for
from tito_audit.session.policies import BRIDGES, POLICIES

MAX_SESSION_ID = 256
log = logging.getLogger("tito_audit.gateway")


@dataclass
class GatewayConfig:
    """What ``tito-audit serve`` takes (see its ``--help``)."""

    model: str
    engine: str = "fake"
    engine_api: str = "vllm"
    parser: str | CompletionParser = "auto"
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    session_idle: float = 900.0
    max_sessions: int = 1024
    on_break: str = "warn"
    bridge: str = "template"
    engine_timeout: float = 300.0
    max_request_bytes: int = 8 * 1024 * 1024
    seed: int = 0
    engine_model: str | None = None
    """The model name the engine serves (vLLM checks it); default: the model's id."""
    max_tokens: int = 2048
    """``max_tokens`` sent when a request names none (vLLM's completions default to 16, SGLang's to 128)."""
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    stop_tokens: Sequence[str] = ()
    mirrors: Sequence[str | Path] = ()
    cache_dir: str | Path | None = None
    revision: str | None = None
    allow_hub: bool = True
    trust_remote_code: bool = False
    template: str | Path | None = None
    template_name: str | None = None


class Gateway:
    """One model, one engine, one parser, many sessions."""

    def __init__(self, config: GatewayConfig, machinery: Machinery | None = None, engine: Any = None) -> None:
        if config.on_break not in POLICIES:
            raise BadInputError(f"--on-break must be one of {', '.join(POLICIES)}, not {config.on_break!r}")
        if config.bridge not in BRIDGES:
            raise BadInputError(f"--bridge must be one of {', '.join(BRIDGES)}, not {config.bridge!r}")
        if config.engine != "fake" and not config.engine.startswith(("http://", "https://")):
            raise BadInputError(f"--engine must be an http(s):// URL or 'fake', not {config.engine!r}")
        if config.engine_api not in ENGINE_APIS:
            raise BadInputError(f"--engine-api must be one of {', '.join(ENGINE_APIS)}, not {config.engine_api!r}")
        self.config = config
        if machinery is None:
            source = ModelSourceSettings.of(
                config.mirrors,
                config.cache_dir,
                config.revision,
                config.allow_hub,
                config.trust_remote_code,
                config.template,
                config.template_name,
            )
            machinery = machinery_for(config.model, source, config.template_kwargs, tuple(config.stop_tokens))
        self.machinery = machinery
        self.model_id = machinery.loaded.resolved.model_id
        fake = config.engine == "fake"
        self.parser, self.parser_name = self._parser(config.parser, fake)
        try:
            self.store = SessionStore(config.max_sessions, config.session_idle)
            self.engine = engine or make_engine(
                config.engine,
                config.engine_api,
                config.engine_timeout,
                FakeEngine(machinery, seed=config.seed, clock=_now()) if fake else None,
            )
        except ValueError as exc:
            raise BadInputError(str(exc)) from None
        self.stop_ids = sorted(machinery.stop_ids)

    def _parser(self, value: str | CompletionParser, fake: bool) -> tuple[CompletionParser | None, str]:
        if not isinstance(value, str):
            return value, str(getattr(value, "name", type(value).__name__))
        choice = choose_parser(value, self.model_id, self.machinery.loaded.tokenizer)
        if choice.parser is not None:
            return choice.parser, choice.name
        if fake:
            return None, "template (the fake engine's own message)"
        why = "SGLang's parsers are not installed" if choice.notes else choice.why
        raise BadInputError(
            f"--parser {value}: a real engine needs a parser for its completions and there is none here ({why}); "
            f"install SGLang's parsers ({sglang.INSTALL}) or name another: --parser hf"
        )

    def make_session(self, tools: list[dict] | None) -> TitoSession:
        return TitoSession(
            self.machinery,
            tools=tools,
            on_break=self.config.on_break,  # type: ignore[arg-type]
            parser=self.parser,
            bridge=self.config.bridge,  # type: ignore[arg-type]
        )

    async def chat(self, body: Any, header_id: str | None) -> Answer:
        """``POST /v1/chat/completions``: one turn of one session."""
        started = time.perf_counter()
        request = read_request(body)
        session_id = header_id or request.user or f"s-{uuid.uuid4().hex}"
        if len(session_id) > MAX_SESSION_ID or "/" in session_id or not session_id.isprintable():
            raise RequestError(
                400,
                "invalid_request",
                f"the session id (X-Session-Id or user) must be printable, without '/', at most {MAX_SESSION_ID} "
                "characters",
            )
        entry = self.store.open(session_id)
        async with entry.lock:
            opening = entry.session is None
            try:
                step = await asyncio.to_thread(prepare, entry, request, self.make_session)
                engine_request = EngineRequest(
                    prompt_ids=step.prompt,
                    sampling={"max_tokens": self.config.max_tokens, **request.sampling},
                    stop_ids=self.stop_ids,
                    model=self.config.engine_model or self.model_id,
                    messages=step.trial.messages,
                    tools=entry.tools,
                    tool_choice=request.tool_choice,
                    session_id=session_id,
                    turn=len(step.trial.turns),
                )
                asked = time.perf_counter()
                output = await self.engine.generate(engine_request)
                engine_seconds = time.perf_counter() - asked
                record, pending = await asyncio.to_thread(settle, entry, step, output, self.parser is not None)
            except BaseException:
                if opening and entry.session is None:
                    self.store.discard(entry)
                raise
        total = time.perf_counter() - started
        for details in record["breaks"]:
            log.warning(
                "session %s: TITO break at step %s [%s]: %s",
                session_id,
                details["step"],
                ", ".join(details["causes"]),
                details["handled"],
            )
        record.update(
            parser=self.parser_name,
            on_break=self.config.on_break,
            bridge=self.config.bridge,
            engine=self.engine.name,
            engine_ms=round(engine_seconds * 1000, 3),
            gateway_ms=round((total - engine_seconds) * 1000, 3),
        )
        return Answer(
            model=request.model or self.model_id,
            message=pending.wire,
            finish=pending.finish,
            prompt_tokens=len(step.prompt),
            completion_tokens=len(pending.ids),
            tito=record,
        )

    def record(self, session_id: str) -> dict[str, Any]:
        """``GET /sessions/{id}``: the buffer and loss mask with the last answer appended (as ``finish`` would
        append it; the session itself stays open), each turn's spans, the breaks."""
        entry = self.store.get(session_id)
        if entry is None or entry.session is None:
            raise RequestError(404, "unknown_session", f"no session {session_id!r} (never opened, expired or deleted)")
        view = entry.session.fork()  # a committed session is never changed again: no lock needed
        pending = entry.pending
        if pending is not None:
            view.finish(pending.ids, pending.message)
        return {
            "session": session_id,
            "model": self.model_id,
            "parser": self.parser_name,
            "on_break": self.config.on_break,
            "bridge": self.config.bridge,
            "requests": entry.requests,
            "buffer": view.buffer,
            "loss_mask": view.loss_mask,
            "turns": [turn_record(t) for t in view.turns],
            "breaks": [break_record(b) for b in view.breaks],
            "messages": view.messages,
        }

    def health(self) -> dict[str, Any]:
        store = self.store
        return {
            "status": "ok",
            "model": self.model_id,
            "engine": self.engine.name,
            "parser": self.parser_name,
            "sessions": len(store),
            "max_sessions": store.max_sessions,
            "expired": store.expired,
            "evicted": store.evicted,
        }


def _now() -> Any:
    from datetime import datetime

    return datetime.now().replace(microsecond=0)
