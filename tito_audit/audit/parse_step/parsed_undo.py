"""The undo re-runs of the rollout with a parser (docs/contract.md, Verdicts: "Conditions"; "Written values").

A failing step after a turn whose argument values the parser read back as other values
(:mod:`tito_audit.audit.parse_step.value_rewrites`) is walked again first with the model writing those values as the
parser read them back: a step that then holds failed for a written value (beside the verdict, never in it). The
steps still failing are walked again with each of their conditions undone, on that conversation
(:func:`tito_audit.audit.checks.undo_reruns.settle`), so that a shape is never blamed for a written value's break.
"""

from __future__ import annotations

from collections.abc import Callable

from tito_audit.audit.checks.rollout_context import RolloutContext
from tito_audit.audit.checks.undo_reruns import Budget, ConversationUndos, Statuses, Walk, cut_at, settle
from tito_audit.audit.parse_step.parsed_rollout import ParsedOutcome, parsed_rollout
from tito_audit.audit.parse_step.value_rewrites import as_read_back
from tito_audit.conversations.conversation import Conversation
from tito_audit.parse.output_layouts import OutputLayout
from tito_audit.parse.parser import CompletionParser


def parsed_walk(
    context_of: Callable[[Conversation], RolloutContext | None],
    parser: CompletionParser,
    seed: int,
    layout: OutputLayout | None,
) -> Walk:
    """The rollout with ``parser`` as a :data:`~tito_audit.audit.checks.undo_reruns.Walk` (its steps alone)."""

    def walk(conversation: Conversation) -> Statuses | None:
        context = context_of(conversation)
        if context is None:
            return None
        return parsed_rollout(context, {}, parser, seed, layout, side_walks=False).statuses

    return walk


def settle_parsed(outcome: ParsedOutcome, undos: ConversationUndos, walk: Walk, budget: Budget) -> dict[int, set[str]]:
    """Settle ``outcome``'s failing steps (see the module docstring); the steps that failed for a written value (marked
    as holding), each with the value types whose rewrite broke it: of the types the parser rewrote in the turn before
    it, those that it holds with alone written as read back (all of them when no one alone does). Where a written value
    broke a step, the other steps are walked again on the conversation with the values written as read back."""
    after_rewrites = [
        step
        for step in outcome.walked
        if not step.followed and outcome.rewrites.get(outcome.previous_turn.get(step.turn, -1))
    ]
    held: dict[int, set[str]] = {}
    if after_rewrites:
        read_back = _cut(undos, as_read_back(undos.conversation, outcome.rewrites))
        statuses = walk(read_back) or {}
        by_type: dict[str, Statuses] = {}
        for step in after_rewrites:
            if not statuses.get(step.turn):
                continue
            step.followed = True
            types = {rewrite.value_type for rewrite in outcome.rewrites[outcome.previous_turn[step.turn]]}
            alone = {
                kind for kind in types if len(types) > 1 and _holds_alone(outcome, undos, walk, by_type, kind, step)
            }
            held[step.turn] = alone or types
        if held:
            undos = ConversationUndos(read_back, undos.turns, undos.until)
    settle(outcome.walked, undos, walk, budget)
    return held


def _cut(undos: ConversationUndos, conversation: Conversation) -> Conversation:
    return cut_at(conversation, undos.until) if undos.until is not None else conversation


def _holds_alone(
    outcome: ParsedOutcome, undos: ConversationUndos, walk: Walk, walked: dict[str, Statuses], kind: str, step
) -> bool:
    """Whether ``step`` holds with only the rewritten values of type ``kind`` written as read back."""
    if kind not in walked:
        only = {turn: [r for r in found if r.value_type == kind] for turn, found in outcome.rewrites.items()}
        walked[kind] = walk(_cut(undos, as_read_back(undos.conversation, only))) or {}
    return bool(walked[kind].get(step.turn))
