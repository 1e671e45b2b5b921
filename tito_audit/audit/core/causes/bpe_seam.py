"""``bpe-seam``: the text holds but the tokens do not: a BPE merge crosses the join between what is already in the
buffer and what is appended (or, decoding and re-encoding ids, tokens merge differently once decoded together).

Detected by the seam check of the rollout (``encode(decode(buffer))`` is not a token prefix of ``ids(R)`` while the
text is), by ``append``'s token prefix, by the roundtrip check's re-encoding and by re-render drift
(:mod:`tito_audit.audit.checks`). Confirmed from the definition: with the two renders compared, the earlier text is a
prefix of the later one and its encoding is not a token prefix of the later one's; with token windows only, both
windows decode to the same text in other tokens.
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.interface import Cause
from tito_audit.audit.core.diff import is_prefix

NAME = "bpe-seam"
LINE = "The text prefix holds, but a BPE merge crosses the join between the buffer and the appended text."
UNFIXED = "tokens merge across the join: only the tokenizer or a separator in the template can change that"


def confirm(case: Case) -> Confirmation:
    """Text prefix without token prefix (renders), or the same text in other tokens (token windows)."""
    if case.keys:
        earlier, later = case.earlier, case.later
        text_ok = is_prefix(earlier, later)
        ids_ok = is_prefix(case.codec.encode(earlier), case.codec.encode(later))
        return Confirmation(NAME, text_ok and not ids_ok, f"text prefix holds: {text_ok}; token prefix holds: {ids_ok}")
    expected, actual = case.failure.expected, case.failure.actual
    if expected is None or actual is None:
        return Confirmation(NAME, False, "the failure keeps no token windows")
    same_text = case.codec.decode(expected.ids) == case.codec.decode(actual.ids)
    shown = same_text and expected.ids != actual.ids
    return Confirmation(
        NAME,
        shown,
        "the token windows differ while the text holds (see the diff)"
        if shown
        else "the token windows decode to different text",
    )


CAUSE = Cause(NAME, LINE, confirm, unfixed=UNFIXED)
