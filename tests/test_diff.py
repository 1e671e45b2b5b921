"""Property tests of the divergence locator and the mismatch counter."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tito_audit.audit.core.diff import (
    common_prefix_length,
    first_difference,
    is_prefix,
    mismatched_positions,
    token_window,
)

token_lists = st.lists(st.integers(min_value=0, max_value=6), max_size=40)


def naive_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@settings(max_examples=300)
@given(a=token_lists, b=token_lists)
def test_common_prefix_matches_naive(a, b):
    assert common_prefix_length(a, b) == naive_prefix(a, b)


@settings(max_examples=200)
@given(a=st.text(max_size=30), b=st.text(max_size=30))
def test_common_prefix_on_text(a, b):
    assert common_prefix_length(a, b) == naive_prefix(a, b)


@settings(max_examples=300)
@given(a=token_lists, b=token_lists)
def test_first_difference_locates_the_break(a, b):
    index = first_difference(a, b)
    if index is None:
        assert b[: len(a)] == a
    else:
        assert a[:index] == b[:index]
        assert index == len(b) or (index < len(a) and (index >= len(b) or a[index] != b[index]))
    assert (index is None) == is_prefix(a, b)


@settings(max_examples=200)
@given(a=token_lists, extra=token_lists)
def test_prefix_then_append_has_no_difference(a, extra):
    assert first_difference(a, a + extra) is None


@settings(max_examples=300)
@given(a=token_lists, b=token_lists)
def test_mismatch_count_bounds(a, b):
    count = mismatched_positions(a, b)
    assert (count == 0) == (a == b)
    assert count <= max(len(a), len(b))
    assert count >= abs(len(a) - len(b))


@settings(max_examples=200)
@given(a=token_lists, position=st.integers(min_value=0, max_value=40), replacement=st.integers(10, 20))
def test_one_substitution_counts_one(a, position, replacement):
    if not a:
        return
    position %= len(a)
    b = list(a)
    b[position] = replacement
    assert mismatched_positions(a, b) == 1


@settings(max_examples=100)
@given(ids=st.lists(st.integers(0, 50), min_size=1, max_size=30), index=st.integers(0, 29))
def test_token_window_contains_the_index(ids, index):
    index %= len(ids)
    window = token_window(ids, index, lambda i: f"<{i}>", width=3)
    assert window.start <= index < window.start + len(window.ids)
    assert window.ids == ids[window.start : window.start + len(window.ids)]
    assert window.texts == [f"<{i}>" for i in window.ids]
