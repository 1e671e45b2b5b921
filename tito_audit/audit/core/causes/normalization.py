"""``normalization``: the tokenizer's normalizer changes the text, so decoding the ids does not give it back.

Detected by the roundtrip check (:mod:`tito_audit.audit.checks.roundtrip`: decoding gives other text than was
rendered, or re-encoding the decoded text gives ids that decode to other text). Confirmed from the definition: the
failure's text, encoded and decoded again, comes back changed, without U+FFFD.
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.interface import Cause
from tito_audit.model.tokens import REPLACEMENT_CHAR

NAME = "normalization"
LINE = "The tokenizer's normalizer changes the text, so decoding does not give it back."


def confirm(case: Case) -> Confirmation:
    """``decode(encode(text)) != text`` for the text at the failure (as rendered, or as its ids decode)."""
    failure, codec = case.failure, case.codec
    texts = [failure.expected_text] if failure.expected_text else []
    if failure.expected is not None:
        texts.append(codec.decode(failure.expected.ids))
    for text in texts:
        again = codec.decode(codec.encode(text))
        if again != text and REPLACEMENT_CHAR not in again:
            return Confirmation(NAME, True, f"{text[:40]!r} comes back as {again[:40]!r}")
    return Confirmation(NAME, False, "the text comes back unchanged through encode and decode")


CAUSE = Cause(NAME, LINE, confirm)
