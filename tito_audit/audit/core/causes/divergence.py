"""A text divergence as the cause detectors read it: an earlier and a later text, where they first part, what the
classifier may know about them, and the facts several detectors share (the control token at the divergence, whether
the earlier text stopped there).

Each text cause's module reads a :class:`Divergence` in its ``detect``; :mod:`.classify` asks them in order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from tito_audit.conversations.conversation import Message

MAX_CONTROL = 64
"""The longest control-token text looked for around a divergence."""


@dataclass(frozen=True)
class MessageRef:
    """The message whose rendering changed: its index, role, and whether it was last when first rendered."""

    index: int
    role: str
    was_last: bool
    content_end: int | None = None
    """Where its own text (content) ends in the compared text, when it could be located."""


@dataclass(frozen=True)
class TextContext:
    """What the classifier may know about the texts being compared."""

    messages: Sequence[Message]
    controls: Iterable[str]
    """Control-token texts the template writes."""
    stop_texts: Iterable[str]
    control_pattern: re.Pattern[str] | None = None
    """``controls`` as one alternation (longest first), when the caller has it compiled."""
    normalize: Callable[[str], str] | None = None
    """The tokenizer's normalizer, when it has one: rollout texts are compared normalized (Gemma writes spaces as
    ``▁``), so a message's text is looked for in both forms."""

    def forms(self, texts: Iterable[str]) -> list[str]:
        """``texts``, each also in its normalized form where that differs."""
        out: list[str] = []
        for text in texts:
            out.append(text)
            if self.normalize is not None and (normalized := self.normalize(text)) != text:
                out.append(normalized)
        return out


def token_boundary(text: str, index: int, pattern: re.Pattern[str] | None) -> int:
    """``index``, moved back to the start of the control token whose text covers it (two renders that part
    inside a control token's text, as ``<|im_end|>`` and ``<|im_start|>`` do after ``<|im_``, part at the token).
    """
    if pattern is None or index <= 0:
        return index
    for match in pattern.finditer(text, max(0, index - MAX_CONTROL), index + MAX_CONTROL):
        if match.start() < index < match.end():
            return match.start()
    return index


def control_at(text: str, index: int, controls: Iterable[str], pattern: re.Pattern[str] | None = None) -> str | None:
    """The control-token string that covers ``text[index]`` (starting at or before it), if any."""
    if pattern is not None:
        start = max(0, index - MAX_CONTROL)
        for match in pattern.finditer(text, start, index + MAX_CONTROL):
            if match.start() <= index < match.end():
                return match.group(0)
        return None
    best = None
    for control in controls:
        start = text.rfind(control, max(0, index - len(control) + 1), index + len(control))
        if start != -1 and start <= index < start + len(control) and (best is None or len(control) > len(best)):
            best = control
    return best


def message_text(message: Message) -> str | None:
    """A message's text when it is long enough to be found again without false matches."""
    content = message.get("content")
    return content.strip() if isinstance(content, str) and len(content.strip()) >= 6 else None


def message_texts(messages: Sequence[Message]) -> list[str]:
    return [text for text in map(message_text, messages) if text is not None]


@dataclass(frozen=True)
class Divergence:
    """``earlier`` is not a prefix of ``later``; ``index`` is their first differing character. ``owner`` is the
    message whose rendering changed (see :func:`tito_audit.audit.realization.realize.owner_of`), when known."""

    earlier: str
    later: str
    index: int
    context: TextContext
    owner: MessageRef | None = None

    @cached_property
    def controls(self) -> list[str]:
        return list(self.context.controls)

    @cached_property
    def stops(self) -> set[str]:
        return set(self.context.stop_texts)

    @cached_property
    def control_earlier(self) -> str | None:
        """The control token covering the divergence in the earlier text."""
        return control_at(self.earlier, self.index, self.controls, self.context.control_pattern)

    @cached_property
    def control_later(self) -> str | None:
        return control_at(self.later, self.index, self.controls, self.context.control_pattern)

    @cached_property
    def at_token(self) -> int:
        """Where the renders part, read from the start of the control token they part inside (Phi-4-mini's history
        ends ``<|end|><|endoftext|>``, its next render ``<|end|><|user|>``: they part after ``<|``)."""
        return token_boundary(self.earlier, self.index, self.context.control_pattern)

    @cached_property
    def rest(self) -> str:
        """The earlier text from that token on."""
        return self.earlier[self.at_token :]

    @cached_property
    def stopped_before(self) -> bool:
        """Whether a stop token ends the earlier text right before the divergence: a stop token after another one is
        not where the engine stopped (Phi-4-mini's end-of-text, written after the last message only)."""
        return any(self.earlier[: self.at_token].endswith(s) for s in self.stops)

    @cached_property
    def engine_stop(self) -> bool:
        """Whether the earlier text holds, at the divergence, the stop token the engine stopped on, and the later
        text another control token (or none) there."""
        earlier = self.control_earlier
        return earlier in self.stops and self.control_later != earlier and not self.stopped_before
