"""``stop-token-swap``: history ends an assistant turn with another token than the one the engine stopped on.

Detected on a text divergence (:func:`detect`): the control token covering the divergence in the earlier text is one
of the stop tokens, the engine stopped there (no stop token right before it), and the later text has another control
token there; or none at all, the turn running on into the next message's text. A template that merges consecutive
assistant messages (writes no end token between them) gets this label too: what the engine stopped on is gone. Not
when the stop token is still written a few characters on (pushed back by inserted text) or only the text after it
differs (``tail-after-stop``).

Confirmed from the definition: a stop token of the variant covers the divergence in the earlier render (the turn's
end as the engine stopped it), and the later render does not write that stop token at the same place.
"""

from __future__ import annotations

from tito_audit.audit.core.causes import tail_after_stop
from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.divergence import Divergence
from tito_audit.audit.core.causes.interface import Cause

NAME = "stop-token-swap"
LINE = "History ends an assistant turn with another token than the one the engine stopped on."
FIXED = "end every assistant turn with the terminator the engine stopped on"

_STOP_PUSHED_BACK = 8
"""Characters of inserted text (a newline, a trimmed space) that may sit before a stop token the later render still
writes at the end of the same turn."""


def detect(divergence: Divergence) -> bool:
    if not divergence.engine_stop:
        return False
    stop, later, index = divergence.control_earlier or "", divergence.later, divergence.index
    pushed_back = stop in later[index : index + len(stop) + _STOP_PUSHED_BACK]
    return bool(divergence.control_later) or not (pushed_back or tail_after_stop.detect(divergence))


def confirm(case: Case) -> Confirmation:
    """A stop token covers the divergence in the earlier render and the later render writes something else there."""
    earlier, later, index = case.earlier, case.later, case.index
    for stop in sorted(case.stop_texts, key=len, reverse=True):
        at = earlier.rfind(stop, max(0, index - len(stop) + 1), index + len(stop)) if stop else -1
        if 0 <= at <= index < at + len(stop) and later[at : at + len(stop)] != stop:
            return Confirmation(
                NAME, True, f"earlier {earlier[index : index + 12]!r}, later {later[index : index + 12]!r}"
            )
    return Confirmation(
        NAME,
        False,
        f"no stop token where the renders part: earlier {earlier[index : index + 12]!r}, later "
        f"{later[index : index + 12]!r}",
    )


CAUSE = Cause(NAME, LINE, confirm, fixed=FIXED)
