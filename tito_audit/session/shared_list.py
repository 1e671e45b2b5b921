"""A list that only grows and is copied in constant time: how a session's per-token lists are shared by its forks.

A server tries each step on a copy of the session (:meth:`~tito_audit.session.TitoSession.fork`) and keeps the copy
when the engine answered. Copying the buffer, the loss mask, the log-probabilities and the template's view of the
buffer would cost as much as the conversation at every step; an :class:`AppendOnly` copy instead shares the first
``len`` items of what it was copied from (which never change: the lists only grow, or are replaced whole) and appends
to a tail of its own. Reads walk the chain of copies from the end, so the last few items (what a step decodes) cost as
much as they hold; reading it all costs what a list copy costs. After :data:`MAX_DEPTH` copies of copies a copy is
made flat again, once.

What a copy appends is kept packed (:class:`array.array`: token ids and mask bits as 8-byte integers, log-probabilities
as doubles with NaN for "none"), 8 bytes an item where a list of ids takes a pointer and, for ids past 256, an integer
object of 28 bytes; and the garbage collector, which walks every list item of a long-lived server at each full
collection, has nothing to walk there.

>>> first = [1, 2, 3]
>>> copy = AppendOnly.of(first, INTS)
>>> copy += [4]
>>> first += [9]
>>> copy.tolist(), first, copy[-2:], len(copy)
([1, 2, 3, 4], [1, 2, 3, 9], [3, 4], 4)
>>> scores = AppendOnly.of([None, -0.5], OPTIONAL_FLOATS)
>>> scores += [None, -1.0]
>>> scores.tolist(), scores.count(None), scores[2]
([None, -0.5, None, -1.0], 2, None)
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

MAX_DEPTH = 64
"""Copies of copies after which a copy is made flat (one packed copy every :data:`MAX_DEPTH` steps of a server)."""
INTS = "q"
"""Token ids, mask bits: packed as 8-byte integers."""
OPTIONAL_FLOATS = "d"
"""Log-probabilities or None: packed as doubles, None as NaN (a log-probability is never NaN)."""


class AppendOnly(Sequence):
    """The first ``base_len`` items of ``base`` (a list, a packed array or another :class:`AppendOnly`, never changed
    there), then a packed tail of its own."""

    __slots__ = ("_base", "_base_len", "_code", "_counted", "_depth", "_tail")

    def __init__(self, code: str, base: Sequence[Any] | None = None, base_len: int = 0, depth: int = 0) -> None:
        self._code = code
        self._base = base
        self._base_len = base_len
        self._depth = depth
        self._tail = array(code)
        self._counted: tuple[Any, int, int, int] | None = None
        """The last :meth:`count`: (value, its count in the shared part, tail items counted, their count)."""

    @classmethod
    def of(cls, values: Sequence[Any], code: str) -> AppendOnly:
        """A copy of ``values`` (a list or an :class:`AppendOnly`) in constant time (or one packed copy after
        :data:`MAX_DEPTH` copies of copies); ``code`` is what its items are (:data:`INTS`, :data:`OPTIONAL_FLOATS`)."""
        depth = values._depth + 1 if isinstance(values, AppendOnly) else 1
        if depth > MAX_DEPTH:
            flat = array(code)
            for piece, packed in (
                values._stored(0, len(values)) if isinstance(values, AppendOnly) else [(values, False)]
            ):
                flat.extend(piece if packed else _packed(piece, code))
            copy = cls(code, flat, len(flat), 1)
        else:
            copy = cls(code, values, len(values), depth)
        if isinstance(values, AppendOnly) and values._counted is not None:
            value, shared, seen, in_tail = values._counted
            if seen == len(values._tail):  # what ``values`` counted covers all of it: the copy starts from there
                copy._counted = (value, shared + in_tail, 0, 0)
        return copy

    def __len__(self) -> int:
        return self._base_len + len(self._tail)

    def __iadd__(self, values: Iterable[Any]) -> AppendOnly:
        self._tail.extend(_packed(values, self._code))
        return self

    def append(self, value: Any) -> None:
        self._tail.extend(_packed([value], self._code))

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
        return self._range(position, position + 1)[0]

    def _stored(self, start: int, stop: int) -> list[tuple[Sequence[Any], bool]]:
        """The parts of items ``start`` to ``stop`` as stored, first first: (part, whether it is packed)."""
        pieces: list[tuple[Sequence[Any], bool]] = []
        node: Any = self
        upto = stop
        while isinstance(node, AppendOnly) and upto > start:
            base_len = node._base_len
            if upto > base_len:
                pieces.append((node._tail[max(start, base_len) - base_len : upto - base_len], True))
                upto = base_len
            node = node._base
        if upto > start and node is not None:
            pieces.append((node[start:upto], isinstance(node, array)))
        pieces.reverse()
        return pieces

    def _range(self, start: int, stop: int) -> list[Any]:
        out: list[Any] = []
        for piece, packed in self._stored(start, stop):
            out += _unpacked(piece, self._code) if packed else piece
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
            elif base is None:
                shared = 0
            elif isinstance(base, array):
                shared = _count_packed(base[: self._base_len], value, self._code)
            else:
                shared = base[: self._base_len].count(value)
            counted = (value, shared, 0, 0)
        _, shared, seen, in_tail = counted
        in_tail += _count_packed(self._tail[seen:], value, self._code)
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


def _packed(values: Iterable[Any], code: str) -> Iterable[Any]:
    if code == OPTIONAL_FLOATS:
        return [math.nan if value is None else value for value in values]
    return values


def _unpacked(piece: Sequence[Any], code: str) -> list[Any]:
    if code == OPTIONAL_FLOATS:
        return [None if value != value else value for value in piece]
    return piece.tolist() if isinstance(piece, array) else list(piece)


def _count_packed(piece: Sequence[Any], value: Any, code: str) -> int:
    if code == OPTIONAL_FLOATS and value is None:
        return sum(1 for item in piece if item != item)
    return piece.count(value)


def as_list(values: Sequence[Any]) -> list[Any]:
    """A plain list of ``values`` (a copy)."""
    return values.tolist() if isinstance(values, AppendOnly) else list(values)
