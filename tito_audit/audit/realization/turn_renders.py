"""The prefix renders of a conversation whose turns realization replaces one at a time, each rendered once.

Realization (:mod:`tito_audit.audit.realization.realize`) walks the assistant turns in order and may replace a turn's
reasoning form by one its prompt admits; every render of a prefix that holds that turn is then out of date. Rendering
all of them again at each replacement, while the form is tried, costs a conversation whose every turn is replaced
about ``3n²/2`` renders of its longest prefixes instead of ``3n``: under Qwen3.6's thinking prompt the real
trajectories' turns are all replaced, and their audit spent 49 of its 72 seconds on 49,794 such renders.

:class:`TurnRenders` renders, when a form is tried, the prefixes up to the next assistant turn (where the next
replacement may happen), and the later ones when the walk reads them. Whether the template renders the form is asked
of those prefixes. A later prefix it refuses (one holding a turn after the next, in its form as generated) raises
:class:`LaterRefusal`: the walk is then made again the thorough way, every later prefix rendered while each form is
tried, as it was before this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tito_audit.conversations.conversation import Message

Key = tuple[int, bool]
"""A prefix to render: ``(k, gp)`` is ``messages[:k]``, with the generation prompt when ``gp``."""
RenderPrefixes = Callable[[Sequence[Message], "list[dict] | None", Sequence[Key]], Mapping[Key, object]]


class LaterRefusal(Exception):
    """The template refused a prefix rendered after a turn's form was chosen: choose again, seeing every prefix."""


class TurnRenders:
    """``renders`` (``(k, gp)`` → the render of ``messages[:k]``, updated in place) kept current for a conversation
    whose turns are replaced in order. ``thorough``: every later prefix rendered as a form is tried."""

    def __init__(
        self, renders: dict[Key, Any], render_prefixes: RenderPrefixes, turns: Sequence[int], thorough: bool
    ) -> None:
        self.renders = renders
        self._keys = list(renders)
        self._render = render_prefixes
        self._turns = sorted(turns)
        self._thorough = thorough
        self._stale: set[Key] = set()

    def try_form(self, j: int, messages: Sequence[Message], tools: list[dict] | None) -> bool:
        """Whether the template renders ``messages`` (turn ``j`` replaced) up to the next assistant turn, or to the
        end when thorough; if so those renders are kept, and the later ones are rendered when read."""
        later = [key for key in self._keys if key[0] > j]
        bound = math.inf if self._thorough else next((t for t in self._turns if t > j), math.inf)
        now = [key for key in later if key[0] <= bound]
        try:
            rendered = self._render(messages, tools, now)
        except Exception:  # the template refuses this form (or stops on it): the walk tries the next one
            return False
        for key in later:
            self.renders.pop(key, None)  # never read out of date
        self.renders.update(rendered)
        self._stale = {key for key in self._stale if key[0] <= j} | (set(later) - set(now))
        return True

    def ensure(self, keys: Sequence[Key], messages: Sequence[Message], tools: list[dict] | None) -> None:
        """Render those of ``keys`` not rendered since the last replacement (:class:`LaterRefusal` when the template
        refuses one)."""
        missing = [key for key in keys if key in self._stale]
        if not missing:
            return
        try:
            rendered = self._render(messages, tools, missing)
        except Exception as exc:
            raise LaterRefusal(str(exc)) from exc
        self.renders.update(rendered)
        self._stale.difference_update(missing)

    def finish(self, messages: Sequence[Message], tools: list[dict] | None) -> None:
        """Every prefix the walk was given rendered for ``messages``, in the order it was given."""
        self.ensure(sorted(self._stale), messages, tools)
        ordered = {key: self.renders[key] for key in self._keys}
        self.renders.clear()
        self.renders.update(ordered)
