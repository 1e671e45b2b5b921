"""Token ids from callers: any one-dimensional sequence of integers, checked against the vocabulary.

Engines return ids as Python lists, numpy ``int64`` arrays, ``array.array`` or torch tensors; all are accepted.
Anything else is refused saying exactly what is wrong and where (``completion_ids[3] is 10000000, outside the
vocabulary (ids 0..151664)``): an id the tokenizer cannot decode must never reach a training buffer, where it fails
much later in an embedding lookup.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from tito_audit.errors import BadInputError


def token_ids(value: Any, what: str, id_limit: int) -> list[int]:
    """``value`` as a list of Python ints, each in ``0 .. id_limit - 1``; raises :class:`BadInputError` naming
    ``what`` and the position at fault."""
    if isinstance(value, (str, bytes, bytearray, Mapping)) or value is None:
        raise BadInputError(f"{what} must be a sequence of token ids, not {type(value).__name__}")
    tolist = getattr(value, "tolist", None)  # numpy arrays, torch tensors, array.array: plain ints at once
    try:
        items = tolist() if callable(tolist) and not isinstance(value, (list, tuple)) else list(value)
    except TypeError as exc:
        raise BadInputError(f"{what} must be a sequence of token ids, not {type(value).__name__}") from exc
    if not isinstance(items, list):
        raise BadInputError(f"{what} must be a sequence of token ids, not a single {type(value).__name__} value")
    if all(type(item) is int for item in items) and (not items or (min(items) >= 0 and max(items) < id_limit)):
        return items  # the usual case, checked at C speed; the slow path below says what is wrong and where
    return [_one(item, f"{what}[{position}]", id_limit) for position, item in enumerate(items)]


def _one(item: Any, where: str, id_limit: int) -> int:
    if isinstance(item, (list, tuple)):
        raise BadInputError(f"{where} is a sequence: token ids are one-dimensional")
    if type(item).__name__ in ("bool", "bool_"):
        raise BadInputError(f"{where} is a boolean ({item!r}), not a token id")
    try:
        token_id = operator.index(item)
    except TypeError:
        raise BadInputError(f"{where} is {item!r} ({type(item).__name__}), not an integer token id") from None
    if token_id < 0:
        raise BadInputError(f"{where} is {token_id}: token ids are not negative")
    if token_id >= id_limit:
        raise BadInputError(f"{where} is {token_id}, outside the vocabulary (ids 0..{id_limit - 1})")
    return token_id
