"""JSON for large answers (a session's record: tens of MB for a long session with many branches), made piece by
piece on the event loop, so that other requests (``/healthz``, other sessions' turns) are answered between pieces.

``json.dumps`` of a whole record holds the event loop from start to end; :func:`json_stream` encodes each long list
in slices of :data:`SLICE` items and each object member by member, and lets the loop run other requests every
:data:`CHUNK` bytes or so (a millisecond of work or two). The text is the one ``json.dumps(value,
ensure_ascii=False, separators=(",", ":"), allow_nan=False)`` writes (Starlette's ``JSONResponse``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

SLICE = 4096
"""Items of a list encoded in one call (a few hundred microseconds of ids)."""
CHUNK = 1 << 16
"""Bytes of JSON made between two turns of the event loop's other requests."""

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


async def json_stream(value: Any) -> AsyncIterator[bytes]:
    """``value`` as compact UTF-8 JSON in chunks of about :data:`CHUNK` bytes, the event loop free between two."""
    pieces: list[str] = []
    size = 0
    for piece in _pieces(value):
        pieces.append(piece)
        size += len(piece)
        if size >= CHUNK:
            yield "".join(pieces).encode("utf-8")
            pieces, size = [], 0
            await asyncio.sleep(0)  # sending a chunk need not wait: let the other requests in
    yield "".join(pieces).encode("utf-8")


def _pieces(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        yield "{"
        for number, (key, item) in enumerate(value.items()):
            yield ("," if number else "") + _encode(str(key)) + ":"
            yield from _pieces(item)
        yield "}"
    elif isinstance(value, (list, tuple)):
        yield "["
        if value and isinstance(value[0], (dict, list, tuple)):  # the record's lists hold one kind of item each
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
