"""One request's step on a session, in the order that keeps a session unchanged when anything fails.

1. :func:`prepare` (in a worker thread): compare the request's messages with the session's history, then on a
   *copy* of the session (:meth:`~tito_audit.session.TitoSession.fork`) append the last answer's ids and the new
   messages; the copy's buffer is the prompt.
2. The engine samples (the only awaited step).
3. :func:`settle` (in a worker thread): check the ids against the vocabulary, parse them, and only then commit the
   request's transaction (:class:`~tito_audit.gateway.turn_transaction.Turn`): the copy in the session's place.

History is append-only: the messages must be the history the session has seen, then the assistant turn it
answered (as the client got it), then new messages. Anything else is refused (409) naming the first message that
differs, or under ``--on-rewrite branch`` continued as a new branch (:mod:`.branches`); what counts as the same
message is the server's matcher (:mod:`.matchers`). The same messages sent again (a retry) sample the turn again
from the same prompt. A streamed turn (:mod:`.turn_stream`) takes the same steps, step 3 split in :func:`checked`,
:func:`pending_of` and the commit so that the commit comes after its last event. Both commit through the request's
transaction (:meth:`~tito_audit.gateway.turn_transaction.Turn.commit`), which keeps the turn or changes nothing.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tito_audit.errors import BadInputError, one_line
from tito_audit.gateway.errors import EngineError, RequestError
from tito_audit.gateway.matchers import Matcher
from tito_audit.gateway.protocol import ChatRequest, comparable, finish_reason, take_message, wire_message
from tito_audit.gateway.sampling_engines import EngineOutput
from tito_audit.gateway.session_entry import GatewaySession, Pending, SessionMaker
from tito_audit.gateway.turn_transaction import Turn
from tito_audit.model.token_ids import token_ids
from tito_audit.session import RenderRefused, SessionBreak, SessionTurn, TitoBreak, TitoSession
from tito_audit.session.buffer_logprobs import sampled_logprobs


@dataclass
class Step:
    """A prepared step: the session copy, the prompt it gives and the messages it appended."""

    trial: TitoSession
    prompt: Sequence[int]
    """The next prompt's ids, the session's buffer shared (read-only), not copied."""
    history: list[dict]
    breaks_before: int
    retry: bool
    on_commit: Callable[[GatewaySession, Step, Pending], None] | None = None
    """Called with (entry, step, pending) when the step is committed (the branch tree records its node)."""
    other_bytes: int = 0
    """What the session's other branches hold (counted with the step's copy against the byte bounds)."""
    tools: list[dict] | None = None
    """The tools of the step's session (the engine is told them)."""
    sent: list[dict] | None = None
    """The request's messages as the client sent them (kept with :attr:`history` when the step is committed)."""
    found: Any = None
    """How the request found its session (:class:`~tito_audit.gateway.session_lookup.Found`), kept in the record."""
    ignored: list[str] = field(default_factory=list)
    """The request's fields the gateway did not act on (listed once in the record)."""


class RewritePolicy(Protocol):
    """What a rewritten history does (:class:`~tito_audit.gateway.branches.Rewrites`, ``--match`` and
    ``--on-rewrite``), as :func:`prepare` reads it."""

    @property
    def key(self) -> Matcher: ...

    @property
    def branch(self) -> bool: ...

    def prepare(self, entry: GatewaySession, request: ChatRequest, make_session: SessionMaker) -> Step: ...


