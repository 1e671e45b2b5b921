"""What a session's steps change, in one object: :class:`SessionState`.

:class:`~tito_audit.session.TitoSession` owns one and is the only code that replaces it: a step changes it in place
(the buffer's step operations, :mod:`~tito_audit.session.steps`, and the ``bridge="auto"`` steps,
:mod:`~tito_audit.session.deferred`), :meth:`~tito_audit.session.TitoSession.snapshot` hands out an independent copy
(what :meth:`~tito_audit.session.TitoSession.fork` gives its copy), and
:meth:`~tito_audit.session.TitoSession.restore` takes one back (a server's stored session,
:mod:`~tito_audit.session.snapshot`). Everything else a session holds is fixed at creation (the model's machinery,
tools, policies, clock) or a cache of something fixed there.

:meth:`SessionState.copy` costs what the conversation's messages and turns count, not what its tokens do: the lists
with one entry per token are shared with the copy, which appends to a tail of its own
(:mod:`~tito_audit.session.shared_list`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields, replace
from typing import Any, NamedTuple

from tito_audit.conversations.conversation import Message
from tito_audit.session.breaks import SessionBreak
from tito_audit.session.buffer_logprobs import Logprobs
from tito_audit.session.shared_list import INTS, OPTIONAL_FLOATS, AppendOnly
from tito_audit.session.turn_records import SessionTurn

NEW, OPEN, FINISHED = "new", "open", "finished"
"""A session's phases: before :meth:`~tito_audit.session.TitoSession.start`, between it and ``finish``, after."""

DecodeKey = tuple[int, int, tuple[int, ...]]
"""A completion as a step reads it: the buffer's length, the steps taken and the completion's ids."""


class PendingStep(NamedTuple):
    """A step bridged from the local render and not yet covered by a render of the whole conversation."""

    step: int
    assistant: int
    """Index of the step's assistant message."""
    messages: int
    """Messages of the conversation once the step is appended (the next prompt renders them)."""
    text_start: int
    """Where the completion starts in the text (the text before it is the prompt it was sampled after)."""
    text_end: int
    """Where the completion ends in the text (the bridge starts there)."""
    completion_start: int
    completion_end: int
    bridge_end: int


PER_TOKEN = {"buffer": INTS, "mask": INTS, "logprobs": OPTIONAL_FLOATS, "view_ids": INTS}
"""The state's lists with one entry per token, and what their items are: a copy shares them."""


@dataclass
class SessionState:
    """One session's buffer and everything recorded with it (see the module docstring)."""

    messages: list[Message] = field(default_factory=list)
    buffer: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    """1 on every sampled id of the buffer, 0 on what the template wrote."""
    logprobs: Logprobs = field(default_factory=list)
    view_ids: list[int] = field(default_factory=list)
    """The template's view of the buffer: equal to the buffer until a ``warn`` break keeps text the template would
    have rewritten; joins are decided on this view."""
    view_text: str = ""
    sampled_spans: list[tuple[int, int]] = field(default_factory=list)
    """Where the sampled completions sit in the buffer now (a re-render moves or drops them)."""
    turns: list[SessionTurn] = field(default_factory=list)
    breaks: list[SessionBreak] = field(default_factory=list)
    pending: list[PendingStep] = field(default_factory=list)
    """Steps bridged from the short local render that no render of the whole conversation has covered yet."""
    steps: int = 0
    phase: str = NEW
    origin: dict[str, str] | None = None
    """What the session that made this state makes (:mod:`~tito_audit.session.restoring`): set on a snapshot, checked
    by ``restore()``."""
    parsed: tuple[DecodeKey, Message] | None = None
    """The last completion :meth:`~tito_audit.session.TitoSession.parse` parsed, and its message (a cache: the same
    ids at the same point parse once)."""
    decoded: tuple[tuple[DecodeKey, str], ...] = ()
    """The last two completions decoded as they read after the buffer (a cache: a server's stream reads one without
    its stop token, its parse with it, and the next step appends it)."""

    def held_bytes(self) -> int:
        """:attr:`~tito_audit.session.TitoSession.held_bytes`: 72 bytes per token of the buffer, 24 per
        log-probability kept, twice the text."""
        floats = len(self.logprobs) - self.logprobs.count(None)
        return 72 * len(self.buffer) + 24 * floats + 2 * sys.getsizeof(self.view_text)

    def copy(self) -> SessionState:
        """An independent copy (see the module docstring); the caches go with it (their keys say where they hold)."""
        # the fields are named by their data (PER_TOKEN, the list fields), so their values are Any to replace()
        shared: dict[str, Any] = {name: AppendOnly.of(getattr(self, name), code) for name, code in PER_TOKEN.items()}
        lists: dict[str, Any] = {
            f.name: list(getattr(self, f.name))
            for f in fields(self)
            if f.name not in PER_TOKEN and isinstance(getattr(self, f.name), list)
        }
        return replace(self, **shared, **lists)
