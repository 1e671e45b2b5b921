"""The undo re-runs (docs/contract.md, Verdicts: "Conditions"): a condition is a cause of a failing step only when the
same step, walked again with that condition undone, holds.

The rollout checks record each step they walk (:class:`WalkedStep`: the step's kind, the conditions it was drawn
under, whether the buffer followed). Only failing steps are walked again: for each condition of the step that has an
undoing (:mod:`tito_audit.audit.conditions.undoings`), the conversation with that condition undone is walked the same
way (accepted as it is, realized, the simulated rollout or the rollout with the same parser), and the step, at its
place in the undone conversation, holds or not. A failing step drawn under departures from the plain loop (harness
shapes, a rare form) that holds once one of them is undone, or all of them together, is not the plain loop's; one
whose break survives every undoing is.

Each undone conversation is built once per walked conversation (:class:`ConversationUndos`) and walked once per
rollout (the simulated one, each parser's): a conversation whose steps all hold costs nothing.

Example (a template that renders a reused call id's result under the first call's name)::

    step c0007 → 5, drawn under "when a later turn reuses a call id", "after turns without reasoning": fails
    walked again with fresh ids: holds                      → held without "when a later turn reuses a call id"
    walked again with reasoning given to the turn: fails    → the reasoning form is no cause
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.checks.trace import trace_of
from tito_audit.audit.conditions.step_conditions import is_plain
from tito_audit.audit.conditions.undoings import TurnForms, Undone, can_undo, undo
from tito_audit.conversations.conversation import Conversation

Statuses = Mapping[int, bool]
"""Step (by the index of the message it leads to) -> whether the buffer followed."""
Walk = Callable[[Conversation], "Statuses | None"]
"""Walks a conversation again (None when the template refuses it as it is)."""


@dataclass
class WalkedStep:
    """One step as a rollout walked it, and, once settled, what it holds without."""

    turn: int
    """The index of the message the step leads to (the next assistant turn, or the end)."""
    kind: str
    tags: tuple[str, ...]
    followed: bool
    held_without: list[str] = field(default_factory=list)
    """For a failing step: the conditions each of whose undoing alone it holds without."""
    plain_holds: bool = False
    """For a failing step: it holds once its departures from the plain loop are undone."""

    def key(self) -> tuple[str, tuple[str, ...], tuple[str, ...], bool]:
        """The step's tally key: kind, conditions, what it holds without, whether the plain loop holds."""
        return self.kind, self.tags, tuple(sorted(self.held_without)), self.plain_holds


def turn_forms(context: RolloutContext) -> TurnForms:
    """What undoing a reasoning form reads from a walked conversation: each turn's audited form and prompt state."""
    alignments = context.alignments
    return TurnForms(
        {j: a.audited_form for j, a in alignments.items()}, {j: a.prompt_state for j, a in alignments.items()}
    )


class ConversationUndos:
    """The undone versions of one walked conversation, each built once (by the set of conditions undone)."""

    def __init__(self, conversation: Conversation, turns: TurnForms) -> None:
        self.conversation, self.turns = conversation, turns
        self._built: dict[tuple[str, ...], Undone | None] = {}

    def get(self, conditions: Sequence[str]) -> Undone | None:
        key = tuple(sorted(conditions))
        if key not in self._built:
            self._built[key] = undo(self.conversation, key, self.turns)
        return self._built[key]


def settle(steps: Sequence[WalkedStep], undos: ConversationUndos, walk: Walk) -> None:
    """Walk each failing step of ``steps`` again with each of its conditions undone (``walk``: the rollout the steps
    come from, on another conversation), recording what it holds without."""
    failing = [step for step in steps if not step.followed]
    if not failing:
        return
    walked: dict[int, Statuses | None] = {}

    def holds(conditions: Sequence[str], step: WalkedStep) -> bool:
        undone = undos.get(conditions)
        if undone is None:
            return False
        key = id(undone)
        if key not in walked:
            walked[key] = walk(undone.conversation)
        found = walked[key]
        return bool(found is not None and found.get(undone.index(step.turn)))

    departures = sorted({t for step in steps for t in step.tags if not is_plain(t) and can_undo(t)})
    for step in failing:
        own = [condition for condition in step.tags if can_undo(condition)]
        step.held_without = [condition for condition in own if holds((condition,), step)]
        departing = [condition for condition in own if not is_plain(condition)]
        step.plain_holds = bool(departing) and (
            any(condition in step.held_without for condition in departing)
            or (departures != departing[:1] and holds(departures, step))
        )


def simulated_walk(context_of: Callable[[Conversation], RolloutContext | None]) -> Walk:
    """The simulated rollout as a :data:`Walk` (``context_of``: a conversation accepted as it is and realized)."""

    def walk(conversation: Conversation) -> Statuses | None:
        context = context_of(conversation)
        if context is None:
            return None
        return {step.turn: step.followed for step in trace_of(context).steps}

    return walk
