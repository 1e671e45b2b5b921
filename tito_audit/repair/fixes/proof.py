"""The no-change proof of a fix: every render the fix does not claim to touch is byte-identical.

Each fix says which renders it may change (``touches``); all the others, over every prefix of the generated
conversations with and without a generation prompt, are compared byte for byte under the original and the
patched template.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tito_audit.conversations.conversation import ASSISTANT, Conversation, Message

RenderTexts = Callable[[Sequence[Message], "list[dict] | None", Sequence[tuple[int, bool]]], dict]
"""``(messages, tools, [(k, gp), ...]) -> {(k, gp): text or None}`` (None: the template refuses that prefix)."""
Touches = Callable[[Sequence[Message], int, bool], bool]


@dataclass
class NoChangeProof:
    compared: int = 0
    """Renders no fix touches, compared byte for byte."""
    identical: int = 0
    differing: list[str] = field(default_factory=list)
    touched: int = 0
    """Renders a fix may change."""
    changed: int = 0
    """Of those, the ones that did change."""
    scope: str = ""
    """Which renders the fixes may change, in words."""

    @property
    def holds(self) -> bool:
        return self.compared > 0 and self.identical == self.compared

    def summary(self) -> str:
        status = "holds" if self.holds else "FAILS"
        return (
            f"no-change proof {status}: {self.identical} of {self.compared} renders no fix touches are "
            f"byte-identical; {self.changed} of {self.touched} renders the fixes may change did change "
            f"({self.scope})"
        )


def prove_no_change(
    conversations: Sequence[Conversation],
    render_original: RenderTexts,
    render_patched: RenderTexts,
    touches: Sequence[Touches],
    scope: str,
) -> NoChangeProof:
    proof = NoChangeProof(scope=scope)
    for conversation in conversations:
        messages = conversation.messages
        keys = [
            (k, gp)
            for k in range(1, len(messages) + 1)
            for gp in ((False, True) if messages[k - 1].get("role") != ASSISTANT else (False,))
        ]
        originals = render_original(messages, conversation.tools, keys)
        patched = render_patched(messages, conversation.tools, keys)
        for k, gp in keys:
            before, after = originals.get((k, gp)), patched.get((k, gp))
            if before is None or after is None:
                continue
            if any(touch(messages, k, gp) for touch in touches):
                proof.touched += 1
                proof.changed += before != after
                continue
            proof.compared += 1
            if before == after:
                proof.identical += 1
            elif len(proof.differing) < 5:
                proof.differing.append(f"{conversation.id} messages[:{k}] add_generation_prompt={gp}")
    return proof
