"""A tokenizer's normalizer, run in Python where its steps are simple ones.

The checks judge text stability on normalized text, and normalize the same long renders again and again (the owner of
a divergence is found by comparing it with every prefix render): the Rust normalizer builds an alignment for every
character each time, which made it more than half of an audit of long real conversations (Qwen3's ``NFC``). Most
normalizers are one of a few simple steps, each written here in one function per kind, from its serialized form:

- ``NFC``, ``NFD``, ``NFKC``, ``NFKD``: text in ASCII is already in every normal form (no character of it
  decomposes or composes); other text goes to the tokenizer's own normalizer;
- ``Replace`` of a string by a string (Gemma's space by ``▁``): ``str.replace``;
- ``Sequence``: its steps in order (an empty one changes nothing).

Any other step (``Lowercase``, ``Prepend``, a regular expression, a precompiled charsmap) leaves the whole normalizer
to the tokenizer. :class:`FastNormalizer` checks the Python result against the tokenizer's own on the first calls and
now and again after, and switches itself off at the first difference (as the renders' and the tokenization's fast
paths do).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Step = Callable[[str], "str | None"]
"""A normalizer step: the normalized text, or None where the tokenizer's own normalizer must do it."""

UNICODE_FORMS = frozenset({"NFC", "NFD", "NFKC", "NFKD"})


def _unicode_form(state: dict[str, Any]) -> Step | None:
    return lambda text: text if text.isascii() else None


def _replace(state: dict[str, Any]) -> Step | None:
    pattern, content = state.get("pattern"), state.get("content")
    if not isinstance(pattern, dict) or set(pattern) != {"String"} or not isinstance(content, str):
        return None  # a regular expression: the tokenizer's own
    old = pattern["String"]
    if not isinstance(old, str) or not old:
        return None
    return lambda text: text.replace(old, content)


def _sequence(state: dict[str, Any]) -> Step | None:
    steps = [step_of(item) for item in state.get("normalizers") or []]
    if any(step is None for step in steps):
        return None
    known = [step for step in steps if step is not None]

    def run(text: str) -> str | None:
        for step in known:
            result = step(text)
            if result is None:
                return None
            text = result
        return text

    return run


def step_of(state: Any) -> Step | None:
    """The Python step for a serialized normalizer (None: not one of the simple kinds)."""
    if not isinstance(state, dict):
        return None
    kind = state.get("type")
    if kind in UNICODE_FORMS:
        return _unicode_form(state)
    if kind == "Replace":
        return _replace(state)
    if kind == "Sequence":
        return _sequence(state)
    return None


class FastNormalizer:
    """A tokenizer's normalizer with its Python equivalent in front (see the module docstring)."""

    VERIFY_FIRST = 24
    VERIFY_EVERY = 50

    def __init__(self, normalizer: Any) -> None:
        self.normalizer = normalizer
        try:
            self._step = step_of(json.loads(normalizer.__getstate__()))
        except (AttributeError, TypeError, ValueError):
            self._step = None
        self._calls = 0

    def __call__(self, text: str) -> str:
        step = self._step
        fast = step(text) if step is not None else None
        if fast is None:
            return str(self.normalizer.normalize_str(text))
        self._calls += 1
        if self._calls <= self.VERIFY_FIRST or self._calls % self.VERIFY_EVERY == 0:
            exact = str(self.normalizer.normalize_str(text))
            if exact != fast:
                self._step = None
                return exact
        return fast
