"""A session's state handed out and taken back (:class:`Restorer`: ``snapshot()``, ``restore()``), with what it was
made with, so that a state is continued only by a session that makes the same.

A state's ids are one tokenizer's, its texts one template's rendering of its messages with one setting of the
template's keyword arguments, its steps checked against one list of tools under one break policy and bridge. A
snapshot restored into a session of another model would read its ids as that model's tokens (and ``finish()`` then
reports a break that is not one); into a session with other tools, its bridges were proved for tools it does not
declare. :attr:`Restorer.origin` writes down what a session makes (hashes, with the model's id to name it), every
snapshot carries it, and :func:`check_restorable` refuses a state whose origin differs, in one line naming what.
"""

from __future__ import annotations

from typing import Any

from tito_audit.errors import BadInputError
from tito_audit.session.settings import SessionSettings
from tito_audit.session.state import SessionState

WHAT = {
    "tokenizer": "another tokenizer",
    "template": "another chat template or template setting",
    "tools": "other tools",
    "on_break": "another on_break policy",
    "bridge": "another bridge",
}
"""What each part of an origin is, in the refusal's words (in the order they are checked)."""


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


class Restorer:
    """What ``snapshot()`` and ``restore()`` of :class:`~tito_audit.session.TitoSession` do with its state: hand out a
    copy with the session's origin, and check a state handed back (the session keeps what this returns)."""

    def __init__(self, settings: SessionSettings) -> None:
        self.settings = settings

    @property
    def origin(self) -> dict[str, str]:
        """What the session makes: its model's tokenizer and template, its tools, its policies."""
        settings = self.settings
        return {
            **settings.machinery.fingerprint,
            "tools": settings.tools_digest,
            "on_break": settings.on_break,
            "bridge": settings.bridge,
        }

    def snapshot(self, state: SessionState) -> SessionState:
        """An independent copy of ``state`` with the session's origin (:meth:`SessionState.copy`)."""
        copied = state.copy()
        copied.origin = self.origin
        return copied

    def restored(self, state: SessionState) -> SessionState:
        """A copy of ``state`` for the session to continue from; refused in one line when it was taken in a session of
        another tokenizer, template, tools or policies."""
        check_restorable(state.origin, self.origin)
        return state.copy()
