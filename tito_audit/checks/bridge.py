"""Check 4, bridge (SPEC "The checks"): the history-free stand-in suffix equals the real bridge.

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

from tito_audit.checks.context import RolloutContext
from tito_audit.checks.outcome import FAILED, PASSED, REFUSED, Outcome
from tito_audit.checks.records import token_failure
from tito_audit.conversation import ASSISTANT, TOOL, USER, Conversation, Message
from tito_audit.diff import common_prefix_length, first_difference
from tito_audit.render import RenderError

NAME = "bridge"


def stand_in(conversation: Conversation, j: int) -> tuple[list[Message], list[Message]]:
    """A short history-free conversation (a user message and an assistant tool call) plus the step's messages."""
    start = max(i for i in conversation.assistant_indices() if i < j)
    step_messages = conversation.messages[start + 1 : j]
    calls = [
        {
            "id": m.get("tool_call_id", "call00000"),
            "type": "function",
            "function": {"name": m.get("name", "tool"), "arguments": {}},
        }
        for m in step_messages
    ]
    head = [
        {"role": USER, "content": "Use the tools."},
        {"role": ASSISTANT, "content": "", "tool_calls": calls},
    ]
    return head, step_messages


def _stand_in_buffer(context: RolloutContext, head: list[Message], tools: list[dict] | None) -> str:
    """The stand-in's buffer text: its prompt and its sampled tool call, cut after the stop token."""
    setup = context.setup
    renders = setup.renderer.prefixes(head, tools, [(1, True), (2, False)])
    prompt, full = renders[(1, True)], renders[(2, False)]
    generated = full.text[common_prefix_length(prompt.text, full.text) :]
    ids = setup.codec.encode(generated)
    cut = next((n + 1 for n, t in enumerate(ids) if t in setup.stop_ids), len(ids))
    return prompt.text + setup.codec.decode(ids[:cut])


def check(context: RolloutContext, outcome: Outcome) -> None:
    conversation, setup = context.conversation, context.setup
    for step in context.trace.steps:
        bridge = step.bridge
        if step.kind != TOOL or bridge is None:
            continue
        j = step.turn
        head, step_messages = stand_in(conversation, j)
        size = len(head) + len(step_messages)
        try:
            stand_in_text = _stand_in_buffer(context, head, conversation.tools)
            after = setup.renderer.prefixes([*head, *step_messages], conversation.tools, [(size, True)])[(size, True)]
        except RenderError:
            outcome.count(NAME, TOOL, REFUSED)
            continue
        detail = "expected: the real bridge; actual: the stand-in suffix"
        if not after.text.startswith(stand_in_text):
            # The stand-in is not prefix-stable itself: a trainer taking its suffix gets these tokens.
            stand_in_bridge = setup.codec.encode(after.text[common_prefix_length(stand_in_text, after.text) :])
            detail += " (the stand-in's own assistant turn renders differently once tool results follow)"
        else:
            stand_in_bridge = list(after.ids[len(setup.codec.encode(stand_in_text)) :])
        index = first_difference(stand_in_bridge, bridge)
        if index is None and len(stand_in_bridge) == len(bridge):
            outcome.count(NAME, TOOL, PASSED)
            continue
        outcome.count(NAME, TOOL, FAILED)
        index = index if index is not None else len(stand_in_bridge)
        failure = token_failure(
            setup.decode_one,
            NAME,
            "suffix",
            TOOL,
            conversation,
            j,
            step.roles,
            ["history-dependent-suffix"],
            bridge,
            stand_in_bridge,
            index,
            detail=detail,
        )
        outcome.fail((1, j, 1, 0), failure)
