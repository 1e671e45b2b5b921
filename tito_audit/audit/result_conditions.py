"""Result types of when a verdict breaks (docs/contract.md, Verdicts: "Conditions"): the steps by the forms and shapes
they were drawn under, the conditions read from them, the refused settings, the call turns by form. Plain dataclasses,
part of the JSON report's schema (:mod:`tito_audit.audit.results`, which uses them).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FormSteps:
    """Rollout steps of one kind after assistant turns audited in one reasoning form: how often the buffer could
    not follow (so a reader can judge how often their model writes that form)."""

    kind: str
    form: str
    """``reasoning absent``, ``reasoning empty`` (the model closed the block at once; ``…, sent back without it``:
    its harness dropped the empty field) or ``reasoning present``."""
    steps: int
    failed: int


@dataclass
class ShapeSteps:
    """Rollout steps of the conversations generated in one shape harnesses send (docs/contract.md, Conversations),
    beside its usual form: tool results without ``name``, results in another order, a reused call id, a ``developer``
    message."""

    shape: str
    """``result names``, ``result order``, ``call ids`` or ``lead``."""
    form: str
    """``absent``/``kept``, ``reversed``/``as called``, ``reused``/``fresh``, ``developer``/``system``/``none``."""
    conversations: int
    steps: int
    failed: int


@dataclass
class StepTally:
    """Rollout steps of one kind drawn under one set of conditions (:mod:`tito_audit.audit.conditions.step_conditions`),
    and how many of them the buffer could not follow."""

    kind: str
    conditions: list[str]
    """``form: …`` (forms the plain loop has), ``rare form: …``, ``shape: …``; empty: none recorded."""
    steps: int
    failed: int
    tried: list[str] = field(default_factory=list)
    """The conditions the failed steps were walked again without, one at a time
    (:mod:`tito_audit.audit.checks.undo_reruns`), and ``setting: with …`` where the default setting walked them."""
    held_without: list[str] = field(default_factory=list)
    """Of those, the ones the failed steps hold without."""
    plain_holds: bool = False
    """The failed steps hold in the plain loop: once the departures of their conversation (harness shapes, rare
    forms) are undone together. A failed step without this breaks in the plain loop."""


@dataclass
class Condition:
    """One form, harness shape or setting, with the steps drawn under it that decide the verdict (tool steps for
    ``broken``, the others for ``ready-tool-only``), how many of them fail, and, among those, how many hold once it is
    undone (the count that makes it a cause)."""

    kind: str
    """``form`` (the plain loop has it), ``rare form``, ``shape`` or ``setting``."""
    name: str
    """The words a report prints after "breaks": ``when two assistant turns run back to back``, ``with
    enable_thinking=false``."""
    steps: int
    failed: int
    held: int = 0
    """Of the failed steps walked again with the condition undone (the shape put back, the form written otherwise, or
    under the default setting), those that hold."""
    tried: int = 0
    """The failed steps walked again with the condition undone (all of them, or those of the first conversations)."""


@dataclass
class Conditions:
    """When a verdict breaks (docs/contract.md, Verdicts: "Conditions"): the verdict of the plain loop (the model writes
    as it does by habit, calls as the template supports them, no unusual harness shape, the first setting), and the
    conditions that cause the failures (those whose undoing lets failing steps hold). The verdict itself stays the
    worst case. Computed by :mod:`tito_audit.audit.conditions.verdict_conditions` from the step tallies."""

    verdict: str
    plain_verdict: str
    """The plain loop's verdict; empty when no plain step was drawn."""
    counted: str
    """The steps the counts are of: ``tool``, ``non-tool`` (``ready-tool-only``), or empty (nothing failed)."""
    plain_steps: int
    plain_failed: int
    """The steps of the plain loop (every counted step, its departures undone) and those that still fail (once one tool
    step breaks there, the later failing steps are not walked again for it and count as failing)."""
    breaking: list[Condition] = field(default_factory=list)
    """The conditions that cause failures, most failing steps holding without them first: each named only where
    some failing step holds once it is undone."""
    drawn: list[Condition] = field(default_factory=list)
    """Every rare form and harness shape drawn, failing or not, with its steps of every kind: how often the audit
    wrote it."""
    tallies: list[StepTally] = field(default_factory=list)
    """The steps it is read from, by kind and conditions (a variant's or a parse result's; empty for a model)."""


@dataclass
class CallTurns:
    """The call turns the parser was given, by the form they were written in (docs/contract.md, "The parse step")."""

    turns: int
    lost: int
    """Of those, the turns whose calls the parser lost."""
    rare_form: str = ""
    """Where the family's model writes text before each call by habit, the words of its rare form (a call with
    none), drawn for a small share of call turns; empty without such a habit."""
    rare_turns: int = 0
    rare_lost: int = 0
    """Of the call turns in the rare form, those whose calls the parser lost."""


@dataclass
class RefusedSetting:
    """A value of the template's own keyword argument that the template cannot take (it raises on a conversation it
    renders under the default settings): a setting no loop can run, reported beside the verdicts and never deciding
    the model's."""

    setting: str
    """The variant the sweep would have audited, e.g. ``reasoning_strength=true``."""
    kwargs: dict[str, object]
    error: str
    """What the template raised (one line)."""
