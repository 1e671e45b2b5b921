"""Locate where two renders or token sequences part ways, and cut evidence windows around it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from difflib import SequenceMatcher
from typing import TypeVar

from tito_audit.results import TokenWindow

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


def mismatched_positions(buffer: Sequence[int], reference: Sequence[int]) -> int:
    """Tokens of ``reference`` not matched, in order, by ``buffer`` (plus surplus buffer tokens).

    This is the number of positions a trainer that re-tokenizes would train on tokens the model did
    not sample.

    >>> mismatched_positions([1, 2, 3, 4], [1, 2, 3, 4]), mismatched_positions([1, 9, 9, 4], [1, 2, 4])
    (0, 2)
    """
    if list(buffer) == list(reference):
        return 0
    head = common_prefix_length(buffer, reference)
    tail = 0
    while (
        tail < min(len(buffer), len(reference)) - head
        and buffer[len(buffer) - 1 - tail] == reference[len(reference) - 1 - tail]
    ):
        tail += 1
    middle_a = buffer[head : len(buffer) - tail]
    middle_b = reference[head : len(reference) - tail]
    matcher = SequenceMatcher(None, middle_a, middle_b, autojunk=False)
    matched = sum(block.size for block in matcher.get_matching_blocks())
    return max(len(middle_a), len(middle_b)) - matched
