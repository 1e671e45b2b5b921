"""The guard inside the training loop: one token buffer that only grows, checked at every step.

A trainer opens a session per rollout, takes the first prompt from :meth:`TitoSession.start`, and after each
generation calls :meth:`TitoSession.extend` with the ids the engine returned, the message its parser made of
them and the messages to append (tool results, a user turn). The session appends the sampled ids untouched,
renders the next prompt ``R`` with the model's own template, and appends the bridge (``R`` after the buffer)
only when the buffer's text is a prefix of ``R`` and its canonical tokens are a prefix of ``ids(R)``: the same
decision the audit makes (:func:`tito_audit.audit.core.join.join`). When the template cannot be followed, the policy
chosen at creation decides (see :data:`POLICIES`).

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

``bridge`` (:data:`~tito_audit.session.policies.BRIDGES`): ``"auto"`` (the default) bridges a tool step the
template's proof covers from a short local render, whatever the history, and checks it with the whole conversation
later, at :meth:`TitoSession.finish` at the latest (:mod:`tito_audit.session.deferred`); ``"template"`` renders the
whole conversation at every step; ``"history-free"`` appends the stand-in suffix (verl, SkyRL) and never checks.
"""

from __future__ import annotations

import contextlib
import copy
import sys
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
from tito_audit.session.inputs import as_assistant_message, check_depth, check_text, message_copy
from tito_audit.session.machinery import Machinery, ModelSourceSettings, build_machinery, machinery_for
from tito_audit.session.parsing import ParserArgument, SessionParser, resolve_parser, split_extend_arguments
from tito_audit.session.policies import BRIDGES, POLICIES, Bridge, OnBreak, SessionOptions
from tito_audit.session.restoring import Restoring, tools_digest
from tito_audit.session.shared_list import INTS, AppendOnly, as_list
from tito_audit.session.state import NEW, SessionState
from tito_audit.session.turn_records import SessionTurn


