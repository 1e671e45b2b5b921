"""A session's state handed out and taken back (:class:`Restoring`: ``snapshot()``, ``restore()``), with what it was
made with, so that a state is continued only by a session that makes the same.

A state's ids are one tokenizer's, its texts one template's rendering of its messages with one setting of the
template's keyword arguments, its steps checked against one list of tools under one break policy and bridge. A
snapshot restored into a session of another model would read its ids as that model's tokens (and ``finish()`` then
reports a break that is not one); into a session with other tools, its bridges were proved for tools it does not
declare. :attr:`Restoring.origin` writes down what a session makes (hashes, with the model's id to name it), every
snapshot carries it, and :func:`check_restorable` refuses a state whose origin differs, in one line naming what.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tito_audit.errors import BadInputError
from tito_audit.session.state import SessionState

WHAT = {
    "tokenizer": "another tokenizer",
    "template": "another chat template or template setting",
    "tools": "other tools",
    "on_break": "another on_break policy",
    "bridge": "another bridge",
}
"""What each part of an origin is, in the refusal's words (in the order they are checked)."""


def tools_digest(tools: list[dict] | None) -> str:
    """The tools a session declares, hashed (part of its origin)."""
    return hashlib.sha256(json.dumps(tools, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:32]


def check_restorable(stored: dict[str, Any] | None, own: dict[str, str]) -> None:
    """Refuse (:class:`~tito_audit.errors.BadInputError`, one line) a state made with another origin than ``own``;
    a state that records none (stored by an earlier version) is taken as it is."""
    if not stored:
        return
    for key, what in WHAT.items():
        if stored.get(key) == own.get(key):
            continue
        if key in ("tokenizer", "template"):
            theirs, ours = stored.get("model", "?"), own.get("model", "?")
            detail = f"it was taken with {theirs}'s, this session has {ours}'s" if theirs != ours else "same model id"
        elif key == "tools":
            detail = "the tools a session declares are fixed when it is made"
        else:
            detail = f"it was taken with {key}={stored.get(key)!r}, this session has {key}={own.get(key)!r}"
        raise BadInputError(f"restore(): the snapshot was taken in a session with {what} ({detail})")


class Restoring:
    """``snapshot()`` and ``restore()`` of :class:`~tito_audit.session.TitoSession` (which sets what they read)."""

    _state: SessionState
    _machinery: Any
    _tools_digest: str
    on_break: str
    bridge: str

    @property
    def origin(self) -> dict[str, str]:
        """What this session makes: its model's tokenizer and template, its tools, its policies."""
        return {
            **self._machinery.fingerprint,
            "tools": self._tools_digest,
            "on_break": self.on_break,
            "bridge": self.bridge,
        }

    def snapshot(self) -> SessionState:
        """An independent copy of the session's state now, with its origin (:meth:`restore` takes it back;
        :meth:`SessionState.copy`)."""
        copied = self._state.copy()
        copied.origin = self.origin
        return copied

    def restore(self, state: SessionState) -> None:
        """Continue from a copy of ``state`` (a :meth:`snapshot`, or one stored: :mod:`tito_audit.session.snapshot`);
        refused in one line when it was taken in a session of another tokenizer, template, tools or policies."""
        check_restorable(state.origin, self.origin)
        self._state = state.copy()

    @property
    def state(self) -> SessionState:
        """The session's state itself, for code that reads it at every step (:mod:`tito_audit.session.snapshot`): read
        it, never change it (:meth:`snapshot` for a copy)."""
        return self._state
