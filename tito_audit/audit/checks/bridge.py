"""Check 4, bridge (docs/contract.md "The checks"): the history-free stand-in suffix equals the real bridge.

Some trainers never render history: they take the tokens of appended tool results from a short stand-in
conversation (a user message and an assistant tool call) and append them after the sampled completion. For
every tool-only step the buffer could follow, does that suffix equal the real bridge (``R`` after the
buffer)? When not, the failure is ``history-dependent-suffix``.

Example: a template that numbers tool results (``<|im_start|>tool #7``) gives the stand-in ``#2`` where the
real conversation needs ``#7``::

    real bridge     = "<|im_start|>tool #7\\n..."
    stand-in suffix = "<|im_start|>tool #2\\n..."
"""

from __future__ import annotations

from tito_audit.audit.checks.interface import Check
from tito_audit.audit.checks.outcome import FAILED, PASSED, REFUSED, Outcome
from tito_audit.audit.checks.records import token_failure
from tito_audit.audit.checks.rollout_context import CheckSetup, RolloutContext
from tito_audit.audit.checks.trace import trace_of
from tito_audit.audit.core.causes import history_dependent_suffix
from tito_audit.audit.core.diff import common_prefix_length, first_difference
from tito_audit.conversations.conversation import ASSISTANT, TOOL, USER, Conversation, Message
from tito_audit.model.render import RenderError

NAME = "bridge"


def step_messages(conversation: Conversation, j: int) -> list[Message]:
    """The messages appended between the assistant turn before ``j`` and turn ``j``."""
    start = max(i for i in conversation.assistant_indices() if i < j)
    return conversation.messages[start + 1 : j]


def stand_in_head(step_messages: list[Message]) -> list[Message]:
    """A user message and an assistant turn that the step's messages can follow: a call per tool result when the
    step has tool results, a short answer otherwise."""
    calls = [
        {
            "id": m.get("tool_call_id", "call00000"),
            "type": "function",
            "function": {"name": m.get("name", "tool"), "arguments": {}},
        }
        for m in step_messages
        if m.get("role") == TOOL
    ]
    answer: Message = (
        {"role": ASSISTANT, "content": "", "tool_calls": calls} if calls else {"role": ASSISTANT, "content": "Done."}
    )
    return [{"role": USER, "content": "Use the tools."}, answer]


def stand_in_bridge(
    setup: CheckSetup, step_messages: list[Message], tools: list[dict] | None
) -> tuple[list[int], bool]:
    """The ids a history-free trainer appends for ``step_messages``: the stand-in's next prompt after its own
    buffer (prompt and sampled turn, cut after the stop token), and whether the stand-in was prefix-stable
    itself. Raises :class:`~tito_audit.model.render.RenderError` when the template refuses the stand-in."""
    head = stand_in_head(step_messages)
    size = len(head) + len(step_messages)
    stand_in_text = _stand_in_buffer(setup, head, tools)
    after = setup.renderer.prefixes([*head, *step_messages], tools, [(size, True)])[(size, True)]
    if not after.text.startswith(stand_in_text):
        # The stand-in is not prefix-stable itself: a trainer taking its suffix gets these tokens.
        return setup.codec.encode(after.text[common_prefix_length(stand_in_text, after.text) :]), False
    return list(after.ids[len(setup.codec.encode(stand_in_text)) :]), True


def _stand_in_buffer(setup: CheckSetup, head: list[Message], tools: list[dict] | None) -> str:
    """The stand-in's buffer text: its prompt and its sampled turn, cut after the stop token."""
    renders = setup.renderer.prefixes(head, tools, [(1, True), (2, False)])
    prompt, full = renders[(1, True)], renders[(2, False)]
    generated = full.text[common_prefix_length(prompt.text, full.text) :]
    ids = setup.codec.encode(generated)
    cut = next((n + 1 for n, t in enumerate(ids) if t in setup.stop_ids), len(ids))
    return prompt.text + setup.codec.decode(ids[:cut])


def check(context: RolloutContext, outcome: Outcome) -> None:
    conversation, setup = context.conversation, context.setup
    for step in trace_of(context).steps:
        bridge = step.bridge
        if step.kind != TOOL or bridge is None:
            continue
        j = step.turn
        try:
            stand_in_ids, stable = stand_in_bridge(setup, step_messages(conversation, j), conversation.tools)
        except RenderError:
            outcome.count(NAME, TOOL, REFUSED)
            continue
        detail = "expected: the real bridge; actual: the stand-in suffix"
        if not stable:
            detail += " (the stand-in's own assistant turn renders differently once tool results follow)"
        index = first_difference(stand_in_ids, bridge)
        if index is None and len(stand_in_ids) == len(bridge):
            outcome.count(NAME, TOOL, PASSED)
            continue
        outcome.count(NAME, TOOL, FAILED)
        index = index if index is not None else len(stand_in_ids)
        failure = token_failure(
            setup.decode_one,
            NAME,
            "suffix",
            TOOL,
            conversation,
            j,
            step.roles,
            [history_dependent_suffix.NAME],
            bridge,
            stand_in_ids,
            index,
            detail=detail,
        )
        outcome.fail((1, j, 1, 0), failure)


CHECK = Check(NAME, check)