class TitoSession(DeferredChecks, Restoring):
    """An append-only token buffer for one rollout, checked against the model's template: at every step, or, for the
    steps bridged from a short local render, at the next render of the whole conversation (``finish`` at the latest)."""

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
        if on_break not in POLICIES:
            raise ValueError(f"on_break must be one of {', '.join(POLICIES)}, not {on_break!r}")
        if bridge not in BRIDGES:
            raise ValueError(f"bridge must be one of {', '.join(BRIDGES)}, not {bridge!r}")
        if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 0:
            raise ValueError(f"check_every must be a whole number of steps, 0 or more, not {check_every!r}")
        self._machinery = machinery
        check_text([], tools)
        self._tools = clone_data(tools) if tools is not None else None
        self._tools_digest = tools_digest(self._tools)
        self.bridge: Bridge = bridge
        self.check_every = check_every
        """``bridge="auto"``: render the whole conversation after this many steps bridged without it (0: only where a
        step needs it and at :meth:`finish`); see :mod:`tito_audit.session.deferred`."""
        resolved = resolve_parser(parser, machinery)
        self._parser = SessionParser(resolved, machinery, self._tools) if resolved is not None else None
        self.on_break: OnBreak = on_break
        self.clock = clock or datetime.now().replace(microsecond=0)
        """The date the template sees through ``strftime_now``, frozen for the whole session."""
        self._state = SessionState()  # everything a step changes: replaced only by restore()
        self.last_check: FullCheck | None = None
        """The last render of the whole conversation that covered steps bridged without it, and what it found."""
        self._stand_in_prompt: str | None = None
        """The local render's generation prompt after its stand-in user message (``""``: the template refuses it)."""

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
            self._machinery,
            tools=tools if tools is not None else self._tools,
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
        twin._state, twin._parser = self.snapshot(), copy.copy(self._parser)  # the parser keeps per-session state
        return twin

    # -- what a trainer reads -----------------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        return self._machinery.loaded.tokenizer

    @property
    def chat_template(self) -> str | None:
        """The Jinja template the session renders with (None for backends without one, as mistral-common)."""
        return self._machinery.loaded.template_source

    @property
    def codec(self) -> TokenCodec:
        """The audit's token view of the tokenizer (canonical encode, decode, control tokens)."""
        return self._machinery.codec

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
        return self._machinery.lock

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
        with self._machinery.lock:  # the codec's caches are shared by the model's sessions
            return self._decode_in_context(completion_ids)

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
        return self._machinery.stop_ids

    @property
    def stop_tokens(self) -> list:
        """The stop tokens with where each came from (:class:`~tito_audit.audit.results.StopToken`)."""
        return list(self._machinery.stop_tokens)

    @property
    def held_bytes(self) -> int:
        """The memory the session holds, estimated: 72 bytes per token of its buffer (the buffer, the loss mask and
        the template's view of it keep each id, the turns the completions again, the log-probabilities a slot) plus
        24 per log-probability kept and twice its text (the messages and the rendered view). A server bounds its
        sessions with it (``tito-audit serve --max-session-bytes``)."""
        state = self._state
        floats = len(state.logprobs) - state.logprobs.count(None)
        return 72 * len(state.buffer) + 24 * floats + 2 * sys.getsizeof(state.view_text)

    def forget(self) -> None:
        """Drop what the model's shared caches keep for this session: its messages' template preparation and the
        tokenization of its long texts. A server calls it when a session ends, so that the memory comes back then
        rather than when the caches fill; the session stays usable (its next render prepares them again)."""
        machinery = self._machinery
        with machinery.lock:
            machinery.renderer.forget(self._state.messages, self._tools)
            machinery.codec.forget(self._state.view_text)

    def template_ids(self, messages: Sequence[Message], add_generation_prompt: bool) -> list[int]:
        """The template's own ids of ``messages`` (what a trainer that re-renders gets), with the session's clock,
        tools and template settings."""
        history = [message_copy(m, f"messages[{i}]") for i, m in enumerate(messages)]
        check_text(history, None, "messages[{index}]")
        key = (len(history), add_generation_prompt)
        machinery = self._machinery
        with machinery.lock, machinery.rendering(self.clock):
            return list(machinery.renderer.prefixes(history, self._tools, [key])[key].ids)

    # -- the loop -----------------------------------------------------------------------------------------------
    def start(self, messages: Sequence[Message]) -> list[int]:
        """The ids of the first prompt, ``ids(messages, add_generation_prompt=True)``; nothing in it is sampled.

        ``messages`` may hold earlier assistant turns (few-shot, a resumed conversation): they are template text.
        """
        if self._state.phase != NEW:
            raise RuntimeError("start() was already called on this session; open a new one with spawn()")
        history = [message_copy(m, f"messages[{i}]") for i, m in enumerate(messages)]
        if not history:
            raise ValueError("start() needs at least one message")
        check_text(history, None, "messages[{index}]")
        self._open_with(history, self._render(history, step=0, roles=[str(m.get("role")) for m in history]))
        return as_list(self._state.buffer)

    def parse(self, completion_ids: Sequence[int]) -> Message:
        """The assistant message the session's parser makes of ``completion_ids`` (the completion decoded as it
        reads in the buffer, its stop token trimmed); the same message :meth:`extend` and :meth:`finish` append.
        Needs ``parser=`` at creation."""
        state = self._state
        self._require_open()
        completion = self._completion(completion_ids) or []
        if self._parser is None:
            raise RuntimeError("this session has no parser: create it with parser='sglang' (or another) to parse")
        key = (len(state.buffer), state.steps, tuple(completion))  # the same ids at a later step parse anew
        if state.parsed is not None and state.parsed[0] == key:
            return clone_data(state.parsed[1])
        stop = self.codec.decode([completion[-1]]) if completion and completion[-1] in self.stop_ids else None
        parser, lock = self._parser, self._machinery.lock
        with lock, self._machinery.rendering(self.clock):
            prompt, text = (state.view_text, state.view_ids), self._decode_in_context(completion)
        # a parser in another process (vLLM's) is called without the model's lock: its other sessions go on meanwhile
        with contextlib.nullcontext() if parser.runs_apart else lock, self._machinery.rendering(self.clock):
            message = parser.parse(text, stop, prompt, completion, state.steps + 1)
        check_depth(message, "the parsed completion")
        state.parsed = (key, message)
        return clone_data(message)

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
        self._require_open()
        given, tool_messages = split_extend_arguments(assistant_message, tool_messages)
        completion = self._completion(completion_ids)
        sampled = sampled_logprobs(logprobs, completion)
        assistant = as_assistant_message(given if given is not None else self._parsed_for(completion))
        appended = [message_copy(m, f"tool_messages[{i}]") for i, m in enumerate(tool_messages or ())]
        if not appended:
            raise ValueError("extend() appends at least one message after the assistant turn; use finish() to end")
        check_text([assistant], None, "assistant_message")
        check_text(appended, None, "tool_messages[{index}]")
        machinery = self._machinery
        # one step at a time per model (the renderer and the tokenization cache are shared by the sessions of a
        # process), and every render of the step, diagnosis included, sees the session's clock
        broke = None
        self._prepare_proof(completion, appended)
        with machinery.lock, machinery.rendering(self.clock):
            if self.bridge == "history-free":
                self._history_free(completion, assistant, appended, sampled)
            elif not self._local_step(completion, assistant, appended, sampled):
                broke = self._advance(completion, assistant, appended, sampled)
        if broke is not None and self.on_break == "warn":
            warnings.warn(TitoBreakWarning(broke.describe()), stacklevel=2)
        return as_list(self._state.buffer) if copy else AppendOnly.of(self._state.buffer, INTS)

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
        self._require_open()
        completion = self._completion(completion_ids)
        sampled = sampled_logprobs(logprobs, completion)
        given = assistant_message if assistant_message is not None else self._parsed_for(completion)
        assistant = as_assistant_message(given)
        check_text([assistant], None, "assistant_message")
        if check:
            self._check_now("finish")
        self._append_last(completion, assistant, sampled)
        return as_list(self._state.buffer)

    def _parsed_for(self, completion: list[int] | None) -> Message:
        if completion is None:
            raise ValueError("an unsampled turn (completion_ids=None) needs its assistant_message")
        if self._parser is None:
            raise ValueError("assistant_message is required: this session has no parser (create it with parser=)")
        return self.parse(completion)
