"""Locate where two renders or token sequences part ways, and cut evidence windows around it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from tito_audit.audit.results import TokenWindow

T = TypeVar("T")

WINDOW_TOKENS = 6
WINDOW_CHARS = 80


def common_prefix_length(a: Sequence[T], b: Sequence[T]) -> int:
    """Length of the longest common prefix of two sequences (strings or id lists).

    >>> common_prefix_length("abcd", "abxd"), common_prefix_length([1, 2], [1, 2, 3])
    (2, 2)
    """
    limit = min(len(a), len(b))
    if a[:limit] == b[:limit]:
        return limit
    low, high = 0, limit  # invariant: a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


def is_prefix(prefix: Sequence[T], whole: Sequence[T]) -> bool:
    return len(prefix) <= len(whole) and whole[: len(prefix)] == prefix


def first_difference(a: Sequence[T], b: Sequence[T]) -> int | None:
    """Index of the first position where ``a`` is not a prefix of ``b`` (None when it is).

    >>> first_difference([1, 2, 3], [1, 2, 3, 4]) is None, first_difference([1, 5], [1, 2, 3])
    (True, 1)
    """
    if is_prefix(a, b):
        return None
    return common_prefix_length(a, b)


def token_window(
    ids: Sequence[int], index: int, decode_one: Callable[[int], str], width: int = WINDOW_TOKENS
) -> TokenWindow:
    """``width`` tokens either side of ``index`` (clipped), each decoded alone."""
    start = max(0, index - width)
    chunk = list(ids[start : index + width])
    return TokenWindow(start=start, ids=chunk, texts=[decode_one(i) for i in chunk])


def text_window(text: str, index: int, width: int = WINDOW_CHARS) -> str:
    """The text around ``index``: ``width`` characters before and after."""
    return text[max(0, index - width) : index + width]


def mismatched_positions(buffer: Sequence[int], reference: Sequence[int], anchor: int = 4, reach: int = 48) -> int:
    """Positions where ``buffer`` and ``reference`` disagree, aligning them again after each local difference.

    Walks both sequences; after a difference it looks for the nearest place (within ``reach`` tokens on
    each side) where ``anchor`` consecutive tokens agree again and counts the skipped positions (the
    larger side). Differences between a sampled buffer and a re-tokenization are local (a merge at a
    join, a non-canonical split), so this is the number of tokens a trainer that re-tokenizes would train
    on that the model did not sample, in linear time. Without a realignment in reach, the rest counts.

    >>> mismatched_positions([1, 2, 3, 4], [1, 2, 3, 4])
    0
    >>> mismatched_positions([1, 9, 9, 4, 5, 6, 7], [1, 2, 4, 5, 6, 7])
    2
    """
    i = j = mismatched = 0
    n, m = len(buffer), len(reference)
    while i < n and j < m:
        if buffer[i] == reference[j]:
            i += 1
            j += 1
            continue
        found = _realign(buffer, reference, i, j, anchor, reach)
        if found is None:
            return mismatched + max(n - i, m - j)
        a, b = found
        mismatched += max(a, b)
        i += a
        j += b
    return mismatched + max(n - i, m - j)


def _realign(
    buffer: Sequence[int], reference: Sequence[int], i: int, j: int, anchor: int, reach: int
) -> tuple[int, int] | None:
    """Skips (a, b) after which ``anchor`` tokens agree (or both sequences end): the fewest skipped positions,
    then the one that leaves the two remainders closest in length (a substitution over a shift).

    A skip that shifts the shorter remainder further behind is never taken: counting ``max(a, b)`` for it and
    then at least the remainders' difference could exceed the positions there are. With that rule the count
    never exceeds ``max(len(buffer), len(reference))``.
    """
    n, m = len(buffer), len(reference)
    grams: dict[tuple[int, ...], list[int]] = {}
    for b in range(min(reach, m - j) + 1):
        grams.setdefault(tuple(reference[j + b : j + b + anchor]), []).append(b)
    best: tuple[int, int] | None = None
    best_key: tuple[int, int, int] | None = None
    for a in range(min(reach, n - i) + 1):
        for b in grams.get(tuple(buffer[i + a : i + a + anchor]), ()):
            rest_buffer, rest_reference = n - i - a, m - j - b
            if (a, b) == (0, 0) or (a - b) * (rest_buffer - rest_reference) < 0:
                continue
            key = (max(a, b), abs(rest_buffer - rest_reference), a + b)
            if best_key is None or key < best_key:
                best, best_key = (a, b), key
    return best
