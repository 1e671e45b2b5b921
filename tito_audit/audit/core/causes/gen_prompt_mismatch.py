"""``gen-prompt-mismatch``: the generation prompt writes text that the template renders differently for the same turn
in history (``render(M[:j+1])`` does not start with ``render(M[:j], gp=True)``).

Detected where the turns are realized (:mod:`tito_audit.audit.realization.realize`: a turn whose prompt and rendering
part inside the generation prompt), given to a rollout divergence that lies in that region
(:func:`tito_audit.audit.checks.rollout.text_break`) and counted as a finding
(:mod:`tito_audit.audit.findings.gen_prompt_turns`). Confirmed by rendering both again: the prompt of the assistant
turn before the divergence is not a prefix of that turn's rendering.
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.interface import Cause
from tito_audit.audit.core.diff import first_difference

NAME = "gen-prompt-mismatch"
LINE = "The generation prompt disagrees with how the template renders the same turn in history."
FIXED = "render reasoning in the block the generation prompt opens"
UNFIXED = (
    "the generation prompt writes text that history renders differently, and no fix here makes history render what "
    "the prompt opened"
)


def confirm(case: Case) -> Confirmation:
    """``render(M[:j], gp=True)`` is not a prefix of ``render(M[:j+1])`` for the assistant turn ``j`` before the
    failure."""
    j = case.assistant_before(case.failure.turn)
    if j is None:
        return Confirmation(NAME, False, "no earlier assistant turn")
    messages, tools = case.messages, case.tools
    prompt, turn = case.renderer.text(messages[:j], tools, True), case.renderer.text(messages[: j + 1], tools, False)
    at = first_difference(prompt, turn)
    return Confirmation(
        NAME,
        at is not None,
        f"generation prompt of message {j} parts from its render at character {at}: "
        f"{prompt[at : at + 30]!r} vs {turn[at : at + 30]!r}"
        if at is not None
        else "generation prompt is a prefix",
    )


CAUSE = Cause(NAME, LINE, confirm, fixed=FIXED, unfixed=UNFIXED)
