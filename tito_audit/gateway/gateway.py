"""The gateway without its web layer: settings, the model and parser chosen once, and what each endpoint does."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tito_audit.errors import BadInputError
from tito_audit.gateway.answer_logprobs import Wanted, openai_logprobs, wanted
from tito_audit.gateway.branches import Rewrites, snapshot
from tito_audit.gateway.config import GatewayConfig
from tito_audit.gateway.errors import EngineError, GatewayError, RequestError
from tito_audit.gateway.fake import FakeEngine
from tito_audit.gateway.llamacpp import PREFIX as LLAMACPP
from tito_audit.gateway.llamacpp import make_llamacpp
from tito_audit.gateway.memory_budget import (
    TOKEN_BYTES,
    TRIM_FROM,
    return_free_memory,
)
from tito_audit.gateway.plain import TEXT_PARSER, TextParser
from tito_audit.gateway.prompt_bounds import PromptBounds
from tito_audit.gateway.protocol import Answer, ChatRequest, SessionName, read_request
from tito_audit.gateway.records import CpuTime, RecordSource, listing
from tito_audit.gateway.resends import Resends
from tito_audit.gateway.sampling_engines import ENGINE_APIS, EngineRequest, make_engine, within_max_tokens
from tito_audit.gateway.session_entry import GatewaySession
from tito_audit.gateway.session_lookup import Finder, Found
from tito_audit.gateway.sessions import SessionStore
from tito_audit.gateway.sqlite_journal import SqliteJournal, open_store, store_identity
from tito_audit.gateway.standin.engine import check_engine_option, standin_engine
from tito_audit.gateway.tool_results import check_tool_results
from tito_audit.gateway.turn_steps import Step, prepare, settle
from tito_audit.model.context_window import context_of
from tito_audit.model.render import RenderLimits
from tito_audit.parse import sglang
from tito_audit.parse.choice import choose_parser
from tito_audit.parse.parser import CompletionParser
from tito_audit.session import TitoSession
from tito_audit.session.machinery import Machinery, ModelSourceSettings, machinery_for
from tito_audit.session.policies import BRIDGES, POLICIES
from tito_audit.session.proof import proof_for

if TYPE_CHECKING:
    from tito_audit.gateway.sampling_engines import SamplingEngine

log = logging.getLogger("tito_audit.gateway")


class Gateway:
    """One model, one engine, one parser, many sessions. ``machinery`` (tests, a process that shares one) is used as
    built, render limits included; otherwise it is built from ``config``."""

    def __init__(
        self, config: GatewayConfig, machinery: Machinery | None = None, engine: SamplingEngine | None = None
    ) -> None:
        if config.on_break not in POLICIES:
            raise BadInputError(f"--on-break must be one of {', '.join(POLICIES)}, not {config.on_break!r}")
        if config.bridge not in BRIDGES:
            raise BadInputError(f"--bridge must be one of {', '.join(BRIDGES)}, not {config.bridge!r}")
        check_engine_option(config.engine)
        if config.engine_api not in ENGINE_APIS:
            raise BadInputError(f"--engine-api must be one of {', '.join(ENGINE_APIS)}, not {config.engine_api!r}")
        try:
            self.rewrites = Rewrites(config.rewrites, config.match)
        except ValueError as exc:
            raise BadInputError(str(exc)) from None
        if config.store is not None and self.rewrites.branch:
            raise BadInputError(
                "--store keeps sessions that only append (--on-rewrite refuse): a session's branches "
                "(--on-rewrite branch) are kept in memory only"
            )
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
            limits = RenderLimits(config.max_render_chars, config.max_render_seconds, False, config.max_render_bytes)
            machinery = machinery_for(config.model, source, config.template_kwargs, tuple(config.stop_tokens), limits)
        self.machinery = machinery
        self.model_id = machinery.loaded.resolved.model_id
        fake = config.engine == "fake"
        self.parser, self.parser_name = self._parser(config.parser, fake)
        self.context = context_of(machinery.loaded, config.max_model_len)
        if config.max_tokens > self.context.tokens:
            raise BadInputError(f"--max-tokens {config.max_tokens} is past {self._context_said()}")
        if config.engine_deadline <= 0:
            raise BadInputError("--engine-deadline must be a positive number of seconds")
        self.bounds = PromptBounds(self.context, machinery, config.engine_api)
        self.resends = Resends()
        """Who watches for a refused request sent again unchanged (the harness matrix's runner)."""
        self._trim_lock = threading.Lock()
        self._ended_bytes = 0
        """Bytes of ended sessions given back to the allocator since the last trim (see :meth:`give_back`)."""
        try:
            self.store = SessionStore(
                config.max_sessions, config.session_idle, config.max_session_bytes, config.max_total_bytes
            )
            if engine is None and config.engine.startswith(LLAMACPP):
                engine = make_llamacpp(config.engine, machinery.codec, config.seed, config.engine_timeout)
            engine = engine or standin_engine(config, machinery, config.engine_model or self.model_id)
            self.engine = engine or make_engine(
                config.engine,
                config.engine_api,
                config.engine_timeout,
                FakeEngine(machinery, seed=config.seed, clock=_now()) if fake else None,
                connections=config.max_sessions,
            )
        except ValueError as exc:
            raise BadInputError(str(exc)) from None
        self.stop_ids = sorted(machinery.stop_ids)
        self.finder = Finder(self.store, self.rewrites.key)
        self.durable: SqliteJournal | None = None
        if config.store is not None:
            identity = store_identity(machinery, config.template_kwargs)
            self.durable = open_store(config.store, identity, self.store, self.make_session, TOKEN_BYTES)

    def _parser(self, value: str | CompletionParser, fake: bool) -> tuple[CompletionParser | None, str]:
        if not isinstance(value, str):
            return value, str(getattr(value, "name", type(value).__name__))
        if value == TEXT_PARSER:
            return TextParser(), f"{TEXT_PARSER} (the completion's text is the content)"
        loaded = self.machinery.loaded
        choice = choose_parser(value, self.model_id, loaded.tokenizer, loaded.resolved.path)
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

    async def chat(self, body: Any, header: SessionName | str | None) -> Answer:
        """``POST /v1/chat/completions``: one turn of one session."""
        request = read_request(body)
        return await self.turn(request, header, wanted(body))

    def find(self, request: ChatRequest, header: SessionName | str | None) -> Found:
        """The request's session (:class:`~tito_audit.gateway.session_lookup.Finder`)."""
        return self.finder.find(request, header)

    def session_id(self, request: ChatRequest, header: SessionName | str | None) -> str:
        return self.finder.find(request, header).session_id

    def sampling(self, request: ChatRequest) -> dict[str, Any]:
        """What the engine is asked for (``max_tokens`` checked against the model's context)."""
        sampling = {"max_tokens": self.config.max_tokens, **request.sampling}
        max_tokens = sampling["max_tokens"]
        if max_tokens > self.context.tokens and request.dialect != "messages":  # Messages: said with the prompt's size
            raise RequestError(400, "invalid_request", f"max_tokens {max_tokens} is past {self._context_said()}")
        return sampling

    def check_request(self, request: ChatRequest) -> None:
        """What is refused before the session is even looked at: a tool result that answers no call (under
        ``--match strict``, where call ids are compared)."""
        if self.rewrites.match == "strict":
            check_tool_results(request)

    def prepare(
        self, entry: GatewaySession, request: ChatRequest, sampling: dict[str, Any]
    ) -> tuple[Step, dict[str, Any]]:
        """The step ``request`` asks of ``entry`` (:func:`~tito_audit.gateway.turn_steps.prepare`) and what the engine
        is asked for: ``sampling`` with its ``max_tokens`` lowered where the engine lowers it
        (:mod:`~tito_audit.gateway.prompt_bounds`), a new dict. Refused when the prompt and ``max_tokens`` pass the
        model's context as the engine counts it: first from the request's text alone (nothing rendered), then from the
        prepared prompt. Run in a worker thread."""
        max_tokens = sampling["max_tokens"]
        self.bounds.check_text(request, max_tokens)
        step = prepare(entry, request, self.make_session, self.rewrites)
        lowered = self.bounds.check_prompt(step.trial, len(step.prompt), max_tokens, request.dialect)
        return step, {**sampling, "max_tokens": lowered}

    async def generate(self, engine_request: EngineRequest) -> Any:
        """The engine's answer to ``engine_request``, cut at its ``max_tokens``, within ``--engine-deadline``."""
        deadline = self.config.engine_deadline
        try:
            output = await asyncio.wait_for(self.engine.generate(engine_request), deadline)
        except asyncio.TimeoutError:
            raise EngineError(
                504, "engine_timeout", f"the engine's turn ran past --engine-deadline ({deadline:g} s)"
            ) from None
        return within_max_tokens(output, engine_request.sampling["max_tokens"])

    def engine_request(
        self, request: ChatRequest, step: Step, session_id: str, sampling: dict, top_logprobs: int = 0
    ) -> EngineRequest:
        return EngineRequest(
            prompt_ids=step.prompt,
            sampling=sampling,
            stop_ids=self.stop_ids,
            model=self.config.engine_model or self.model_id,
            messages=list(step.trial.shared_messages()),  # read by the fake engine only; not copied
            tools=step.tools,
            tool_choice=request.tool_choice,
            session_id=session_id,
            turn=len(step.trial.turns),
            top_logprobs=top_logprobs,
        )

    async def turn(self, request: ChatRequest, header: SessionName | str | None, want: Wanted | None = None) -> Answer:
        """One turn of one session, answered whole (with the log-probabilities ``want`` asks for)."""
        want = want or Wanted()
        cpu = CpuTime()
        started = time.perf_counter()
        found = self.find(request, header)
        try:
            return await self._turn(request, found, want, cpu, started)
        except GatewayError as exc:
            exc.session = found.session_id  # the log line names it
            raise

    async def _turn(self, request: ChatRequest, found: Found, want: Wanted, cpu: CpuTime, started: float) -> Answer:
        session_id = found.session_id
        sampling = self.sampling(request)
        self.check_request(request)
        async with self.store.turn(session_id) as turn:  # one transaction: on any exit without a commit, as it was
            step, sampling = await asyncio.to_thread(cpu.timed, self.prepare, turn.entry, request, sampling)
            step.found = found
            step.ignored = request.ignored
            turn.reserve(step, sampling["max_tokens"])
            engine_request = self.engine_request(request, step, session_id, sampling, want.top)
            asked = time.perf_counter()
            output = await self.generate(engine_request)
            engine_seconds = time.perf_counter() - asked
            if want.answer and output.logprobs is None:
                raise EngineError(
                    502, "engine_bad_response", "the engine answered no logprobs (the request asked for them)"
                )
            record, pending = await asyncio.to_thread(cpu.timed, settle, turn, step, output, self.parser is not None)
        logprobs = None
        if want.answer:
            codec, values = self.machinery.codec, pending.logprobs or []
            logprobs = await asyncio.to_thread(
                openai_logprobs, codec, step.prompt, pending.ids, values, pending.top_logprobs, want.top
            )
        record["found"] = found.record()
        self.finish_record(record, engine_seconds, time.perf_counter() - started, cpu.seconds)
        return Answer(
            model=request.model or self.model_id,
            message=pending.wire,
            finish=pending.finish,
            prompt_tokens=len(step.prompt),
            completion_tokens=len(pending.ids),
            tito=record,
            logprobs=logprobs,
        )

    def finish_record(
        self, record: dict[str, Any], engine_seconds: float, total: float, cpu_seconds: float | None = None
    ) -> None:
        """The turn's ``tito`` record completed with the server's settings and times (``gateway_cpu_ms``: the CPU
        time of the turn's own work in worker threads, what the gateway computed whatever else ran on the host); its
        breaks logged."""
        for details in record["breaks"]:
            log.warning(
                "session %s: TITO break at step %s [%s]: %s",
                record["session"],
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
        if cpu_seconds is not None:
            record["gateway_cpu_ms"] = round(cpu_seconds * 1000, 3)

    def record(self, session_id: str) -> dict[str, Any]:
        """``GET /sessions/{id}``: the buffer and loss mask with the last answer appended (as ``finish`` would
        append it; the session itself stays open), each turn's spans, the breaks, and the full check of the steps
        bridged without rendering the history (``check``, :func:`~tito_audit.gateway.turn_steps.finished_view`)."""
        return self.record_builder(session_id)()

    def record_builder(self, session_id: str) -> Callable[[], dict[str, Any]]:
        """What :meth:`record` answers, as a function to call in a worker thread (:mod:`.records`): the session's
        state is taken now, on the event loop (a 404 before anything is built), the record is built when called."""
        entry = self.store.get(session_id)
        if entry is None or entry.session is None:
            raise self.store.missing(session_id)
        header = {
            "session": session_id,
            "model": self.model_id,
            "parser": self.parser_name,
            "on_break": self.config.on_break,
            "bridge": self.config.bridge,
            "on_rewrite": self.rewrites.on_rewrite,
            "requests": entry.requests,
            "found": list(entry.lookups),
            "not_acted_on": dict(entry.ignored),
        }
        tree = snapshot(entry.tree) if self.rewrites.branch and entry.tree is not None else None
        return RecordSource(header, entry.session, entry.pending, tree, entry.sampled, dict(entry.lost)).record

    def listing(self, after: int, limit: int) -> dict[str, Any]:
        """``GET /sessions`` (:func:`~tito_audit.gateway.records.listing`)."""
        return listing(self.store, after, limit)

    def prove(self) -> str:
        """Make the proof of which steps the sessions may bridge without rendering the history now (it is otherwise
        made at the first such step, on a request's time); one line saying what it covers (``serve`` prints it after
        ``bridge BRIDGE:``)."""
        if self.config.bridge != "auto":
            return "every step as that bridge makes it (nothing to prove)"
        return proof_for(self.machinery, with_tools=True).describe()

    def give_back(self) -> int:
        """Give back the memory of the sessions that ended since the last call (in a worker thread: forgetting takes
        the model's lock): what the model's caches keep for them is dropped (and the journal forgets them), and once
        sessions of :data:`~tito_audit.gateway.memory_budget.TRIM_FROM` bytes have ended, the allocator returns its free
        memory to the system. Returns the bytes (estimated) of the sessions given back."""
        released = 0
        for entry in self.store.take_ended():
            if entry.session is not None:
                entry.session.forget()
                released += entry.size
            for session in entry.tree.sessions() if entry.tree is not None else []:
                session.forget()
            self.store.journal.delete(entry)
            if not entry.busy:  # a request under way (deleted meanwhile) still reads it; once over, it is unreferenced
                entry.session, entry.pending, entry.history, entry.sent = None, None, [], None
                entry.tree, entry.dialect = None, {}
        with self._trim_lock:
            self._ended_bytes += released
            if self._ended_bytes < TRIM_FROM:
                return released
            self._ended_bytes = 0
        return_free_memory()
        return released

    def _context_said(self) -> str:
        return f"the model's context of {self.context.tokens} tokens ({self.context.source})"

    def health(self) -> dict[str, Any]:
        store = self.store
        return {
            "status": "ok",
            "model": self.model_id,
            "engine": self.engine.name,
            "parser": self.parser_name,
            "sessions": len(store),
            "max_sessions": store.max_sessions,
            "session_bytes": store.total_bytes,
            "max_session_bytes": store.max_session_bytes,
            "max_total_bytes": store.max_total_bytes,
            "expired": store.expired,
            "evicted": store.evicted,
            "store": str(self.durable.path) if self.durable is not None else "memory",
        }

    def close_store(self) -> None:
        """Close the ``--store`` file (the server stops); the sessions stay in it."""
        if self.durable is not None:
            self.durable.close()


def _now() -> Any:
    from datetime import datetime

    return datetime.now().replace(microsecond=0)
