"""The undo re-runs (docs/contract.md, Verdicts: "Conditions"): a condition is a cause of a failing step only when the
same step, walked again with that condition undone, holds.

The rollout checks record each step they walk (:class:`WalkedStep`: the step's kind, the conditions it was drawn
under, whether the buffer followed). Only failing steps are walked again: for each condition of the step that has an
undoing (:mod:`tito_audit.audit.conditions.undoings`), the conversation with that condition undone is walked the same
way (rendered as it is, realized, the simulated rollout or the rollout with the same parser), and the step, at its
place in the undone conversation, holds or not. A failing step drawn under departures from the plain loop (harness
shapes, a rare form) that holds once they are undone together is not the plain loop's; one whose break survives
that undoing is.

Each undone conversation is built once per walked conversation (:class:`ConversationUndos`), cut after the last
failing step, and walked once per rollout (the simulated one, each parser's): a conversation whose steps all hold costs
nothing. The plain loop walks a failing conversation with its departures undone together until one of the rollout's
tool steps breaks there (its verdict is then settled); naming a cause walks the first :data:`TRIED_CONVERSATIONS`
failing conversations with it per rollout (the count says how many steps were tried).

Example (a template that renders a reused call id's result under the first call's name)::

    step c0007 → 5, drawn under "when a later turn reuses a call id", "after turns without reasoning": fails
    walked again with fresh ids: holds                      → held without "when a later turn reuses a call id"
    walked again with reasoning given to the turn: fails    → the reasoning form is no cause
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.checks.trace import trace_of
from tito_audit.audit.conditions.step_conditions import is_plain
from tito_audit.audit.conditions.undoings import TurnForms, Undone, can_undo, shared_prefix, undo
from tito_audit.conversations.conversation import TOOL, Conversation

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
    tried: list[str] = field(default_factory=list)
    """For a failing step: the conditions it was walked again without, one at a time."""
    held_without: list[str] = field(default_factory=list)
    """Of those, the ones it holds without."""
    plain_holds: bool = False
    """For a failing step: it holds once its conversation's departures from the plain loop are undone."""

    def key(self) -> tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...], bool]:
        """The step's tally key: kind, conditions, what it was walked again without and holds without, whether the
        plain loop holds."""
        return self.kind, self.tags, tuple(sorted(self.tried)), tuple(sorted(self.held_without)), self.plain_holds


def cut_at(conversation: Conversation, end: int) -> Conversation:
    """``conversation`` without its messages from ``end`` on (of the strings a faithful render shows, those left)."""
    messages = conversation.messages[:end]
    if len(messages) == len(conversation.messages):
        return conversation
    kept = "\n".join(_strings(messages))
    return replace(conversation, messages=messages, must_appear=[n for n in conversation.must_appear if n in kept])


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def last_failing(*walks: Sequence[WalkedStep]) -> int | None:
    """The index of the message the last failing step of any of ``walks`` leads to (None: no step failed)."""
    return max((step.turn for steps in walks for step in steps if not step.followed), default=None)


def turn_forms(context: RolloutContext) -> TurnForms:
    """What undoing a reasoning form reads from a walked conversation: each turn's audited form and prompt state."""
    alignments = context.alignments
    return TurnForms(
        {j: a.audited_form for j, a in alignments.items()}, {j: a.prompt_state for j, a in alignments.items()}
    )


class ConversationUndos:
    """The undone versions of one walked conversation, each built once (by the set of conditions undone) and cut after
    the last step any rollout needs walked again (``until``: the index of the message that step leads to; a step reads
    nothing after it, so the cut changes no step before it)."""

    def __init__(self, conversation: Conversation, turns: TurnForms, until: int | None = None) -> None:
        self.conversation, self.turns, self.until = conversation, turns, until
        self._built: dict[tuple[str, ...], Undone | None] = {}

    def get(self, conditions: Sequence[str]) -> Undone | None:
        key = tuple(sorted(conditions))
        if key not in self._built:
            undone = undo(self.conversation, key, self.turns)
            if undone is not None and self.until is not None:
                undone = Undone(cut_at(undone.conversation, undone.index(self.until)), undone.inserted)
            self._built[key] = undone
        return self._built[key]

    def unchanged_before(self, undone: Undone, turn: int) -> bool:
        """Whether ``undone`` leaves every message before the step to ``turn`` as it was (the step then fails again:
        nothing it reads was undone)."""
        end = undone.index(turn)
        return end == turn and shared_prefix(undone.conversation.messages[:end], self.conversation.messages) >= turn


TRIED_CONVERSATIONS = 8
"""Per rollout and condition, the conversations whose failing steps are walked again with that condition alone
undone, in conversation order: naming a cause needs a count, not every step (under the first setting, whose conditions
are the model's; :data:`TRIED_OTHER_SETTINGS` under the others)."""
TRIED_OTHER_SETTINGS = 3


@dataclass
class Budget:
    """What one rollout (a variant's simulated rollout, or its rollout with one parser) walked again so far."""

    cap: int = TRIED_CONVERSATIONS
    """Conversations walked again per condition, for naming it."""
    tried: Counter[str] = field(default_factory=Counter)
    plain_broken: bool = False
    """A tool step of the rollout breaks in the plain loop: its verdict is broken whatever the other steps do, so no
    other step is walked again for it (they count as failing there)."""


def settle(steps: Sequence[WalkedStep], undos: ConversationUndos, walk: Walk, budget: Budget) -> None:
    """Walk each failing step of ``steps`` again (``walk``: the rollout the steps come from, on another
    conversation): with every departure of its conversation from the plain loop undone (harness shapes, rare forms),
    while the plain loop's verdict is not yet broken (``budget``), and with each of its conditions alone undone, for
    the first ``budget.cap`` conversations of the rollout with that condition."""
    failing = [step for step in steps if not step.followed]
    if not failing:
        return
    walked: dict[int, Statuses | None] = {}

    def holds(undone: Undone | None, step: WalkedStep) -> bool:
        if undone is None or undos.unchanged_before(undone, step.turn):
            return False
        if id(undone) not in walked:
            walked[id(undone)] = walk(undone.conversation)
        found = walked[id(undone)]
        return bool(found is not None and found.get(undone.index(step.turn)))

    departures = sorted({t for step in steps for t in step.tags if not is_plain(t) and can_undo(t)})
    for step in failing:
        if any(not is_plain(t) for t in step.tags) and not budget.plain_broken:
            step.plain_holds = holds(undos.get(departures), step)
        budget.plain_broken |= step.kind == TOOL and not step.plain_holds
    for condition in sorted({t for step in failing for t in step.tags if can_undo(t)}):
        undone = undos.get((condition,))
        if undone is None:
            continue  # nothing of it to undo here
        walked_already = id(undone) in walked
        if not walked_already and budget.tried[condition] >= budget.cap:
            continue
        budget.tried[condition] += not walked_already
        for step in failing:
            if condition in step.tags:
                step.tried.append(condition)
                if holds(undone, step):
                    step.held_without.append(condition)


def simulated_walk(context_of: Callable[[Conversation], RolloutContext | None]) -> Walk:
    """The simulated rollout as a :data:`Walk` (``context_of``: a conversation accepted as it is and realized)."""

    def walk(conversation: Conversation) -> Statuses | None:
        context = context_of(conversation)
        if context is None:
            return None
        return {step.turn: step.followed for step in trace_of(context).steps}

    return walk
