"""Aggregation of one variant: the outcomes of its conversations summed into check tables, drift, the kept
failure examples, and the refused and not-realizable shapes grouped for the report."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from tito_audit.audit.checks import CHECK_NAMES
from tito_audit.audit.checks.outcome import FAILED, REFUSED, Outcome, count_into
from tito_audit.audit.realization.acceptance import Refusal
from tito_audit.audit.realization.realize import UnrealizedTurn
from tito_audit.audit.results import (
    CheckResult,
    DriftSummary,
    Failure,
    FormSteps,
    RefusedShape,
    ShapeSteps,
    UnrealizableTurns,
)
from tito_audit.conversations.conversation import TOOL, Conversation, steps_of
from tito_audit.conversations.generate import HARNESS_SHAPES
from tito_audit.conversations.reasoning_forms import CLOSED, OPEN


@dataclass
class VariantTotals:
    """Running totals of one variant's audit."""

    checks: dict[str, CheckResult] = field(default_factory=lambda: {name: CheckResult(name) for name in CHECK_NAMES})
    failures: list[Failure] = field(default_factory=list)
    drift: DriftSummary = field(default_factory=DriftSummary)
    refusals: list[Refusal] = field(default_factory=list)
    unrealized: list[UnrealizedTurn] = field(default_factory=list)
    gen_prompt_mismatches: int = 0
    completions: int = 0
    completions_without_stop: int = 0
    final_steps: int = 0
    """Appended steps after the last assistant turn of a conversation (audited against ``render(M, gp=True)``)."""
    forms: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    """(step kind, reasoning form of the turn before) -> [steps, failed]."""
    shapes: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    """(harness shape, its form in a conversation) -> [conversations, rollout steps, failed]."""
    conditions: dict[tuple[str, tuple[str, ...]], list[int]] = field(default_factory=dict)
    """(step kind, the conditions it was drawn under) -> [steps, failed]."""

    def add_refused(self, conversation: Conversation) -> None:
        """A conversation no shape rescued: every case it would have had counts as refused."""
        messages, checks = conversation.messages, self.checks
        for k in range(1, len(messages)):
            self._refuse(checks["append"].row(f"{messages[k].get('role')} after {messages[k - 1].get('role')}"))
        for step in steps_of(messages):
            for name in ("rollout", "bridge") if step.kind == TOOL else ("rollout",):
                self._refuse(checks[name].row(step.kind))
        for _ in conversation.assistant_indices():
            self._refuse(checks["roundtrip"].row("completion (canonical)"))

    @staticmethod
    def _refuse(row) -> None:
        count_into(row, REFUSED)

    def add(self, outcome: Outcome, shape_changes: list[str]) -> None:
        failures = outcome.failures
        for failure in failures:
            failure.shape_changes = shape_changes
        for tally in outcome.tallies:
            count_into(self.checks[tally.check].row(tally.category), tally.status)
        for failure in failures:
            if failure.aspect.startswith("drift"):
                continue  # drift is reported beside the verdict, in the drift summary
            counts = self.checks[failure.check].cause_counts
            for cause in failure.causes:
                counts[cause] = counts.get(cause, 0) + 1
        self.failures.extend(failures)
        walked, drift = outcome.drift, self.drift
        drift.steps += walked.steps
        drift.canonical_drift_steps += walked.canonical
        drift.noncanonical_drift_steps += walked.noncanonical
        drift.rollouts += 1
        drift.rollouts_with_mismatch += walked.mismatched_tokens > 0
        drift.mismatched_tokens += walked.mismatched_tokens
        drift.mismatched_tokens_noncanonical += walked.mismatched_tokens_noncanonical
        drift.total_tokens += walked.total_tokens
        for cause, count in walked.causes.items():
            drift.causes[cause] = drift.causes.get(cause, 0) + count
        self.gen_prompt_mismatches += outcome.gen_prompt_mismatches
        self.final_steps += outcome.final_steps
        for key, (steps, failed) in outcome.forms.items():
            form = self.forms.setdefault(key, [0, 0])
            form[0] += steps
            form[1] += failed
        add_tallies(self.conditions, outcome.conditions)
        self.completions += outcome.completions
        self.completions_without_stop += outcome.completions_without_stop

    def add_shapes(self, conversation: Conversation, outcome: Outcome) -> None:
        """The conversation's rollout steps under each harness shape it was generated in."""
        steps = [t for t in outcome.tallies if t.check == "rollout" and t.status != REFUSED]
        failed = sum(t.status == FAILED for t in steps)
        for name in HARNESS_SHAPES:
            form = conversation.shape.get(name)
            if form is not None:
                tally = self.shapes.setdefault((name, form), [0, 0, 0])
                tally[0] += 1
                tally[1] += len(steps)
                tally[2] += failed