def prepare(
    entry: GatewaySession, request: ChatRequest, make_session: SessionMaker, rewrites: RewritePolicy | None = None
) -> Step:
    """The step ``request`` asks of ``entry`` (see the module docstring); raises :class:`RequestError`. ``rewrites``
    (:class:`~tito_audit.gateway.branches.Rewrites`) says what counts as the same message and, under
    ``--on-rewrite branch``, prepares the step on the session's tree instead."""
    key = rewrites.key if rewrites is not None else comparable
    try:
        if rewrites is not None and rewrites.branch:  # compares the messages with each branch its own way
            return rewrites.prepare(entry, request, make_session)
        sent, raw = compared(entry, request.messages, key)
        if entry.session is None:
            if entry.gone is not None and any(m["role"] == "assistant" for m in request.messages):
                raise RequestError(  # the client goes on with a session that ended: its sampled ids are gone
                    404,
                    "unknown_session",
                    f"no session {entry.id!r} ({entry.gone}) and the messages hold assistant turns whose sampled ids "
                    "went with it; start the conversation again",
                )
            trial = make_session(request.tools)
            entry.tools = request.tools
            return Step(trial, opening(trial, request), sent, 0, False, tools=request.tools, sent=raw)
        session, pending = entry.session, entry.pending
        assert pending is not None
        if _tools_key(request.tools) != _tools_key(entry.tools):
            raise edited("tools differ from the session's: a session that only appends keeps its tools")
        known = len(entry.history)
        differs = next((i for i, (a, b) in enumerate(zip(sent, entry.history, strict=False)) if a != b), None)
        if differs is not None or len(sent) < known:
            where = differs if differs is not None else len(sent)
            raise edited(
                f"{request.name(where)} differs from the session's history: a session only appends (send the "
                "history unchanged, use a new session id, or serve with --on-rewrite branch)"
            )
        trial = session.fork()
        if len(sent) == known:  # the same request again: sample the turn again
            return Step(trial, trial.buffer, sent, len(trial.breaks), True, tools=entry.tools, sent=raw)
        if sent[known] != key(pending.echo):
            raise edited(
                f"{request.name(known)} is not the assistant turn the gateway answered (a session only appends; "
                "serve with --on-rewrite branch to keep an edit as a branch)"
            )
        new = request.messages[known + 1 :]
        if not new:
            raise RequestError(
                400, "invalid_request", "nothing follows the assistant turn: send the tool results or a user message"
            )
        # the buffer shared, not copied: what the step costs does not grow with the conversation
        prompt = trial.extend(pending.ids, pending.message, new, logprobs=pending.logprobs, copy=False)
        return Step(trial, prompt, sent, len(session.breaks), False, tools=entry.tools, sent=raw)
    except RenderRefused as exc:
        raise refusal(exc, request) from None
    except TitoBreak as exc:
        raise RequestError(
            422, "tito_break", "the template cannot follow the buffer (on_break=raise): " + one_line(exc, 400)
        ) from None
    except (BadInputError, ValueError) as exc:
        raise RequestError(400, "invalid_request", one_line(exc, 400)) from None


HISTORY_EDITED = 400
"""The status of a history the session cannot take (``--on-rewrite refuse``): not 409, which the official SDKs retry
with the same history, to the same refusal."""


def edited(message: str) -> RequestError:
    """The refusal of a request whose history differs from the session's (see :data:`HISTORY_EDITED`)."""
    return RequestError(HISTORY_EDITED, "history_edited", message)


def opening(trial: TitoSession, request: ChatRequest) -> Sequence[int]:
    """The first prompt of a new session: every message the request sends, an assistant turn among them (a canned
    reply, a few-shot turn, a conversation the gateway has not seen) rendered as context, never in the loss."""
    if request.messages[-1]["role"] == "assistant":
        raise RequestError(
            400,
            "invalid_request",
            f"{request.name(len(request.messages) - 1)}: a conversation the gateway has not seen ends with an "
            "assistant turn (a prefill): the gateway samples whole turns; send what follows it",
        )
    return trial.start(request.messages)


def compared(entry: GatewaySession, messages: list[dict], key: Any) -> tuple[list[dict], list[dict]]:
    """``messages`` as compared (``key``, the server's matcher) and as sent. Those equal, as sent, to the messages the
    client sent last time take their compared form from the session's history (equal messages compare equal under any
    matcher): checking a long history costs one comparison of plain data, not a new compared form per message."""
    previous = entry.sent
    same = 0
    if previous is not None and previous[0] is entry.history:
        _, last = previous
        limit = min(len(last), len(messages))
        while same < limit and messages[same] == last[same]:
            same += 1
        return entry.history[:same] + [key(m) for m in messages[same:]], last[:same] + messages[same:]
    return [key(m) for m in messages], list(messages)


