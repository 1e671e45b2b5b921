"""A list that only grows and is copied in constant time: how a session's per-token lists are shared by its forks.

A server tries each step on a copy of the session (:meth:`~tito_audit.session.TitoSession.fork`) and keeps the copy
when the engine answered. Copying the buffer, the loss mask, the log-probabilities and the template's view of the
buffer would cost as much as the conversation at every step; an :class:`AppendOnly` copy instead shares the first
``len`` items of what it was copied from (which never change: the lists only grow, or are replaced whole) and appends
to a tail of its own. Reads walk the chain of copies from the end, so the last few items (what a step decodes) cost as
much as they hold; reading it all costs what a list copy costs. After :data:`MAX_DEPTH` copies of copies a copy is
made flat again, once.

>>> first = [1, 2, 3]
>>> copy = AppendOnly.of(first)
>>> copy += [4]
>>> first += [9]
>>> copy.tolist(), first, copy[-2:], len(copy)
([1, 2, 3, 4], [1, 2, 3, 9], [3, 4], 4)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

MAX_DEPTH = 64
"""Copies of copies after which a copy is made flat (one list copy every :data:`MAX_DEPTH` steps of a server)."""


class AppendOnly(Sequence):
    """The first ``base_len`` items of ``base`` (a list or another :class:`AppendOnly`, never changed there), then a
    tail of its own."""

    __slots__ = ("_base", "_base_len", "_counted", "_depth", "_tail")

    def __init__(self, base: Sequence[Any] | None = None, base_len: int = 0, depth: int = 0) -> None:
        self._base = base
        self._base_len = base_len
        self._depth = depth
        self._tail: list[Any] = []
        self._counted: tuple[Any, int, int, int] | None = None
        """The last :meth:`count`: (value, its count in the shared part, tail items counted, their count)."""

    @classmethod
    def of(cls, values: Sequence[Any]) -> AppendOnly:
        """A copy of ``values`` (a list or an :class:`AppendOnly`) in constant time (or one flat copy after
        :data:`MAX_DEPTH` copies of copies)."""
        depth = values._depth + 1 if isinstance(values, AppendOnly) else 1
        if depth > MAX_DEPTH:
            flat = values.tolist() if isinstance(values, AppendOnly) else list(values)
            return cls(flat, len(flat), 1)
        return cls(values, len(values), depth)

    def __len__(self) -> int:
        return self._base_len + len(self._tail)

    def __iadd__(self, values: Iterable[Any]) -> AppendOnly:
        self._tail.extend(values)
        return self

    def append(self, value: Any) -> None:
        self._tail.append(value)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return self.tolist()[index]
            return self._range(start, max(start, stop))
        size = len(self)
        position = index + size if index < 0 else index
        if not 0 <= position < size:
            raise IndexError("AppendOnly index out of range")
        node: Any = self
        while isinstance(node, AppendOnly):
            if position >= node._base_len:
                return node._tail[position - node._base_len]
            node = node._base
        return node[position]

    def _pieces(self, start: int, stop: int) -> list[Sequence[Any]]:
        """The parts of items ``start`` to ``stop``, last first."""
        pieces: list[Sequence[Any]] = []
        node: Any = self
        upto = stop
        while isinstance(node, AppendOnly) and upto > start:
            base_len = node._base_len
            if upto > base_len:
                pieces.append(node._tail[max(start, base_len) - base_len : upto - base_len])
                upto = base_len
            node = node._base
        if upto > start and node is not None:
            pieces.append(node[start:upto])
        return pieces

    def _range(self, start: int, stop: int) -> list[Any]:
        out: list[Any] = []
        for piece in reversed(self._pieces(start, stop)):
            out += piece
        return out

    def tolist(self) -> list[Any]:
        return self._range(0, len(self))

    def __iter__(self) -> Iterator[Any]:
        return iter(self.tolist())

    def count(self, value: Any) -> int:
        """How many items equal ``value``; counted again only over what was appended since the last count of the same
        value (what was counted never changes), so a server's size estimate of a session stays cheap."""
        counted = self._counted
        if counted is None or counted[0] is not value:
            base = self._base
            if isinstance(base, AppendOnly) and self._base_len == len(base):
                shared = base.count(value)
            else:
                shared = base[: self._base_len].count(value) if base is not None else 0
            counted = (value, shared, 0, 0)
        _, shared, seen, in_tail = counted
        in_tail += self._tail[seen:].count(value)
        self._counted = (value, shared, len(self._tail), in_tail)
        return shared + in_tail

    def __add__(self, other: Iterable[Any]) -> list[Any]:
        return self.tolist() + list(other)

    def __radd__(self, other: Iterable[Any]) -> list[Any]:
        return list(other) + self.tolist()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AppendOnly | list | tuple):
            return len(self) == len(other) and self.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"AppendOnly({self.tolist()!r})"


def as_list(values: Sequence[Any]) -> list[Any]:
    """A plain list of ``values`` (a copy)."""
    return values.tolist() if isinstance(values, AppendOnly) else list(values)
