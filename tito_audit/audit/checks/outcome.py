"""What the checks of one conversation produce: tallies per (check, category), located failures, drift."""

from __future__ import annotations

from dataclasses import dataclass, field

from tito_audit.audit.checks.undo_reruns import WalkedStep
from tito_audit.audit.results import CheckRow, Failure

PASSED, FAILED, REFUSED = "passed", "failed", "refused"

FailureKey = tuple[int, int, int, int]
"""Where a failure sits in the rollout, so that reports list them in rollout order whatever order the checks
run in: ``(phase, message or turn, part, sub-part)``; see :mod:`tito_audit.audit.checks`."""


@dataclass
class Tally:
    check: str
    category: str
    status: str


def count_into(row: CheckRow, status: str) -> None:
    """One case of ``status`` (passed, failed or refused) added to a check table's row."""
    row.cases += 1
    if status == FAILED:
        row.failed += 1
    elif status == REFUSED:
        row.refused += 1
    else:
        row.passed += 1


def count_steps(into: dict[tuple, list[int]], steps: list[WalkedStep]) -> None:
    """Each walked step added to ``into``'s ``key -> [steps, failed]`` (:meth:`WalkedStep.key`)."""
    for step in steps:
        tally = into.setdefault(step.key(), [0, 0])
        tally[0] += 1
        tally[1] += not step.followed


@dataclass
class DriftTally:
    steps: int = 0
    canonical: int = 0
    noncanonical: int = 0
    mismatched_tokens: int = 0
    mismatched_tokens_noncanonical: int = 0
    total_tokens: int = 0
    causes: dict[str, int] = field(default_factory=dict)


@dataclass
class Outcome:
    """Everything one conversation contributed to the audit."""

    tallies: list[Tally] = field(default_factory=list)
    located: list[tuple[FailureKey, Failure]] = field(default_factory=list)
    drift: DriftTally = field(default_factory=DriftTally)
    gen_prompt_mismatches: int = 0
    completions: int = 0
    completions_without_stop: int = 0
    turn_status: dict[int, str] = field(default_factory=dict)
    """How each assistant turn was aligned with its generation prompt (see
    :mod:`tito_audit.audit.realization.realize`)."""
    final_steps: int = 0
    """Appended steps after the last assistant turn (a conversation cut after tool results or a user message)."""
    forms: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    """(step kind, reasoning form of the turn before the step) -> [steps, steps the buffer could not follow]."""

    walked: list[WalkedStep] = field(default_factory=list)
    """The rollout's steps as walked, by the conditions they were drawn under
    (:mod:`tito_audit.audit.conditions.step_conditions`); settled by the undo re-runs, then counted."""
    conditions: dict[tuple, list[int]] = field(default_factory=dict)
    """(step kind, its conditions, what it holds without, whether the plain loop holds) -> [steps, failed]."""

    def count_conditions(self) -> None:
        """The walked steps, settled, into :attr:`conditions`."""
        count_steps(self.conditions, self.walked)

    def count(self, check: str, category: str, status: str) -> None:
        self.tallies.append(Tally(check, category, status))

    def count_form(self, kind: str, form: str, followed: bool) -> None:
        """One rollout step, by the reasoning form the model's previous turn was audited in."""
        tally = self.forms.setdefault((kind, form), [0, 0])
        tally[0] += 1
        tally[1] += not followed

    def fail(self, key: FailureKey, failure: Failure) -> None:
        self.located.append((key, failure))

    @property
    def failures(self) -> list[Failure]:
        """The failures in rollout order (stable for failures at the same place)."""
        return [failure for _, failure in sorted(self.located, key=lambda item: item[0])]