def refusal(exc: RenderRefused, request: ChatRequest | None = None) -> RequestError:
    """A render the template did not give (whatever the break policy): 413 when its output would pass
    ``--max-render-chars`` or its values ``--max-render-bytes``, 422 when it ran past ``--max-render-seconds`` or the
    template raised (naming, when the request holds one, the system message inside the conversation that templates
    commonly refuse)."""
    reason = one_line(exc.reason, 400)
    if exc.limit == "max_bytes":
        return RequestError(413, "render_too_large", f"the template's render of these messages is refused: {reason}")
    inside = (
        next((i for i, m in enumerate(request.messages) if i > 0 and m["role"] == "system"), None)
        if request is not None
        else None
    )
    if inside is not None and exc.limit not in ("max_chars", "max_seconds"):
        assert request is not None
        return RequestError(
            422,
            "template_refused",
            f"{request.name(inside)}: the template refused to render a system message inside the conversation: "
            + reason,
        )
    if exc.limit == "max_chars":
        return RequestError(413, "render_too_long", f"the template's render of these messages is refused: {reason}")
    if exc.limit == "max_seconds":
        return RequestError(422, "render_timeout", f"the template's render of these messages is refused: {reason}")
    return RequestError(422, "template_refused", f"the template refused to render these messages: {reason}")


def settle(turn: Turn, step: Step, output: EngineOutput, parse_with_session: bool) -> tuple[dict, Pending]:
    """Check and parse the engine's ids, then commit ``step`` in ``turn`` (which raises, the session as it was, when
    the turn is not kept); returns (tito record, pending)."""
    ids, message = checked(step, output, parse_with_session)
    pending = with_logprobs(pending_of(ids, message, wire_message(message), output.finish_reason), output)
    record = record_of(turn.entry, step, pending)
    turn.commit(step, pending)
    return record, pending


def with_logprobs(pending: Pending, output: EngineOutput) -> Pending:
    """``pending`` with the engine's log-probabilities of its ids (checked: one number at most 0 per id, or 502) and
    the alternatives it gave."""
    try:
        pending.logprobs = sampled_logprobs(output.logprobs, pending.ids, "the engine's logprobs")
    except BadInputError as exc:
        raise EngineError(502, "engine_bad_response", str(exc)) from None
    pending.top_logprobs = output.top_logprobs
    return pending


def checked(step: Step, output: EngineOutput, parse_with_session: bool) -> tuple[list[int], dict]:
    """The engine's ids checked against the vocabulary, and the message the parser makes of them (the engine's own
    message with the ``template`` parser, the decoded text without a parser)."""
    trial = step.trial
    try:
        ids = token_ids(output.ids, "the engine's completion", trial.codec.id_limit)
    except BadInputError as exc:
        raise EngineError(502, "engine_bad_ids", str(exc)) from None
    if not ids:  # an engine always returns what it sampled, a stop token at least: nothing is no turn to commit
        raise EngineError(502, "engine_empty", "the engine returned no token ids (not even a stop token)")
    if parse_with_session:
        try:
            message = trial.parse(ids)
        except (BadInputError, RecursionError) as exc:  # what the model wrote parses to data nested too deeply
            raise EngineError(
                502, "engine_bad_response", f"the completion cannot be parsed: {one_line(exc, 400)}"
            ) from None
    elif output.message is not None:
        message = output.message
    else:
        message = {"role": "assistant", "content": trial.codec.decode(ids)}
    return ids, message


def pending_of(ids: list[int], message: dict, wire: dict, engine_finish: str) -> Pending:
    """The answer as the session keeps it: ``message`` (the parser's, with the call ids of ``wire``, the message as
    the client got it) and what the client's echo of ``wire`` must compare equal to."""
    taken = dict(message)
    sent_calls = wire.get("tool_calls") or []
    if sent_calls and len(sent_calls) == len(message.get("tool_calls") or []):  # the ids the client answers
        calls = zip(message.get("tool_calls") or [], sent_calls, strict=True)
        taken["tool_calls"] = [{**call, "id": sent["id"]} for call, sent in calls]
    try:
        echo = take_message(wire, "the answer")
    except RequestError:  # a streamed call cut before its arguments were whole: compared as the client got it
        echo = {k: v for k, v in wire.items() if v is not None}
    return Pending(ids, taken, wire, finish_reason(message, engine_finish), echo)


