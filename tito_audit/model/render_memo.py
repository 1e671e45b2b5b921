"""Renders remembered for one loaded model, across the renderers that audit it and prove its fixes.

An audit renders a prefix from the same message objects, or from equal ones, more than once: the engines' parsers
giving a message back, a conversation walked again with one message changed. A way-out search renders every prefix of
the generated conversations again for each proof (the template against a patched one, a patched one against its
folded form, the serving form against each training form), and a template that refuses tool conversations refuses
each of them again, at the cost of a render each time. A :class:`RenderMemo` on the loaded model keeps, for the
renderers that ask for it, each prefix's text, or the template's refusal, by what the template reads: its source, its
keyword arguments, the clock ``strftime_now`` reads, the prepared messages and tools (each by its ``repr``: plain JSON
types, so equal ``repr`` means equal data, types and key order alike) and the generation prompt. Only what the
template itself decides is kept: a render stopped by a limit (time, length, recursion) is not, nor a render outside a
frozen clock (it reads the time).

Bounded in characters and entries (the least recently used go first), shared by threads under a lock, given back with
the loaded model.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

TemplateKey = tuple[str, str]
"""(template source, keyword arguments and limits): the renders of one template under one set of settings."""
RenderKey = tuple[str, str, str, str, bool, tuple[str, ...]]
"""(template source, keyword arguments and limits, the frozen clock, tools, generation prompt, each prepared message of
the prefix)."""


@dataclass(frozen=True)
class Refused:
    """The template refused the prefix (it raised): the one-line reason it gave."""

    reason: str


class RenderMemo:
    """Texts and refusals by :data:`RenderKey` (see the module docstring)."""

    MAX_ENTRIES = 60_000
    MAX_CHARS = 24_000_000

    def __init__(self, max_entries: int = MAX_ENTRIES, max_chars: int = MAX_CHARS) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._entries: OrderedDict[RenderKey, str | Refused] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self._counts: dict[TemplateKey, int] = {}
        self._off: set[TemplateKey] = set()

    MAX_COUNTED = 1024
    """Templates whose calls are counted (past it the counts start again: more calls are checked, none fewer)."""

    def count(self, template: TemplateKey) -> int:
        """One more call for ``template`` (its source, and its settings and limits); how many so far."""
        with self._lock:
            if template not in self._counts and len(self._counts) >= self.MAX_COUNTED:
                self._counts.clear()
            count = self._counts[template] = self._counts.get(template, 0) + 1
            return count

    def switch_off(self, template: TemplateKey) -> None:
        """The direct path rendered ``template`` unlike ``apply_chat_template``: forget its renders (any may be wrong)
        and tell every renderer that shares this memory to render it the slow way."""
        with self._lock:
            self._off.add(template)
            for key in [key for key in self._entries if key[:2] == template]:
                self._chars -= _chars(self._entries.pop(key))

    def is_off(self, template: TemplateKey) -> bool:
        with self._lock:
            return template in self._off

    def get(self, key: RenderKey) -> str | Refused | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: RenderKey, value: str | Refused) -> None:
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = value
            self._chars += _chars(value)
            while self._entries and (len(self._entries) > self.max_entries or self._chars > self.max_chars):
                _, dropped = self._entries.popitem(last=False)
                self._chars -= _chars(dropped)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0
            self._counts.clear()


def _chars(value: str | Refused) -> int:
    return len(value) if isinstance(value, str) else len(value.reason)
