"""What a session is made with, in one object its parts read: :class:`SessionSettings`.

:class:`~tito_audit.session.TitoSession` owns one settings object and three parts, each with one job on its one
:class:`~tito_audit.session.state.SessionState`:

- :class:`~tito_audit.session.steps.BufferSteps`: the buffer's step operations;
- :class:`~tito_audit.session.deferred.DeferredChecks`: the ``bridge="auto"`` steps and their later check;
- :class:`~tito_audit.session.restoring.Restorer`: the state handed out and taken back, with its origin.

The parts read the settings and change only the state each call hands them; the session alone replaces its state,
and a fork gets its own settings and parts. The session's attributes of the same names (``on_break``, ``bridge``,
``check_every``, ``clock``) read and write these settings (:class:`Setting`), so a caller that sets ``session.clock``
is seen by every part at its next call.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar, overload

from tito_audit.conversations.conversation import clone_data
from tito_audit.session.inputs import check_text
from tito_audit.session.machinery import Machinery
from tito_audit.session.policies import BRIDGES, POLICIES, Bridge, OnBreak

T = TypeVar("T")


@dataclass
class SessionSettings:
    """One session's model and settings (see the module docstring); a fork gets a copy of its own."""

    machinery: Machinery
    tools: list[dict] | None
    tools_digest: str
    """The tools, hashed (part of the session's origin: :mod:`~tito_audit.session.restoring`)."""
    on_break: OnBreak
    bridge: Bridge
    check_every: int
    clock: datetime

    @classmethod
    def made(
        cls,
        machinery: Machinery,
        tools: list[dict] | None,
        on_break: OnBreak,
        bridge: Bridge,
        check_every: int,
        clock: datetime | None,
    ) -> SessionSettings:
        """The settings a session is created with, checked (bad input: :class:`ValueError` naming the argument); the
        tools are copied, the clock is now (to the second) unless given."""
        if on_break not in POLICIES:
            raise ValueError(f"on_break must be one of {', '.join(POLICIES)}, not {on_break!r}")
        if bridge not in BRIDGES:
            raise ValueError(f"bridge must be one of {', '.join(BRIDGES)}, not {bridge!r}")
        if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 0:
            raise ValueError(f"check_every must be a whole number of steps, 0 or more, not {check_every!r}")
        check_text([], tools)
        copied = clone_data(tools) if tools is not None else None
        clock = clock or datetime.now().replace(microsecond=0)
        return cls(machinery, copied, tools_digest(copied), on_break, bridge, check_every, clock)


def tools_digest(tools: list[dict] | None) -> str:
    """The tools a session declares, hashed (part of its origin)."""
    return hashlib.sha256(json.dumps(tools, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:32]


class Setting(Generic[T]):
    """A session attribute that is one of its :class:`SessionSettings`' fields, by the same name (read and written
    there: the owner keeps its settings in ``_settings``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, owner: None, kind: type) -> Setting[T]: ...
    @overload
    def __get__(self, owner: Any, kind: type) -> T: ...
    def __get__(self, owner: Any, kind: type) -> Setting[T] | T:
        return self if owner is None else getattr(owner._settings, self.name)

    def __set__(self, owner: Any, value: T) -> None:
        setattr(owner._settings, self.name, value)