def record_of(entry: GatewaySession, step: Step, pending: Pending) -> dict[str, Any]:
    """The ``tito`` record of the turn ``step`` and ``pending`` make (before or after it is committed)."""
    trial = step.trial
    new_breaks = trial.breaks[step.breaks_before :] if not step.retry else []
    turns = trial.turns
    return {
        "session": entry.id,
        "turn": len(turns) + 1,
        "prompt_tokens": len(step.prompt),
        "completion_ids": len(pending.ids),
        "retry": step.retry,
        "breaks": [break_record(b) for b in new_breaks],
        "bridged": turns[-1].bridged if turns else None,
        "unchecked_steps": len(trial.unchecked_steps),
    }


def finished_view(session: TitoSession, pending: Pending | None) -> tuple[TitoSession, dict[str, Any]]:
    """A copy of ``session`` with ``pending`` (the last answer) appended as ``finish`` appends it, and what the full
    check of its steps bridged without rendering the history found (``bridge="auto"``): ``ran`` (whether there was
    anything to check), ``at`` and ``steps`` (what it covered) and ``found`` (the first break, or None). The check runs
    here, before a record is served, never on a turn's request; under ``raise`` the break it finds is reported here
    rather than raised. The session itself is not changed."""
    view = session.fork()
    steps = view.unchecked_steps
    found = None
    if steps:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the record reports it (and every read of the record finds it again)
                found = view.check()
        except TitoBreak as exc:  # on_break=raise, or a render the template refused
            found = exc.details
    if pending is not None:
        view.finish(pending.ids, pending.message, logprobs=pending.logprobs, check=False)
    report = {
        "ran": bool(steps),
        "at": "record" if steps else None,
        "steps": steps,
        "found": break_record(found) if found is not None else None,
    }
    return view, report


def unchecked_view(session: TitoSession, pending: Pending | None) -> tuple[TitoSession, dict[str, Any]]:
    """:func:`finished_view` without the check (what a count of the session's ids reads: nothing is rendered)."""
    view = session.fork()
    if pending is not None:
        view.finish(pending.ids, pending.message, logprobs=pending.logprobs, check=False)
    return view, {"ran": False, "at": None, "steps": view.unchecked_steps, "found": None}


def _tools_key(tools: list[dict] | None) -> str:
    return json.dumps(tools or [], sort_keys=True, ensure_ascii=False)


def break_record(details: SessionBreak) -> dict[str, Any]:
    """A :class:`~tito_audit.session.SessionBreak` as JSON (its evidence as text).

    Its counts are not the ``tito`` record's ``turn`` (the answer's number in the session, 1 for the first):
    ``step`` counts the session's extensions (1: the first request after the first answer) and ``turn`` is the index
    the answer the break comes before has in the conversation, messages and answer together (the audit's counting);
    ``answer_message_index`` says the same under a name that says so (``turn`` stays for clients that read it)."""
    return {
        "step": details.step,
        "turn": details.turn,
        "answer_message_index": details.turn,
        "aspect": details.aspect,
        "causes": list(details.causes),
        "message_index": details.message_index,
        "message_role": details.message_role,
        "char_index": details.char_index,
        "token_index": details.token_index,
        "buffer_text": details.buffer_text,
        "template_text": details.template_text,
        "handled": details.handled,
        "notes": list(details.notes),
        "found_at": details.found_at,
    }


def turn_record(turn: SessionTurn) -> dict[str, Any]:
    return {
        "message_index": turn.message_index,
        "sampled": turn.sampled,
        "stopped": turn.stopped,
        "completion": list(turn.completion),
        "bridge": list(turn.bridge),
        "broke": turn.broke is not None,
        "message": turn.message,
        "bridged": turn.bridged,
    }
