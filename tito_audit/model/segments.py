r"""Exact tokenization with a cache of the text between added tokens.

A fast tokenizer first splits its input on added tokens (``<|im_start|>``, ``<tool_call>``, ...) and
tokenizes each piece between them on its own. Prefix renders of one conversation share almost every
piece, so caching the pieces turns the quadratic cost of tokenizing every prefix into a linear one.

Added tokens that strip the whitespace beside them (``lstrip``/``rstrip``: Phi-4's ``<|im_start|>`` takes
every space and newline on both sides) are cut the way the tokenizer cuts them: the token is found first
(leftmost, longest), then grows over the whitespace to its left (never into what the previous token took) and
to its right; that whitespace belongs to the token and yields no id of its own. Whitespace is Unicode's
White_Space, as the tokenizer's ``\s`` means it (Python's ``str.isspace`` also counts U+001C..U+001F).

The equivalence holds only for tokenizers whose pre-tokenizer treats every piece alike; the encoder checks
itself against the full tokenizer on its first batches and on every ``verify_every``-th batch, and switches
itself off for good at the first difference, so its output is always what the tokenizer itself gives.
"""

from __future__ import annotations

import re
import sys
from array import array
from collections.abc import Callable, Sequence
from typing import TypeAlias

WHITE_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    chr(c) for c in range(0x2000, 0x200B)
)
"""Unicode's White_Space characters: what an added token's lstrip/rstrip takes."""
MAX_CACHED_PIECES = 200_000
"""Pieces kept between batches; past it the cache starts again (a batch keeps what it looked up, so a piece
evicted in the middle of a batch is never read back from the cache)."""
MAX_CACHED_BYTES = 64 << 20
"""The memory the kept pieces may take (their text and ids); past it the cache starts again. A piece that would take
more than a quarter of it is not kept (it is tokenized again when asked for)."""
PACKED_FROM = 1024
"""A piece of this many ids or more is kept packed (4 bytes an id, :class:`array.array`) rather than as a tuple (36
bytes an id: the slot and the int object, ids past 256 not being shared): a 1.9 M-character message takes 4 MB
instead of 19. Shorter pieces, the many that audits look up, stay tuples, the fastest to append."""
FORGOTTEN_FROM = 16_384
""":meth:`SegmentedEncoder.forget` drops the pieces of a text this long or longer (shorter ones, a system prompt,
the role headers, are shared by many texts and cost little)."""


class SegmentedEncoder:
    def __init__(
        self,
        added: dict[str, int],
        encode_batch: Callable[[list[str]], list[list[int]]],
        *,
        strips: dict[str, tuple[bool, bool]] | None = None,
        verify_first: int = 16,
        verify_every: int = 64,
    ) -> None:
        """``strips``: for the added tokens that strip whitespace, whether they strip it on the left and on the
        right (tokens not named strip none)."""
        self._ids = dict(added)
        texts = sorted(added, key=len, reverse=True)
        self._pattern = re.compile("(" + "|".join(re.escape(t) for t in texts) + ")") if texts else None
        self._strips = {text: sides for text, sides in (strips or {}).items() if text in added and any(sides)}
        self._encode_batch = encode_batch
        self._cache: dict[str, Ids] = {}
        self._cached_bytes = 0
        self._batches = 0
        self._verify_first = verify_first
        self._verify_every = verify_every
        self.enabled = True

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        if not self.enabled or self._pattern is None:
            return self._encode_batch(list(texts))
        split = [self._split(text) for text in texts]
        # the pieces of this batch are looked up once, before any eviction: what was cached a moment ago and what
        # is encoded now are both in ``found``, whatever the bound evicts from the cache afterwards
        cache = self._cache
        found: dict[str, Ids] = {}
        missing: set[str] = set()
        for piece in {piece for pieces in split for piece in pieces[0::2]}:
            kept = cache.get(piece)
            if kept is not None:
                found[piece] = kept
            elif piece:
                missing.add(piece)
        if missing:
            fresh = sorted(missing)
            encoded = [_kept(ids) for ids in self._encode_batch(fresh)]
            sizes = [_cost(piece, ids) for piece, ids in zip(fresh, encoded, strict=True)]
            kept_bytes = sum(size for size in sizes if size <= MAX_CACHED_BYTES // 4)
            if len(cache) + len(fresh) > MAX_CACHED_PIECES or self._cached_bytes + kept_bytes > MAX_CACHED_BYTES:
                cache.clear()  # the pieces this batch needs are in ``found``; the newest are kept below
                self._cached_bytes = 0
            for piece, piece_ids, size in zip(fresh, encoded, sizes, strict=True):
                found[piece] = piece_ids
                if size <= MAX_CACHED_BYTES // 4:
                    cache[piece] = piece_ids
                    self._cached_bytes += size
        found[""] = ()
        token_ids = self._ids
        out: list[list[int]] = []
        for pieces in split:
            ids: list[int] = []
            for piece, token in zip(pieces[0::2], pieces[1::2], strict=False):
                ids += found[piece]
                ids.append(token_ids[token])
            ids += found[pieces[-1]]
            out.append(ids)
        self._batches += 1
        if self._batches <= self._verify_first or self._batches % self._verify_every == 0:
            longest = max(range(len(texts)), key=lambda i: len(texts[i]), default=None)
            if longest is not None and self._encode_batch([texts[longest]])[0] != out[longest]:
                self.enabled = False
                return self._encode_batch(list(texts))
        return out

    def forget(self, text: str) -> None:
        """Drop the long pieces of ``text`` from the cache (a session that ends gives its memory back)."""
        if self._pattern is None:
            return
        for piece in self._split(text)[0::2]:
            if len(piece) >= FORGOTTEN_FROM:
                ids = self._cache.pop(piece, None)
                if ids is not None:
                    self._cached_bytes -= _cost(piece, ids)

    def _split(self, text: str) -> list[str]:
        """``text`` as ``[piece, token, piece, token, ..., piece]`` (as ``re.split`` with a group gives it), the
        whitespace a stripping token takes left out of the pieces beside it."""
        assert self._pattern is not None
        if not self._strips:
            return self._pattern.split(text)
        out: list[str] = []
        taken = 0  # where the previous token (and the whitespace it took) ends
        for match in self._pattern.finditer(text):
            start, stop = match.span()
            left, right = self._strips.get(match.group(0), (False, False))
            if left:
                while start > taken and text[start - 1] in WHITE_SPACE:
                    start -= 1
            if right:
                while stop < len(text) and text[stop] in WHITE_SPACE:
                    stop += 1
            out += [text[taken:start], match.group(0)]
            taken = stop
        out.append(text[taken:])
        return out


Ids: TypeAlias = "tuple[int, ...] | array[int]"
"""A piece's ids as kept: a tuple, or packed (see :data:`PACKED_FROM`)."""


def _kept(ids: list[int]) -> Ids:
    return array("I", ids) if len(ids) >= PACKED_FROM else tuple(ids)


def _cost(piece: str, ids: Ids) -> int:
    return sys.getsizeof(piece) + sys.getsizeof(ids) + (28 * len(ids) if isinstance(ids, tuple) else 0)
