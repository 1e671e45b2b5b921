"""Exact tokenization with a cache of the text between added tokens.

A fast tokenizer first splits its input on added tokens (``<|im_start|>``, ``<tool_call>``, ...) and
tokenizes each piece between them on its own. Prefix renders of one conversation share almost every
piece, so caching the pieces turns the quadratic cost of tokenizing every prefix into a linear one.

The equivalence holds only for tokenizers whose added tokens strip no neighbouring whitespace and whose
pre-tokenizer treats every piece alike; the encoder checks itself against the full tokenizer on its
first batches and on every ``verify_every``-th batch, and switches itself off for good at the first
difference, so its output is always what the tokenizer itself gives.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

MAX_CACHED_PIECES = 200_000
"""Pieces kept between batches; past it the cache starts again (a batch keeps what it looked up, so a piece
evicted in the middle of a batch is never read back from the cache)."""


class SegmentedEncoder:
    def __init__(
        self,
        added: dict[str, int],
        encode_batch: Callable[[list[str]], list[list[int]]],
        *,
        verify_first: int = 16,
        verify_every: int = 64,
    ) -> None:
        self._ids = dict(added)
        texts = sorted(added, key=len, reverse=True)
        self._pattern = re.compile("(" + "|".join(re.escape(t) for t in texts) + ")") if texts else None
        self._encode_batch = encode_batch
        self._cache: dict[str, tuple[int, ...]] = {}
        self._batches = 0
        self._verify_first = verify_first
        self._verify_every = verify_every
        self.enabled = True

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        if not self.enabled or self._pattern is None:
            return self._encode_batch(list(texts))
        split = [self._pattern.split(text) for text in texts]
        # the pieces of this batch are looked up once, before any eviction: what was cached a moment ago and what
        # is encoded now are both in ``found``, whatever the bound evicts from the cache afterwards
        cache = self._cache
        found: dict[str, tuple[int, ...]] = {}
        missing: set[str] = set()
        for pieces in split:
            for piece in pieces[0::2]:
                if piece and piece not in found:
                    kept = cache.get(piece)
                    if kept is None:
                        missing.add(piece)
                    else:
                        found[piece] = kept
        if missing:
            fresh = sorted(missing)
            if len(cache) + len(fresh) > MAX_CACHED_PIECES:
                cache.clear()  # the pieces this batch needs are in ``found``; the newest are kept below
            for piece, ids in zip(fresh, self._encode_batch(fresh), strict=True):
                found[piece] = cache[piece] = tuple(ids)
        out = []
        for pieces in split:
            ids: list[int] = []
            for position, piece in enumerate(pieces):
                if position % 2:
                    ids.append(self._ids[piece])
                elif piece:
                    ids.extend(found[piece])
            out.append(ids)
        self._batches += 1
        if self._batches <= self._verify_first or self._batches % self._verify_every == 0:
            longest = max(range(len(texts)), key=lambda i: len(texts[i]), default=None)
            if longest is not None and self._encode_batch([texts[longest]])[0] != out[longest]:
                self.enabled = False
                return self._encode_batch(list(texts))
        return out