def add_tallies(into: dict[tuple, list[int]], more: dict[tuple, list[int]]) -> None:
    """``more``'s ``key -> [steps, failed]`` counts added to ``into``."""
    for key, counts in more.items():
        tally = into.setdefault(key, [0] * len(counts))
        for index, count in enumerate(counts):
            tally[index] += count


def steps_by_shape(shapes: dict[tuple[str, str], list[int]]) -> list[ShapeSteps]:
    """The per-shape step counts in the order of :data:`HARNESS_SHAPES`, the usual form first."""
    order = {name: (index, forms) for index, (name, forms) in enumerate(HARNESS_SHAPES.items())}

    def key(item: tuple[tuple[str, str], list[int]]) -> tuple:
        (name, form), _ = item
        index, forms = order[name]
        return (index, forms.index(form) if form in forms else len(forms), form)

    return [ShapeSteps(name, form, *tally) for (name, form), tally in sorted(shapes.items(), key=key)]


def steps_by_form(forms: dict[tuple[str, str], list[int]]) -> list[FormSteps]:
    """The per-form step counts in a stable order (kind, then form)."""
    return [FormSteps(kind, form, steps, failed) for (kind, form), (steps, failed) in sorted(forms.items())]


def keep_examples(failures: list[Failure], per_group: int | None) -> list[Failure]:
    """The first few failures of each (check, aspect, category, causes) group; counts stay complete."""
    if per_group is None:
        return failures
    kept: list[Failure] = []
    seen: dict[tuple, int] = defaultdict(int)
    for failure in failures:
        key = (failure.check, failure.aspect, failure.category, tuple(failure.causes))
        if seen[key] < per_group:
            kept.append(failure)
        seen[key] += 1
    return kept


def group_refusals(refusals: Sequence[Refusal]) -> list[RefusedShape]:
    groups: dict[tuple[str, tuple[str, ...] | None], list[Refusal]] = defaultdict(list)
    for refusal in refusals:
        groups[(refusal.reason, refusal.accepted_after)].append(refusal)
    out = []
    for (reason, after), members in sorted(
        groups.items(), key=lambda item: (-len(item[1]), item[0][0], str(item[0][1]))
    ):
        out.append(
            RefusedShape(
                reason=reason,
                shapes=sorted({m.shape for m in members})[:5],
                count=len(members),
                example_conversation=members[0].conversation_id,
                accepted_after=list(after) if after is not None else None,
            )
        )
    return out


def unrealizable_reason(original: str, audited_as: str, state: str) -> str:
    """Why a turn's original form cannot follow its generation prompt, from the prompt's state."""
    if state == CLOSED:
        return f"the generation prompt already closes the reasoning block: {original} cannot follow it"
    if state == OPEN:
        return f"the generation prompt opens a reasoning block: {original} cannot follow it"
    return f"{original} cannot follow the generation prompt; audited as {audited_as}"


def group_unrealized(turns: Sequence[UnrealizedTurn]) -> list[UnrealizableTurns]:
    """Unrealizable turns grouped by (original form, form audited instead), largest group first."""
    groups: dict[tuple[str, str], list[UnrealizedTurn]] = defaultdict(list)
    for turn in turns:
        groups[(turn.original, turn.audited_as)].append(turn)
    out = []
    for (original, audited_as), members in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        first = members[0]
        out.append(
            UnrealizableTurns(
                original=original,
                audited_as=audited_as,
                reason=unrealizable_reason(original, audited_as, first.state),
                count=len(members),
                conversations=len({m.conversation_id for m in members}),
                shapes=sorted({m.shape for m in members})[:5],
                example_conversation=first.conversation_id,
                example_turn=first.turn,
                prompt=first.prompt,
            )
        )
    return out
