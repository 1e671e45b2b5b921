"""What a cause's confirmation reads: one failure with the conversation the audit walked and the two renders its
explanation compares, and the machinery to render or tokenize again.

A confirmation is written from the cause's definition (docs/contract.md, "Cause labels"), never from its detector:
it re-renders with the change undone, or checks what the definition says on the texts, so it can disagree with the
label (``confirmed=False``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tito_audit.audit.core.diff import first_difference
from tito_audit.audit.results import Failure
from tito_audit.conversations.conversation import ASSISTANT, Message
from tito_audit.model.render import Renderer
from tito_audit.model.tokens import TokenCodec

_TAG = re.compile(r"<[^<>\s]+>|\[[^\[\]\s]+\]|[^\s<\[]+")
"""A tag (``<think>``, ``<|end|>``, ``[THINK]``) or a word."""

Key = tuple[int, bool]
"""``(k, add_generation_prompt)``: the render ``render(M[:k], gp)``."""


@dataclass
class Confirmation:
    cause: str
    confirmed: bool
    evidence: str


@dataclass(frozen=True)
class ReasoningTags:
    """The template's reasoning block as it writes it (learnt by rendering a marker as an answer's reasoning): the
    opener's last tag and the closer's first (``<think>``, ``</think>``; harmony's ``<|message|>``, ``<|end|>``)."""

    opener: str
    closer: str

    @classmethod
    def of(cls, head: str, closer: str) -> ReasoningTags | None:
        """The tags of a block whose turn text before the reasoning is ``head`` (header and opener) and whose text
        between the reasoning and the answer is ``closer``; None when either holds no text."""
        before, after = _TAG.findall(head), _TAG.findall(closer)
        return cls(before[-1], after[0]) if before and after else None


@dataclass(frozen=True)
class Case:
    """One failure, as its explanation re-renders it."""

    failure: Failure
    messages: Sequence[Message]
    """The conversation as the audit walked it (in the shape it was accepted in, every turn as realized)."""
    tools: list[dict] | None
    renderer: Renderer
    codec: TokenCodec
    keys: tuple[Key, Key] | None = None
    """The earlier and the later render the failure compares (None: the failure compares no renders)."""
    texts: Mapping[Key, str] = field(default_factory=dict)
    """Those renders' texts (the earlier one followed by what the model wrote, when history does not render it)."""
    stop_texts: tuple[str, ...] = ()
    """The variant's stop tokens, as text."""
    reasoning: ReasoningTags | None = None
    """The template's reasoning block (None when it writes no reasoning)."""

    @property
    def earlier(self) -> str:
        return self.texts.get(self.keys[0], "") if self.keys else ""

    @property
    def later(self) -> str:
        return self.texts.get(self.keys[1], "") if self.keys else ""

    @property
    def index(self) -> int:
        """Where the failure's two texts part: the audit's index where the two renders compared differ there too, else
        where they first part (a rollout compares the buffer's text, which the earlier render approximates, so the
        audit's index need not fall where the renders part), else the audit's index."""
        audited = self.failure.char_index
        earlier, later = self.earlier, self.later
        if audited is not None and earlier[audited : audited + 1] != later[audited : audited + 1]:
            return audited
        if self.keys and (at := first_difference(earlier, later)) is not None:
            return at
        return audited if audited is not None else 0

    def assistant_before(self, turn: int) -> int | None:
        """The last assistant message before message ``turn``."""
        return max((j for j, m in enumerate(self.messages) if m.get("role") == ASSISTANT and j < turn), default=None)
