"""Conversation data: OpenAI-style messages plus tools, and the appended steps between assistant turns."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]

TOOL = "tool"
USER = "user"
SYSTEM = "system"
ASSISTANT = "assistant"
STEP_KINDS = (TOOL, USER, SYSTEM, ASSISTANT)
"""Kinds of appended step: tool results only; with a user turn; with a system message;
none (an assistant message follows another)."""


@dataclass
class Conversation:
    """One conversation to audit; ``shape`` names the generator's choices, for reports and refusals."""

    id: str
    messages: list[Message]
    tools: list[dict] | None = None
    shape: dict[str, str] = field(default_factory=dict)
    must_appear: list[str] = field(default_factory=list)
    """Strings a faithful render shows (tool names, tool-result phrases); missing ones mean dropped messages."""
    reasoning_dropped_by_harness: bool = False
    """Under a generation prompt that opens a reasoning block, an assistant turn without reasoning is one whose model
    closed the block at once and whose harness sent the empty reasoning back absent or None (docs/contract.md,
    Conversations); otherwise such a turn is not realizable there and is audited with reasoning."""

    def assistant_indices(self) -> list[int]:
        return [i for i, m in enumerate(self.messages) if m.get("role") == ASSISTANT]

    def copy(self) -> Conversation:
        """A deep copy (messages are plain JSON-like data; this is much faster than ``copy.deepcopy``)."""
        return Conversation(
            id=self.id,
            messages=clone_data(self.messages),
            tools=clone_data(self.tools),
            shape=dict(self.shape),
            must_appear=list(self.must_appear),
            reasoning_dropped_by_harness=self.reasoning_dropped_by_harness,
        )

    def has_tool_traffic(self) -> bool:
        return any(m.get("role") == TOOL or m.get("tool_calls") for m in self.messages)


def clone_data(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: clone_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [clone_data(item) for item in value]
    return value


@dataclass(frozen=True)
class Step:
    """The messages between two assistant turns ``before`` and ``after`` (indices into messages)."""

    before: int
    after: int
    roles: tuple[str, ...]

    @property
    def kind(self) -> str:
        return step_kind(self.roles)


def step_kind(roles: tuple[str, ...] | list[str]) -> str:
    """Classify an appended step by its roles.

    >>> step_kind(("tool", "tool")), step_kind(("tool", "user")), step_kind(("system",)), step_kind(())
    ('tool', 'user', 'system', 'assistant')
    """
    present = set(roles)
    if not present:
        return ASSISTANT
    if present <= {TOOL}:
        return TOOL
    if SYSTEM in present:
        return SYSTEM
    return USER


def steps_of(messages: list[Message]) -> list[Step]:
    """The appended steps: between two assistant turns, and after the last turn when messages follow it (a
    rollout cut after a tool result; its ``after`` is ``len(messages)``, the next prompt ``render(M, gp=True)``).

    >>> [(s.before, s.after, s.roles) for s in steps_of([{"role": "user"}, {"role": "assistant"}, {"role": "tool"}])]
    [(1, 3, ('tool',))]
    """
    turns = [i for i, m in enumerate(messages) if m.get("role") == ASSISTANT]
    if turns and turns[-1] < len(messages) - 1:
        turns.append(len(messages))
    return [
        Step(before=a, after=b, roles=tuple(str(messages[k].get("role")) for k in range(a + 1, b)))
        for a, b in itertools.pairwise(turns)
    ]
