"""``tail-after-stop``: only text after an assistant turn's stop token changes in history (a newline the template
writes after the end token only when more follows, or the end token itself when a following message of the same role
continues the block).

Detected on a text divergence (:func:`detect`): the earlier text stopped at or right before the divergence, and what
it holds from there is at most a few characters of whitespace besides stop tokens. Confirmed from the definition: the
last stop token the earlier render writes before the divergence is followed by nothing but whitespace and stop tokens
(everything up to it is kept; only what follows it differs).
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.divergence import Divergence
from tito_audit.audit.core.causes.interface import Cause

NAME = "tail-after-stop"
LINE = "Only the text after an assistant turn's stop token changes in history."
FIXED = "keep the text after the stop token in history"


def detect(divergence: Divergence) -> bool:
    rest, stops = divergence.rest, divergence.stops
    tail = rest
    for stop in stops:
        tail = tail.replace(stop, "")
    after_stop = divergence.stopped_before or any(rest.startswith(s) for s in stops)
    return (
        after_stop
        and bool(rest)
        and len(tail) <= 4
        and not tail.strip()
        and not any(c in tail for c in divergence.controls)
        and not (divergence.engine_stop and divergence.control_later)
    )


def confirm(case: Case) -> Confirmation:
    """The last stop token the earlier render writes before the divergence is followed there by nothing but
    whitespace and stop tokens: the text up to the stop token is kept, only what follows it differs."""
    earlier, index = case.earlier, case.index
    ends = [at + len(stop) for stop in case.stop_texts if stop and (at := earlier.rfind(stop, 0, index)) >= 0]
    if not ends:
        return Confirmation(NAME, False, f"no stop token in the earlier side before the divergence ({index})")
    end = max(ends)
    tail = earlier[end:]
    for stop in case.stop_texts:
        tail = tail.replace(stop, "") if stop else tail
    return Confirmation(
        NAME, not tail.strip(), f"earlier ends with {earlier[end:][:40]!r} after its stop token {earlier[:end][-12:]!r}"
    )


CAUSE = Cause(NAME, LINE, confirm, fixed=FIXED)
