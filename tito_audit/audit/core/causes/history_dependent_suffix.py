"""``history-dependent-suffix``: the tokens a history-free trainer appends for a tool step (the suffix a short
stand-in conversation, a user message and an assistant tool call, gives for the same tool results) differ from the real
bridge.

Detected by the bridge check (:mod:`tito_audit.audit.checks.bridge`). Confirmed by rendering again with a stand-in
written here from the definition: the text the template writes for the step's messages after the real history differs
from the text it writes for them after a stand-in of the same calls.
"""

from __future__ import annotations

from tito_audit.audit.core.causes.case import Case, Confirmation
from tito_audit.audit.core.causes.interface import Cause
from tito_audit.audit.core.diff import common_prefix_length
from tito_audit.conversations.conversation import ASSISTANT, TOOL, USER, Message
from tito_audit.model.render import RenderError

NAME = "history-dependent-suffix"
LINE = "The suffix a history-free stand-in conversation gives differs from the real bridge."
UNFIXED = "the stand-in suffix depends on history: use the real bridge instead"


def _suffix(case: Case, history: list[Message], step: list[Message]) -> str:
    """What the template writes after ``history`` once ``step`` is appended, up to the next generation prompt."""
    before = case.renderer.text(history, case.tools, False)
    after = case.renderer.text([*history, *step], case.tools, True)
    return after[common_prefix_length(before, after) :]


def confirm(case: Case) -> Confirmation:
    """The step's suffix after the real history differs from its suffix after a one-call stand-in."""
    turn = case.failure.turn
    before = case.assistant_before(turn)
    if before is None:
        return Confirmation(NAME, False, "no assistant turn before the step")
    step = list(case.messages[before + 1 : turn])
    calls = [
        {
            "id": m.get("tool_call_id", "call0"),
            "type": "function",
            "function": {"name": m.get("name", "tool"), "arguments": {}},
        }
        for m in step
        if m.get("role") == TOOL
    ]
    stand_in: list[Message] = [
        {"role": USER, "content": "Call the tools."},
        {"role": ASSISTANT, "content": "", "tool_calls": calls},
    ]
    try:
        real = _suffix(case, list(case.messages[: before + 1]), step)
        alone = _suffix(case, stand_in, step)
    except RenderError as exc:
        return Confirmation(NAME, False, f"the stand-in does not render: {exc}")
    at = common_prefix_length(real, alone)
    return Confirmation(
        NAME,
        real != alone,
        f"after history {real[at : at + 30]!r}, after a stand-in {alone[at : at + 30]!r} (character {at})"
        if real != alone
        else "the step's suffix is the same after a stand-in",
    )


CAUSE = Cause(NAME, LINE, confirm, unfixed=UNFIXED)
