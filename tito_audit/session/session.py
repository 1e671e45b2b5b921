"""The guard inside the training loop: one token buffer that only grows, checked at every step.

A trainer opens a session per rollout, takes the first prompt from :meth:`TitoSession.start`, and after each
generation calls :meth:`TitoSession.extend` with the ids the engine returned, the message its parser made of
them and the messages to append (tool results, a user turn). The session appends the sampled ids untouched,
renders the next prompt ``R`` with the model's own template, and appends the bridge (``R`` after the buffer)
only when the buffer's text is a prefix of ``R`` and its canonical tokens are a prefix of ``ids(R)``: the same
decision the audit makes (:func:`tito_audit.audit.core.join.join`). When the template cannot be followed, the policy
chosen at creation decides (see :data:`POLICIES`). With ``bridge="auto"`` (the default, of
:data:`~tito_audit.session.policies.BRIDGES`) the steps bridged from a short local render are checked later
(:mod:`tito_audit.session.deferred`).

Example (a generic loop; ``engine`` and ``run_tools`` are yours; the session parses with the model's SGLang
parsers, ``parser="sglang"``, or takes the message your own parser made: ``extend(ids, message, tool_messages)``)::

    session = TitoSession.from_model("Qwen/Qwen3-4B", tools=tools, parser="sglang")
    prompt_ids = session.start(messages)
    while True:
        completion_ids = engine.generate(prompt_ids)
        assistant = session.parse(completion_ids)
        if not assistant.get("tool_calls"):
            session.finish(completion_ids)
            break
        prompt_ids = session.extend(completion_ids, run_tools(assistant))
    train_on(session.buffer, session.loss_mask)
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from tito_audit.conversations.conversation import Message, clone_data
from tito_audit.model.load_folder import LoadedModel
from tito_audit.model.tokens import TokenCodec
from tito_audit.session.breaks import SessionBreak, TitoBreakWarning
from tito_audit.session.buffer_logprobs import Logprobs, sampled_logprobs
from tito_audit.session.deferred import DeferredChecks, FullCheck
from tito_audit.session.inputs import as_assistant_message, check_text, checked_messages, message_copy
from tito_audit.session.machinery import Machinery, ModelSourceSettings, build_machinery, machinery_for
from tito_audit.session.parsing import ParserArgument, SessionParser, parsed_for, split_extend_arguments
from tito_audit.session.policies import Bridge, OnBreak, SessionOptions
from tito_audit.session.proof import BridgeProof
from tito_audit.session.restoring import Restorer
from tito_audit.session.settings import SessionSettings, Setting
from tito_audit.session.shared_list import INTS, AppendOnly, as_list
from tito_audit.session.state import SessionState
from tito_audit.session.steps import BufferSteps
from tito_audit.session.turn_records import SessionTurn


class TitoSession:
    """An append-only token buffer for one rollout, checked against the model's template: at every step, or, for the
    steps bridged from a short local render, at the next render of the whole conversation (``finish`` at the latest).
    It owns its state, its settings and the parts that work on them (:mod:`~tito_audit.session.settings`)."""

    on_break = Setting[OnBreak]()
    bridge = Setting[Bridge]()
    check_every = Setting[int]()
    """``bridge="auto"``: render the whole conversation after this many steps bridged without it (0: only where a
    step needs it and at :meth:`finish`); see :mod:`tito_audit.session.deferred`."""
    clock = Setting[datetime]()
    """The date the template sees through ``strftime_now``, frozen for the whole session."""

    def __init__(
        self,
        machinery: Machinery,
        *,
        tools: list[dict] | None = None,
        on_break: OnBreak = "raise",
        clock: datetime | None = None,
        parser: ParserArgument = None,
        bridge: Bridge = "auto",
        check_every: int = 0,
    ) -> None:
        self._own(SessionSettings.made(machinery, tools, on_break, bridge, check_every, clock))
        self._parser = SessionParser.of(parser, machinery, self._settings.tools)
        self._state = SessionState()  # everything a step changes: replaced only by restore()

    def _own(self, settings: SessionSettings, checks: DeferredChecks | None = None) -> None:
        """Take ``settings`` and the parts that read them (a fork's: the checks' record carried from ``checks``)."""
        self._settings = settings
        self._steps = BufferSteps(settings)
        self._checks = checks.copy_for(settings, self._steps) if checks else DeferredChecks(settings, self._steps)
        self._restorer = Restorer(settings)

    # -- creation -----------------------------------------------------------------------------------------------
    @classmethod
    def from_model(
        cls,
        model: str,
        *,
        tools: list[dict] | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        on_break: OnBreak = "raise",
        mirrors: Sequence[str | Path] = (),
        cache_dir: str | Path | None = None,
        revision: str | None = None,
        allow_hub: bool = True,
        trust_remote_code: bool = False,
        template: str | Path | None = None,
        template_name: str | None = None,
        stop_tokens: Sequence[str] = (),
        clock: datetime | None = None,
        parser: ParserArgument = None,
        bridge: Bridge = "auto",
        check_every: int = 0,
    ) -> TitoSession:
        """A session for ``model`` (hub id or folder), resolved and loaded exactly as ``tito-audit audit`` does
        (mirrors, ``TITO_AUDIT_MIRROR``, cache, hub; remote code only with ``trust_remote_code``).

        The tokenizer is loaded once per process for the same arguments; later sessions reuse it.
        ``template_kwargs`` select the variant (``enable_thinking``, ...); ``stop_tokens`` adds stop tokens (by
        text) to those found in the configs and the template. ``parser`` makes the session parse each completion
        (``"auto"``, ``"sglang"``, ``"hf"``, ``"TOOL[,REASONING]"`` or a parser object; see :meth:`parse`);
        ``bridge`` is ``"auto"`` (the default: a tool step the template's proof covers is bridged from a short local
        render, the whole conversation checked at :meth:`finish` and every ``check_every`` such steps; every other
        step as ``"template"``), ``"template"`` (the template's next prompt after the buffer, checked at every step) or
        ``"history-free"`` (the stand-in suffix, never checked); see :data:`~tito_audit.session.policies.BRIDGES`.
        """
        source = ModelSourceSettings.of(
            mirrors, cache_dir, revision, allow_hub, trust_remote_code, template, template_name
        )
        machinery = machinery_for(model, source, template_kwargs, tuple(stop_tokens))
        options = SessionOptions(on_break=on_break, clock=clock, parser=parser, bridge=bridge, check_every=check_every)
        return cls(machinery, tools=tools, **options)

    @classmethod
    def from_loaded(
        cls,
        loaded: LoadedModel,
        *,
        tools: list[dict] | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        on_break: OnBreak = "raise",
        stop_tokens: Sequence[str] = (),
        clock: datetime | None = None,
        parser: ParserArgument = None,
        bridge: Bridge = "auto",
        check_every: int = 0,
    ) -> TitoSession:
        """A session for a model already loaded (:func:`tito_audit.model.load_folder.load_model`); not cached."""
        machinery = build_machinery(loaded, template_kwargs, extra_stop_tokens=stop_tokens)
        options = SessionOptions(on_break=on_break, clock=clock, parser=parser, bridge=bridge, check_every=check_every)
        return cls(machinery, tools=tools, **options)

    def spawn(
        self,
        *,
        tools: list[dict] | None = None,
        on_break: OnBreak | None = None,
        bridge: Bridge | None = None,
        check_every: int | None = None,
    ) -> TitoSession:
        """A new, empty session on the same model and template settings (nothing is loaded again, and the template's
        proof is shared)."""
        return TitoSession(
            self._settings.machinery,
            tools=tools if tools is not None else self._settings.tools,
            on_break=on_break or self.on_break,
            clock=self.clock,
            parser=self._parser.parser if self._parser is not None else None,
            bridge=bridge or self.bridge,
            check_every=self.check_every if check_every is None else check_every,
        )

    def fork(self) -> TitoSession:
        """An independent copy of this session as it is now (same machinery, nothing loaded): a server tries a step
        on the copy and keeps it only when the engine answered, so a failed call leaves the session unchanged."""
        twin = copy.copy(self)
        twin._own(copy.copy(self._settings), self._checks)  # its settings and the parts that read them: its own
        twin._state, twin._parser = self.snapshot(), copy.copy(self._parser)  # the parser keeps per-session state
        return twin

    @property
    def last_check(self) -> FullCheck | None:
        """The last render of the whole conversation that covered steps bridged without it, and what it found."""
        return self._checks.last_check

    @property
    def bridge_proof(self) -> BridgeProof:
        """The proof of which steps this session may bridge without rendering the history (made on first use, once
        per model, template setting and whether tools are declared; see :mod:`tito_audit.session.proof`)."""
        return self._checks.bridge_proof

    @property
    def unchecked_steps(self) -> list[int]:
        """The steps bridged from the short local render that no render of the whole conversation has covered yet."""
        return [pending.step for pending in self._state.pending]

    @property
    def origin(self) -> dict[str, str]:
        """What this session makes: its model's tokenizer and template, its tools, its policies."""
        return self._restorer.origin

    def snapshot(self) -> SessionState:
        """An independent copy of the session's state now, with its origin (:meth:`restore` takes it back;
        :meth:`SessionState.copy`)."""
        return self._restorer.snapshot(self._state)

    def restore(self, state: SessionState) -> None:
        """Continue from a copy of ``state`` (a :meth:`snapshot`, or one stored: :mod:`tito_audit.session.snapshot`);
        refused in one line when it was taken in a session of another tokenizer, template, tools or policies."""
        self._state = self._restorer.restored(state)

    @property
    def state(self) -> SessionState:
        """The session's state itself, for code that reads it at every step (:mod:`tito_audit.session.snapshot`): read
        it, never change it (:meth:`snapshot` for a copy)."""
        return self._state

    # -- what a trainer reads -----------------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        return self._settings.machinery.loaded.tokenizer

    @property
    def chat_template(self) -> str | None:
        """The Jinja template the session renders with (None for backends without one, as mistral-common)."""
        return self._settings.machinery.loaded.template_source

    @property
    def codec(self) -> TokenCodec:
        """The audit's token view of the tokenizer (canonical encode, decode, control tokens)."""
        return self._settings.machinery.codec

    @property
    def buffer(self) -> list[int]:
        """The token buffer: prompt, sampled completions (as sampled) and bridges."""
        return as_list(self._state.buffer)

    @property
    def loss_mask(self) -> list[int]:
        """1 on every sampled id of the buffer, 0 on everything the template wrote."""
        return as_list(self._state.mask)

    @property
    def logprobs(self) -> Logprobs:
        """One entry per buffer position: the engine's log-probability where an id was sampled and given with one
        (``extend(..., logprobs=)``), None elsewhere; on a re-render they follow the loss mask."""
        return as_list(self._state.logprobs)

    @property
    def messages(self) -> list[Message]:
        return clone_data(self._state.messages)

    def shared_messages(self) -> tuple[Message, ...]:
        """The messages as the session keeps them, not copied: for code that reads the whole conversation at every
        step (a server handing it to an engine), where :attr:`messages`' copy would cost as much as the conversation.
        Read them; never change them."""
        return tuple(self._state.messages)

    # -- what a stream of the next completion reads (a server's: :mod:`tito_audit.gateway.completion_stream`) ------
    @property
    def lock(self) -> Any:
        """The model's lock (reentrant, shared by its sessions): decoding and parsing take it."""
        return self._settings.machinery.lock

    @property
    def reasoning_open(self) -> bool:
        """Whether the session's parser reads the next completion as inside a reasoning block (False: no parser)."""
        return self._parser is not None and self._parser.reasoning_open

    @property
    def prompt_text(self) -> str:
        """The text the next completion follows: the template's view of the buffer (what a parser is handed)."""
        return self._state.view_text

    def buffer_tail(self, count: int) -> list[int]:
        """The buffer's last ``count`` ids (what a completion is decoded after), in time proportional to ``count``."""
        return list(self._state.buffer[-count:]) if count > 0 else []

    def decode_completion(self, completion_ids: list[int]) -> str:
        """The text of ``completion_ids`` as it reads after the buffer (what :meth:`parse` parses: decoded once)."""
        with self._settings.machinery.lock:  # the codec's caches are shared by the model's sessions
            return self._steps.decode_in_context(self._state, completion_ids)

    @property
    def turns(self) -> list[SessionTurn]:
        return list(self._state.turns)

    @property
    def breaks(self) -> list[SessionBreak]:
        """Breaks recorded under ``warn`` and ``rerender`` (``raise`` raises instead)."""
        return list(self._state.breaks)

    @property
    def stop_ids(self) -> frozenset[int]:
        """The ids at which the engine ends a turn (configs, tokenizer, template terminators)."""
        return self._settings.machinery.stop_ids

    @property
    def stop_tokens(self) -> list:
        """The stop tokens with where each came from (:class:`~tito_audit.audit.results.StopToken`)."""
        return list(self._settings.machinery.stop_tokens)

    @property
    def held_bytes(self) -> int:
        """The memory the session holds, estimated: 72 bytes per token of its buffer (the buffer, the loss mask and
        the template's view of it keep each id, the turns the completions again, the log-probabilities a slot) plus
        24 per log-probability kept and twice its text (the messages and the rendered view). A server bounds its
        sessions with it (``tito-audit serve --max-session-bytes``)."""
        return self._state.held_bytes()

    def forget(self) -> None:
        """Drop what the model's shared caches keep for this session: its messages' template preparation and the
        tokenization of its long texts. A server calls it when a session ends, so that the memory comes back then
        rather than when the caches fill; the session stays usable (its next render prepares them again)."""
        machinery = self._settings.machinery
        with machinery.lock:
            machinery.renderer.forget(self._state.messages, self._settings.tools)
            machinery.codec.forget(self._state.view_text)

    def template_ids(self, messages: Sequence[Message], add_generation_prompt: bool) -> list[int]:
        """The template's own ids of ``messages`` (what a trainer that re-renders gets), with the session's clock,
        tools and template settings."""
        history = checked_messages(messages, "messages")
        key = (len(history), add_generation_prompt)
        machinery = self._settings.machinery
        with machinery.lock, machinery.rendering(self.clock):
            return list(machinery.renderer.prefixes(history, self._settings.tools, [key])[key].ids)

    # -- the loop -----------------------------------------------------------------------------------------------
    def start(self, messages: Sequence[Message]) -> list[int]:
        """The ids of the first prompt, ``ids(messages, add_generation_prompt=True)``; nothing in it is sampled.

        ``messages`` may hold earlier assistant turns (few-shot, a resumed conversation): they are template text.
        """
        self._steps.require_new(self._state)
        history = checked_messages(messages, "messages")
        if not history:
            raise ValueError("start() needs at least one message")
        prompt = self._steps.render(history, step=0, roles=[str(m.get("role")) for m in history])
        self._steps.open_with(self._state, history, prompt)
        return as_list(self._state.buffer)

    def parse(self, completion_ids: Sequence[int]) -> Message:
        """The assistant message the session's parser makes of ``completion_ids`` (the completion decoded as it
        reads in the buffer, its stop token trimmed); the same message :meth:`extend` and :meth:`finish` append.
        Needs ``parser=`` at creation."""
        state, steps = self._state, self._steps
        steps.require_open(state)
        completion = steps.completion(completion_ids) or []
        if self._parser is None:
            raise RuntimeError("this session has no parser: create it with parser='sglang' (or another) to parse")
        return self._parser.parse_in(state, completion, lambda ids: steps.decode_in_context(state, ids), self.clock)

    def extend(
        self,
        completion_ids: Sequence[int] | None,
        assistant_message: Message | Sequence[Message] | None = None,
        tool_messages: Sequence[Message] | None = None,
        *,
        logprobs: Sequence[float | None] | None = None,
        copy: bool = True,
    ) -> Sequence[int]:
        """Append the sampled ids, the assistant message and the messages after it; return the next prompt's ids.

        ``completion_ids``: what the engine returned for the last prompt, kept exactly as they are (stop token
        included, whatever their split); ``None`` appends ``assistant_message`` without sampling (its tokens
        come from the template, outside the loss). ``assistant_message``: what your parser made of them
        (``content``, ``reasoning_content``, ``tool_calls``); with a session parser, leave it out:
        ``extend(completion_ids, tool_messages)`` appends :meth:`parse`'s message. ``tool_messages``: the messages
        to append before the next generation (tool results, a user or system turn); at least one. ``logprobs``: the
        engine's log-probability of each sampled id (kept in :attr:`logprobs`). ``copy=False`` returns the buffer as a
        read-only sequence shared with the session, in constant time, instead of a new list (a server that hands the
        prompt to its engine and keeps the session: copying it would cost as much as the conversation).
        """
        self._steps.require_open(self._state)
        given, tool_messages = split_extend_arguments(assistant_message, tool_messages)
        completion = self._steps.completion(completion_ids)
        sampled = sampled_logprobs(logprobs, completion)
        given = given if given is not None else parsed_for(completion, self._parser, self.parse)
        assistant = as_assistant_message(given)
        appended = [message_copy(m, f"tool_messages[{i}]") for i, m in enumerate(tool_messages or ())]
        if not appended:
            raise ValueError("extend() appends at least one message after the assistant turn; use finish() to end")
        check_text([assistant], None, "assistant_message")
        check_text(appended, None, "tool_messages[{index}]")
        broke = self._checks.step(self._state, completion, assistant, appended, sampled)
        if broke is not None and self.on_break == "warn":
            warnings.warn(TitoBreakWarning(broke.describe()), stacklevel=2)
        return as_list(self._state.buffer) if copy else AppendOnly.of(self._state.buffer, INTS)

    def check(self) -> SessionBreak | None:
        """Render the whole conversation once now and check the steps bridged without it since the last such render
        (``bridge="auto"``; what :meth:`finish` does first): returns the break found (the first step that breaks, as
        the per-turn check would have reported it), after applying the policy; None when none breaks or nothing is
        pending. Under ``raise`` the break is raised and the session left as it was."""
        self._steps.require_open(self._state)
        return self._checks.check_now(self._state, "check")

    def finish(
        self,
        completion_ids: Sequence[int] | None,
        assistant_message: Message | None = None,
        *,
        logprobs: Sequence[float | None] | None = None,
        check: bool = True,
    ) -> list[int]:
        """Append the last completion (nothing follows it, so there is no step of its own to check) and close the
        session; return the whole buffer. With a session parser, ``assistant_message`` may be left out
        (:meth:`parse`'s). Steps bridged without rendering the history (``bridge="auto"``) that no later render
        covered are checked first, with one render of the whole conversation (:meth:`check`): a break found there is
        handled by the policy (``raise`` raises it and leaves the session open, as it was); ``check=False`` leaves
        them unchecked (after a :meth:`check` of your own)."""
        self._steps.require_open(self._state)
        completion = self._steps.completion(completion_ids)
        sampled = sampled_logprobs(logprobs, completion)
        given = assistant_message if assistant_message is not None else parsed_for(completion, self._parser, self.parse)
        assistant = as_assistant_message(given)
        check_text([assistant], None, "assistant_message")
        if check:
            self._checks.check_now(self._state, "finish")
        self._steps.append_last(self._state, completion, assistant, sampled)
        return as_list(self._state.buffer)
