"""The gateway's memory: what a request may reserve for its session, and giving memory back when sessions end.

A session's size is :attr:`~tito_audit.session.TitoSession.held_bytes` (72 bytes per token of its buffer, 24 more
per log-probability kept, plus twice its text: 60 bytes per token were measured for a session of one 1.9 M-character
message before log-probabilities were kept); a request reserves its session's size after the step plus
:data:`TOKEN_BYTES` per token of the completion it asks for (``max_tokens``).
The store refuses a reservation past ``--max-session-bytes`` (413) or past ``--max-total-bytes`` for all sessions
together (507).

Given back: when sessions end (DELETE, expiry, eviction), what the model's shared caches keep for them is dropped
(:meth:`~tito_audit.session.TitoSession.forget`), then the C allocator is asked to return its free memory to the
system (glibc's ``malloc_trim``): Python and the tokenizer free their memory to the allocator, which otherwise
keeps it in its heaps (on main, a session of one 1.9 M-character message left 290 MiB of resident memory behind
after DELETE). Nothing is kept between calls but a function pointer found once at import.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable

MIB = 1 << 20
TOKEN_BYTES = 96
"""What a request reserves per token of the completion it asks for (as :attr:`TitoSession.held_bytes` counts a sampled
token: 72 bytes and its log-probability)."""
DEFAULT_SESSION_BYTES = 256 * MIB
"""``--max-session-bytes``: a session of about 4 million tokens, past any model's context."""
DEFAULT_TOTAL_BYTES = 8 * 1024 * MIB
"""``--max-total-bytes``: the sessions together, a third of a 24 GiB machine (the rest for the tokenizer, renders
under way, the allocator's slack and the system)."""
TRIM_FROM = 8 * MIB
"""Sessions of this much (estimated) ended since the last trim are worth a ``malloc_trim``."""


def _find_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None elsewhere: macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


_MALLOC_TRIM = _find_malloc_trim()


def return_free_memory() -> bool:
    """Ask the C allocator to give its free memory back to the system; whether it could be asked."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


def mib(size: int) -> str:
    return f"{size / MIB:,.1f} MiB"
