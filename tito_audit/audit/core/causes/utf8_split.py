"""``utf8-split``: decoding a partial byte sequence (a completion cut inside a multi-byte character) yields U+FFFD, so
re-encoding cannot give the ids back.

Detected by the roundtrip check and as a drift cause (:mod:`tito_audit.audit.checks`). Confirmed from the definition:
the failure's sampled ids decode to U+FFFD where its text holds none.
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.interface import Cause
from tito_audit.model.tokens import REPLACEMENT_CHAR

NAME = "utf8-split"
LINE = "Decoding a partial byte sequence yields U+FFFD."


def confirm(case: Case) -> Confirmation:
    """U+FFFD in the decoded ids, none in the text they were sampled as."""
    failure = case.failure
    windows = [w for w in (failure.expected, failure.actual) if w is not None]
    decoded = "".join(case.codec.decode(w.ids) for w in windows) + failure.actual_text
    written = REPLACEMENT_CHAR in failure.expected_text
    shown = REPLACEMENT_CHAR in decoded and not written
    return Confirmation(
        NAME, shown, "the ids decode to U+FFFD" if shown else "no U+FFFD from decoding where the text had none"
    )


CAUSE = Cause(NAME, LINE, confirm)
