"""The log-probabilities of the sampled ids, kept beside the buffer: one entry per buffer position, a number where the
engine sampled the id and gave its log-probability, ``None`` on everything the template wrote (the prompt, the
bridges) and on sampled ids given without one.

Importance-sampling corrections (TRL's ``rollout_func`` ``logprobs``, slime's rollout log-probs, verl's truncated
importance sampling) need the sampling engine's log-probability of each sampled token; the session takes them with
the sampled ids (``extend(ids, ..., logprobs=...)``, ``finish(ids, ..., logprobs=...)``) and moves them with the ids:
after a bridge they stay where they were, and on a re-render (``on_break="rerender"``) they follow the loss mask:
kept where the sampled ids survive unchanged in the template's render, ``None`` everywhere else. So a number stands
only where the loss mask is 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tito_audit.errors import BadInputError

SLACK = 1e-3
"""How far above 0 a log-probability may be (an engine's rounding: ``log_softmax`` of the top token in float16)."""

Logprobs = list[float | None]


def sampled_logprobs(value: Any, completion: list[int] | None, what: str = "logprobs") -> Logprobs | None:
    """``value`` checked against ``completion``: None, or one entry per sampled id, each a finite number at most 0
    (or None where the engine gave none); anything else is :class:`BadInputError` naming the position."""
    if value is None:
        return None
    if completion is None:
        raise BadInputError(f"{what} given for a turn without completion_ids (an unsampled turn has none)")
    if isinstance(value, (str, bytes, bytearray, dict)):
        raise BadInputError(f"{what} must be a sequence of numbers, not {type(value).__name__}")
    tolist = getattr(value, "tolist", None)  # numpy arrays, torch tensors
    try:
        items = tolist() if callable(tolist) and not isinstance(value, (list, tuple)) else list(value)
    except TypeError:
        raise BadInputError(f"{what} must be a sequence of numbers, not {type(value).__name__}") from None
    if not isinstance(items, list):
        raise BadInputError(f"{what} must be a sequence of numbers, not a single {type(value).__name__} value")
    if len(items) != len(completion):
        raise BadInputError(f"{what} has {len(items)} values for {len(completion)} sampled ids: give one per id")
    return [_one(item, f"{what}[{position}]") for position, item in enumerate(items)]


def _one(item: Any, where: str) -> float | None:
    if item is None:
        return None
    number = None
    if not isinstance(item, (str, bytes, bytearray)) and type(item).__name__ not in ("bool", "bool_"):
        try:
            number = float(item)  # Python and numpy numbers, 0-d tensors
        except (TypeError, ValueError):
            number = None
    if number is None:
        raise BadInputError(f"{where} is {item!r} ({type(item).__name__}), not a number")
    if not math.isfinite(number) or number > SLACK:
        raise BadInputError(f"{where} is {number!r}, not a log-probability (a finite number at most 0)")
    return min(number, 0.0)


def padded(logprobs: Sequence[float | None] | None, count: int) -> Logprobs:
    """``count`` entries: ``logprobs`` as given, or ``None`` for each sampled id when none were given."""
    return list(logprobs) if logprobs is not None else [None] * count


def carried(values: Sequence[Any], kept: int, placed: Sequence[tuple[int, int, int]], length: int, fill: Any) -> list:
    """``values`` carried onto a re-rendered buffer of ``length`` ids: the first ``kept`` stay, each span
    ``(begin, end, found)`` of the old buffer lands at ``found``, the rest is ``fill``."""
    out = list(values[:kept]) + [fill] * (length - kept)
    for begin, end, found in placed:
        out[found : found + end - begin] = values[begin:end]
    return out
