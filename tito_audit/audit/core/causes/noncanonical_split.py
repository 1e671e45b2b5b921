"""``noncanonical-split``: a sampled token sequence that is not the canonical encoding of its text does not survive
decoding and re-encoding. Every BPE model shows it (models do sample such splits), so it is counted and reported
beside the verdict, never given an example of its own (:data:`QUIET`).

Detected by the roundtrip check and by re-render drift on the non-canonical copy of each completion
(:mod:`tito_audit.audit.checks`). Confirmed from the definition: the failure's sampled ids are not what their own
text encodes to.
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.interface import Cause

NAME = "noncanonical-split"
LINE = (
    "A sampled token sequence that is not the canonical encoding does not survive decode and re-encode (every BPE "
    "model shows it)."
)
QUIET = True


def confirm(case: Case) -> Confirmation:
    """``encode(decode(ids)) != ids`` for the failure's sampled ids (its earlier token window)."""
    expected = case.failure.expected
    if expected is None:
        return Confirmation(NAME, False, "the failure keeps no token window")
    again = case.codec.encode(case.codec.decode(expected.ids))
    return Confirmation(NAME, again != expected.ids, f"ids {expected.ids[:6]} encode back as {again[:6]}")


CAUSE = Cause(NAME, LINE, confirm, quiet=QUIET)
