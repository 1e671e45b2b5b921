"""What a session says when the template cannot be followed: a :class:`SessionBreak` (plain data) and the
:class:`TitoBreak` exception that carries it.

The diagnosis is the audit's own (:func:`tito_audit.audit.checks.rollout.text_break` and ``seam_break``): the same
cause labels, the same attribution to the message whose rendering changed, the same evidence windows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tito_audit.audit.public import (
    CheckSetup,
    Failure,
    Join,
    RolloutContext,
    TokenWindow,
    common_prefix_length,
    history_dependent_suffix,
    seam_break,
    template_error,
    text_break,
    text_window,
    token_boundary,
    token_window,
)
from tito_audit.conversations.conversation import Conversation, Message, step_kind
from tito_audit.model.render import RenderError, RenderTimeout, RenderTooLarge, RenderTooLong

TEXT = "text"
SEAM = "seam"
REFUSED = "refused"
SUFFIX = "suffix"


@dataclass
class SessionBreak:
    """Why the buffer could not follow the template at one step (docs/contract.md's cause labels, located and with
    evidence)."""

    step: int
    """1 for the first :meth:`~tito_audit.session.TitoSession.extend`, 2 for the second, ..."""
    turn: int
    """Message index of the assistant turn the next prompt is for (as the audit's rollout failures count)."""
    aspect: str
    """``text`` (the template rewrote what the buffer holds), ``seam`` (a BPE merge across the join), ``refused``
    (the template raised) or ``suffix`` (``bridge="auto"``: the bridge appended without rendering the history is not
    the template's bridge at that step, ``history-dependent-suffix``)."""
    causes: list[str]
    roles: list[str]
    """Roles of the messages appended at this step."""
    message_index: int | None = None
    """The message whose rendering changed (None: the divergence lies in a generation prompt)."""
    message_role: str | None = None
    message_was_last: bool | None = None
    char_index: int | None = None
    token_index: int | None = None
    buffer_text: str = ""
    """The buffer's text around the divergence."""
    template_text: str = ""
    """The template's next prompt around the divergence."""
    buffer_tokens: TokenWindow | None = None
    template_tokens: TokenWindow | None = None
    detail: str = ""
    handled: str = ""
    """What the session did: ``raised``, ``kept the buffer (stand-in bridge)``, ``re-rendered``, ..."""
    notes: list[str] = field(default_factory=list)
    found_at: str = ""
    """Where a break of a step bridged without rendering the history was found, when later than that step
    (``bridge="auto"``): ``step N`` (a later step's full render), ``finish`` or ``check``; empty when found at its own
    step."""

    @property
    def cause(self) -> str:
        return self.causes[0] if self.causes else "unknown"

    @property
    def step_kind(self) -> str:
        return step_kind(self.roles)

    def describe(self) -> str:
        """One paragraph: where, why, and both sides of the divergence."""
        where = f"step {self.step} (before assistant turn {self.turn}, appended: {', '.join(self.roles) or '-'})"
        what = {
            TEXT: "the template rewrote the buffer's text",
            SEAM: "tokens merge across the join",
            SUFFIX: "the bridge appended without rendering the history is not the template's",
        }.get(self.aspect, "the template refused to render")
        owner = (
            f"; message {self.message_index} ({self.message_role}) is rendered differently"
            if self.message_index is not None
            else ""
        )
        late = f" (found at {self.found_at})" if self.found_at else ""
        lines = [f"TITO break at {where}{late}: {what} [{', '.join(self.causes)}]{owner}"]
        if self.buffer_text or self.template_text:
            lines.append(f"  buffer:   {self.buffer_text!r}")
            lines.append(f"  template: {self.template_text!r}")
        elif self.buffer_tokens is not None and self.template_tokens is not None:
            lines.append(f"  buffer tokens:   {self.buffer_tokens.texts!r}")
            lines.append(f"  template tokens: {self.template_tokens.texts!r}")
        if self.detail:
            lines.append(f"  {self.detail}")
        return "\n".join(lines)


class TitoBreak(Exception):
    """Raised by :meth:`~tito_audit.session.TitoSession.extend` (``on_break="raise"``) when the template cannot be
    followed by appending; ``details`` holds the :class:`SessionBreak`."""

    def __init__(self, details: SessionBreak) -> None:
        super().__init__(details.describe())
        self.details = details

    @property
    def cause(self) -> str:
        return self.details.cause

    @property
    def causes(self) -> list[str]:
        return self.details.causes

    @property
    def message_index(self) -> int | None:
        return self.details.message_index

    @property
    def turn(self) -> int:
        return self.details.turn


class TitoBreakWarning(UserWarning):
    """Issued for each break under ``on_break="warn"``."""


def _from_failure(failure: Failure, step: int, aspect: str) -> SessionBreak:
    return SessionBreak(
        step=step,
        turn=failure.turn,
        aspect=aspect,
        causes=list(failure.causes),
        roles=list(failure.roles),
        message_index=failure.message_index,
        message_role=failure.message_role,
        message_was_last=failure.message_was_last,
        char_index=failure.char_index,
        token_index=failure.token_index,
        buffer_text=failure.expected_text,
        template_text=failure.actual_text,
        buffer_tokens=failure.expected,
        template_tokens=failure.actual,
        detail=failure.detail,
    )


def diagnose(
    setup: CheckSetup,
    messages: list[Message],
    tools: list[dict] | None,
    *,
    step: int,
    roles: list[str],
    joined: Join,
    buffer: list[int],
    buffer_text: str,
    last_prompt_text: str | None,
) -> SessionBreak:
    """The break of a join that was not followed, labelled as the audit labels it.

    ``last_prompt_text`` is the prompt the last sampled turn was generated after: when the template renders
    that turn in history in a way that does not start with it, a divergence inside that prompt is
    ``gen-prompt-mismatch``.
    """
    turn = len(messages)
    context = RolloutContext(setup, Conversation("session", messages, tools), renders={}, alignments={})
    if joined.text_index is None:
        failure = seam_break(context, turn=turn, kind=step_kind(roles), roles=roles, joined=joined)
        return _from_failure(failure, step, SEAM)
    mismatch_from = _prompt_mismatch(context, last_prompt_text, turn - len(roles))
    failure = text_break(
        context,
        turn=turn,
        kind=step_kind(roles),
        roles=roles,
        joined=joined,
        buffer=buffer,
        buffer_text=buffer_text,
        mismatch_from=mismatch_from,
    )
    return _from_failure(failure, step, TEXT)


def _prompt_mismatch(context: RolloutContext, prompt_text: str | None, assistant_end: int) -> int | None:
    """Where the last turn's generation prompt and the template's rendering of that turn part (None: agree)."""
    if prompt_text is None:
        return None
    rendered = context.history(assistant_end)
    if rendered is None or rendered.text.startswith(prompt_text):
        return None
    start = common_prefix_length(prompt_text, rendered.text)
    return token_boundary(rendered.text, start, context.setup.codec.written_added_pattern)


def suffix_break(
    step: int,
    turn: int,
    roles: list[str],
    appended: tuple[list[int], int],
    template: tuple[list[int], int],
    decode_one: Callable[[int], str],
) -> SessionBreak:
    """The break of a step whose bridge, appended without rendering the history (``bridge="auto"``), is not the
    template's bridge at that step: ``appended`` and ``template`` are each (ids, where the bridge starts in them)."""
    (ours, start), (theirs, their_start) = appended, template
    ours_bridge, their_bridge = ours[start:], theirs[their_start:]
    index = common_prefix_length(ours_bridge, their_bridge)
    ours_text, their_text = decode_one_by_one(ours_bridge, decode_one), decode_one_by_one(their_bridge, decode_one)
    char = common_prefix_length(ours_text, their_text)
    return SessionBreak(
        step=step,
        turn=turn,
        aspect=SUFFIX,
        causes=[history_dependent_suffix.NAME],
        roles=roles,
        char_index=char,
        token_index=start + index,
        buffer_text=text_window(ours_text, char),
        template_text=text_window(their_text, char),
        buffer_tokens=token_window(ours, start + index, decode_one),
        template_tokens=token_window(theirs, their_start + index, decode_one),
        detail="expected: the template's bridge after the whole conversation; actual: the bridge the session appended "
        "from the short local render (bridge='auto')",
    )


def decode_one_by_one(ids: list[int], decode_one: Callable[[int], str]) -> str:
    return "".join(decode_one(i) for i in ids)


def refused(step: int, turn: int, roles: list[str], reason: str) -> SessionBreak:
    return SessionBreak(
        step=step, turn=turn, aspect=REFUSED, causes=[template_error.NAME], roles=roles, detail=reason, handled="raised"
    )


class RenderRefused(TitoBreak):
    """The template gave no render to follow, under every policy: it raised (``limit`` is None), or its render ran
    past a limit of the session's (``limit``: ``max_chars`` for the output's length, ``max_bytes`` for the memory
    its operations would take, ``max_seconds`` for the time).
    A server answers it as its own error, whatever its break policy."""

    def __init__(self, details: SessionBreak, limit: str | None = None, reason: str = "") -> None:
        super().__init__(details)
        self.limit = limit
        self.reason = reason or details.detail
        """One line: the limit's own message (``output longer than N characters (raise it with ...)``), or what
        the template raised."""


def render_refused(step: int, turn: int, roles: list[str], exc: RenderError) -> RenderRefused:
    """The break a refused render is (the limit it passed read from the render's own exception)."""
    cause = exc.__cause__
    limit = (
        "max_bytes"
        if isinstance(cause, RenderTooLarge)
        else "max_chars"
        if isinstance(cause, RenderTooLong)
        else "max_seconds"
        if isinstance(cause, RenderTimeout)
        else None
    )
    reason = " ".join(str(cause).split()) if limit is not None else str(exc)
    return RenderRefused(refused(step, turn, roles, str(exc)), limit, reason)
