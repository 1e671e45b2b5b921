"""Token-level view of a tokenizer: canonical encoding, decoding, control tokens, non-canonical splits.

``encode`` is exactly what ``apply_chat_template(..., tokenize=True)`` does to the rendered text: no
special tokens added (the template writes its own BOS), added tokens matched as single ids.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from tito_audit.model.boundary_types import HFTokenizer
from tito_audit.model.normalizers import FastNormalizer
from tito_audit.model.segments import SegmentedEncoder
from tito_audit.model.threads import cached_property

REPLACEMENT_CHAR = "\ufffd"


class TokenCodec:
    """Encode/decode with one tokenizer, plus the vocabulary facts the checks need."""

    def __init__(
        self, tokenizer: HFTokenizer, *, piecewise_control_tokens: bool = False, template_source: str | None = None
    ) -> None:
        """``template_source``: when given, text is cut for the tokenization cache only at the added tokens the
        template writes (thousands of unused added tokens make a slow pattern and never occur)."""
        self._template_source = template_source
        self.tokenizer = tokenizer
        self._rust = getattr(tokenizer, "_tokenizer", None)
        self._piecewise = piecewise_control_tokens
        self.piecewise = piecewise_control_tokens
        """True for backends that tokenize message by message (mistral-common)."""
        self._split_cache: dict[int, tuple[int, ...] | None] = {}
        self._segmented: SegmentedEncoder | None = None

    # -- encoding -----------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self.encode_many([text])[0]

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """Canonical ids of each text (batched through the Rust tokenizer when there is one)."""
        if self._piecewise:
            return [self._encode_piecewise(t) for t in texts]
        if self._rust is not None:
            return self._segments.encode_many(texts)
        return [list(self.tokenizer.encode(t, add_special_tokens=False)) for t in texts]

    def forget(self, text: str) -> None:
        """Drop the long pieces of ``text`` from the tokenization cache (see :meth:`SegmentedEncoder.forget`)."""
        if self._segmented is not None:
            self._segmented.forget(text)

    def _full_encode(self, texts: list[str]) -> list[list[int]]:
        return self._rust_encode(texts, split_special=bool(getattr(self.tokenizer, "split_special_tokens", False)))

    @property
    def _segments(self) -> SegmentedEncoder:
        """Cached, self-verifying encoding by the pieces between added tokens (see :mod:`tito_audit.model.segments`)."""
        if self._segmented is None:
            # Cut at added tokens that match whole words or not (single-word tokens stay inside the pieces,
            # where the full tokenizer handles them); a token that strips the whitespace beside it takes it
            # with it (see SegmentedEncoder). The template's own added tokens are cut, and so is every added
            # token whose text overlaps one of them: the tokenizer matches added tokens leftmost and longest,
            # so with "\n" and "\n\n" cut, "\n\n\n" (Gemma has all three) must be cut too, or the split
            # would part text the tokenizer keeps whole.
            tokens = {
                getattr(t, "content", str(t)): (int(i), t)
                for i, t in self._added_tokens.items()
                if not getattr(self.tokenizer, "split_special_tokens", False) and not getattr(t, "single_word", False)
            }
            source = self._template_source
            written = [text for text in tokens if source is None or text in source]
            written_set = set(written)
            overlaps = _Overlaps(written)
            cut = [text for text in tokens if text in written_set or overlaps.with_any(text)]
            strips = {
                text: (bool(getattr(tokens[text][1], "lstrip", False)), bool(getattr(tokens[text][1], "rstrip", False)))
                for text in cut
            }
            added = {text: tokens[text][0] for text in cut}
            self._segmented = SegmentedEncoder(added, self._full_encode, strips=strips)
            self._segmented.enabled = bool(added)
        return self._segmented

    def _rust_encode(self, texts: Sequence[str], split_special: bool) -> list[list[int]]:
        # The Rust tokenizer keeps `encode_special_tokens` as state (transformers flips it for
        # `split_special_tokens=True`), so set it explicitly on every call.
        rust = self._rust
        assert rust is not None
        if rust.encode_special_tokens != split_special:
            rust.encode_special_tokens = split_special
        return [list(e.ids) for e in rust.encode_batch(list(texts), add_special_tokens=False)]

    def encode_plain(self, text: str) -> list[int]:
        """Ids of ``text`` with control-token strings kept as plain text (never matched as control ids)."""
        if self._piecewise:
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        if self._rust is not None:
            return self._rust_encode([text], split_special=True)[0]
        return list(self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))

    def encode_with_default_specials(self, text: str) -> list[int]:
        """Ids as a trainer calling ``tokenizer(text)`` with default arguments gets them (BOS added)."""
        return list(self.tokenizer.encode(text))

    def _encode_piecewise(self, text: str) -> list[int]:
        """Backends (mistral-common) whose plain ``encode`` treats control-token strings as text."""
        pattern = self._control_pattern
        if pattern is None:
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        ids: list[int] = []
        position = 0
        for match in pattern.finditer(text):
            if match.start() > position:
                ids.extend(self.tokenizer.encode(text[position : match.start()], add_special_tokens=False))
            ids.append(self.control_ids_by_text[match.group(0)])
            position = match.end()
        if position < len(text):
            ids.extend(self.tokenizer.encode(text[position:], add_special_tokens=False))
        return ids

    def normalize(self, text: str) -> str:
        """The tokenizer's normalizer applied to ``text`` (identity when it has none).

        Text stability is judged on normalized text: a normalizer (NFC, for example) changes what
        decoding gives back, which is the tokenizer's doing, not the template's.
        """
        normalizer = self._normalizer
        return normalizer(text) if normalizer is not None else text

    @cached_property
    def _normalizer(self) -> FastNormalizer | None:
        normalizer = getattr(self._rust, "normalizer", None) if self._rust is not None else None
        return FastNormalizer(normalizer) if normalizer is not None else None

    @cached_property
    def has_normalizer(self) -> bool:
        return self._rust is not None and getattr(self._rust, "normalizer", None) is not None

    # -- decoding -----------------------------------------------------------------------------
    def decode(self, ids: Sequence[int]) -> str:
        if self._rust is not None and not self._piecewise:
            return self._rust.decode(list(ids), skip_special_tokens=False)
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    # -- vocabulary facts ---------------------------------------------------------------------
    @cached_property
    def control_ids_by_text(self) -> dict[str, int]:
        """Special (control) tokens: added tokens flagged special, plus the tokenizer's special tokens."""
        found: dict[str, int] = {}
        for token_id, added in self._added_tokens.items():
            content = getattr(added, "content", str(added))
            if getattr(added, "special", True) and content and not content.isspace():
                found[content] = int(token_id)
        for text in getattr(self.tokenizer, "all_special_tokens", []) or []:
            token_id = self.tokenizer.convert_tokens_to_ids(text)
            if isinstance(token_id, int) and text and not text.isspace():
                found.setdefault(text, token_id)
        return found

    @cached_property
    def added_texts(self) -> frozenset[str]:
        """Every added token's text, special or not (``<tool_call>`` is often added but not special)."""
        return frozenset(getattr(t, "content", str(t)) for t in self._added_tokens.values()) | frozenset(
            self.control_ids_by_text
        )

    @cached_property
    def _added_tokens(self) -> dict:
        """The tokenizer's added tokens by id, read once: the tokenizer builds the map anew on every read (17 ms
        for Gemma 3's 6,000 added tokens)."""
        decoder = getattr(self.tokenizer, "added_tokens_decoder", None)
        return decoder if isinstance(decoder, dict) else {}  # mistral-common exposes a method, not a map

    @cached_property
    def control_ids(self) -> frozenset[int]:
        return frozenset(self.control_ids_by_text.values())

    @cached_property
    def written_controls(self) -> tuple[str, ...]:
        """Control tokens the template writes (all of them when the template is not known)."""
        source = self._template_source
        named = {v for v in (getattr(self.tokenizer, "special_tokens_map", None) or {}).values() if isinstance(v, str)}
        return tuple(sorted(c for c in self.control_ids_by_text if source is None or c in source or c in named))

    @cached_property
    def written_control_pattern(self) -> re.Pattern[str] | None:
        texts = sorted(self.written_controls, key=len, reverse=True)
        return re.compile("|".join(re.escape(t) for t in texts)) if texts else None

    @cached_property
    def written_added_pattern(self) -> re.Pattern[str] | None:
        """Every added token the template writes (``<think>``, ``<tool_call>``, control tokens), longest first:
        where two renders may part inside one token's text."""
        source = self._template_source
        texts = sorted(
            (t for t in self.added_texts if t and not t.isspace() and (source is None or t in source)),
            key=len,
            reverse=True,
        )
        return re.compile("|".join(re.escape(t) for t in texts)) if texts else None

    @cached_property
    def _control_pattern(self) -> re.Pattern[str] | None:
        texts = sorted(self.control_ids_by_text, key=len, reverse=True)
        return re.compile("|".join(re.escape(t) for t in texts)) if texts else None

    def id_of(self, text: str) -> int | None:
        """The single id of ``text`` when it is one token, else None."""
        if text in self.control_ids_by_text:
            return self.control_ids_by_text[text]
        ids = self.encode(text)
        return ids[0] if len(ids) == 1 else None

    @cached_property
    def id_limit(self) -> int:
        """One past the largest id of the vocabulary (added tokens included): an id at or beyond it is no token."""
        ids = [int(i) for i in self._added_tokens]
        if self._rust is not None and not self._piecewise:
            ids.append(self._rust.get_vocab_size(with_added_tokens=True) - 1)
        else:
            ids.append(len(self.tokenizer) - 1)
        return max(ids) + 1

    @cached_property
    def bos_id(self) -> int | None:
        value = getattr(self.tokenizer, "bos_token_id", None)
        return value if isinstance(value, int) else None

    @cached_property
    def eos_id(self) -> int | None:
        value = getattr(self.tokenizer, "eos_token_id", None)
        return value if isinstance(value, int) else None

    # -- non-canonical splits -----------------------------------------------------------------
    def split_of(self, token_id: int) -> tuple[int, ...] | None:
        """Two or more ids whose decoded text concatenates to ``token_id``'s text, or None.

        The split is verified by decoding, so it is valid whatever the vocabulary's byte scheme.
        Added tokens (control tokens, ``<tool_call>``) are never split: non-canonical sampling is a
        property of BPE merges, and parsers key on those tokens' ids.
        """
        if token_id in self._split_cache:
            return self._split_cache[token_id]
        result: tuple[int, ...] | None = None
        text = self.decode([token_id])
        if text not in self.added_texts and len(text) >= 2 and REPLACEMENT_CHAR not in text:
            for cut in range(len(text) - 1, 0, -1):
                left, right = self.encode_plain(text[:cut]), self.encode_plain(text[cut:])
                candidate = (*left, *right)
                if len(candidate) >= 2 and self.decode(candidate) == text:
                    result = candidate
                    break
        self._split_cache[token_id] = result
        return result

    def noncanonical(self, ids: Sequence[int], rng: random.Random, rate: float = 0.3) -> list[int] | None:
        """Replace randomly chosen tokens of ``ids`` by splits; None when no token can be split."""
        splittable = [i for i, t in enumerate(ids) if self.split_of(t) is not None]
        if not splittable:
            return None
        chosen = {i for i in splittable if rng.random() < rate} or {rng.choice(splittable)}
        out: list[int] = []
        for index, token_id in enumerate(ids):
            split = self.split_of(token_id) if index in chosen else None
            out.extend(split if split else (token_id,))
        return out


def _overlap(text: str, other: str) -> bool:
    """Whether two added-token texts can share characters in a string: one contains the other, or a suffix of
    one is a prefix of the other."""
    if other in text or text in other:
        return True
    longest = min(len(text), len(other)) - 1
    return any(text.endswith(other[:n]) or other.endswith(text[:n]) for n in range(1, longest + 1))


class _Overlaps:
    """:func:`_overlap` against a fixed set of texts, for thousands of candidates: the proper prefixes and
    suffixes of the fixed texts are indexed once, so a candidate costs a few set lookups per character."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = [t for t in texts if t]
        self.prefixes = {t[:n] for t in self.texts for n in range(1, len(t))}
        self.suffixes = {t[-n:] for t in self.texts for n in range(1, len(t))}
        self.inner = {t[i:j] for t in self.texts for i in range(len(t)) for j in range(i + 1, len(t) + 1)}
        self.longest = max((len(t) for t in self.texts), default=0)

    def with_any(self, text: str) -> bool:
        if not text or not self.texts:
            return False
        if text in self.inner or any(t in text for t in self.texts):
            return True
        reach = min(len(text), self.longest)
        return any(text[-n:] in self.prefixes or text[:n] in self.suffixes for n in range(1, reach))
