"""JSON for large answers (a session's record: tens of MB for a long session with many branches), encoded in small
pieces so that the worker thread that encodes it lets the event loop run between them.

``json.dumps`` of a whole record holds the interpreter's lock from start to end (its encoder is C); encoding each
long list in slices of :data:`SLICE` items and each object member by member gives the lock back between pieces,
so other requests (``/healthz``) are answered while a record is being encoded (the gateway builds one record at a
time: several large records at once would take the lock from the event loop in turn, and hold their bytes at once).
The text is the one
``json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)`` writes (Starlette's
``JSONResponse``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

SLICE = 4096
"""Items of a list encoded in one call (a few hundred microseconds of ids)."""
YIELD_EVERY = 16
"""Pieces encoded between two offers of the interpreter's lock (a few milliseconds)."""

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def json_bytes(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON, encoded piece by piece (see the module docstring); the thread offers the
    interpreter's lock to the others every :data:`YIELD_EVERY` pieces."""
    pieces: list[str] = []
    for number, piece in enumerate(_pieces(value), 1):
        pieces.append(piece)
        if number % YIELD_EVERY == 0:
            time.sleep(0)
    return "".join(pieces).encode("utf-8")


def _pieces(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        yield "{"
        for number, (key, item) in enumerate(value.items()):
            yield ("," if number else "") + _encode(str(key)) + ":"
            yield from _pieces(item)
        yield "}"
    elif isinstance(value, (list, tuple)):
        yield "["
        if any(isinstance(item, (dict, list, tuple)) for item in value[:SLICE]):
            for number, item in enumerate(value):
                if number:
                    yield ","
                yield from _pieces(item)
        else:
            for start in range(0, len(value), SLICE):
                yield ("," if start else "") + _encode(list(value[start : start + SLICE]))[1:-1]
        yield "]"
    else:
        yield _encode(value)
