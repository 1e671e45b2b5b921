"""When a verdict breaks (docs/contract.md, Verdicts: "Conditions"), from the steps as they were walked and tagged
(:mod:`tito_audit.audit.conditions.step_conditions`).

A verdict is the worst step over every drawn form, shape and setting. Beside it:

- **the plain loop's verdict**: the same rule (:func:`tito_audit.audit.verdict.verdict_for`) over the steps drawn
  with no rare form and no unusual harness shape (and, for a model, under its first setting);
- **the conditions it breaks under**: each form, shape or setting whose steps of the kind that decides the verdict
  (tool steps for ``broken``; the others for ``ready-tool-only``) fail more often than those drawn without it, with
  failing / drawn steps. A condition failing no more often than the rest is not when the verdict breaks: the
  failures lie elsewhere.

Example (GigaChat3.1 with SGLang's parser): ``broken`` — plain loop ``ready``; breaks when two assistant turns run
back to back (10 of 10 tool steps).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from tito_audit.audit.conditions.result_conditions import Condition, Conditions, StepTally
from tito_audit.audit.conditions.step_conditions import SETTING, is_plain, kind_of, words
from tito_audit.audit.results import (
    BROKEN,
    READY_TOOL_ONLY,
    UNSUPPORTED,
    VERDICT_ORDER,
    CheckResult,
    CheckRow,
    ParseResult,
    VariantResult,
    worst_verdict,
)
from tito_audit.audit.verdict import verdict_for
from tito_audit.conversations.conversation import STEP_KINDS, TOOL

TOOL_STEPS, OTHER_STEPS = "tool", "non-tool"


def counted_kinds(verdict: str) -> tuple[str, frozenset[str]]:
    """The steps that decide ``verdict``: (their label, their kinds); none for ``ready`` and ``unsupported``."""
    if verdict == BROKEN:
        return TOOL_STEPS, frozenset({TOOL})
    if verdict == READY_TOOL_ONLY:
        return OTHER_STEPS, frozenset(STEP_KINDS) - {TOOL}
    return "", frozenset()


def tally_steps(tallies: dict[tuple[str, tuple[str, ...]], list[int]]) -> list[StepTally]:
    """Running ``(kind, conditions) -> [steps, failed]`` totals as :class:`StepTally` rows, in a stable order."""
    return [StepTally(kind, list(tags), steps, failed) for (kind, tags), (steps, failed) in sorted(tallies.items())]


def _sum(tallies: Iterable[StepTally], kinds: frozenset[str]) -> tuple[int, int]:
    chosen = [t for t in tallies if t.kind in kinds]
    return sum(t.steps for t in chosen), sum(t.failed for t in chosen)


def _plain(tallies: Sequence[StepTally]) -> list[StepTally]:
    return [t for t in tallies if all(is_plain(c) for c in t.conditions)]


def _verdict_of(tallies: Sequence[StepTally]) -> str:
    """The verdict rule over ``tallies`` (empty when they hold no step)."""
    if not tallies:
        return ""
    check = CheckResult("rollout")
    for tally in tallies:
        row = check.row(tally.kind)
        row.cases += tally.steps
        row.failed += tally.failed
        row.passed += tally.steps - tally.failed
    tool = next((row for row in check.rows if row.category == TOOL), CheckRow(TOOL))
    verdict, _ = verdict_for({"rollout": check}, tool.cases)
    return verdict


def conditions_of(tallies: Sequence[StepTally], verdict: str) -> Conditions:
    """The conditions of one result (a variant's, or its rollout with the parser) whose verdict is ``verdict``."""
    label, kinds = counted_kinds(verdict)
    plain = _plain(tallies)
    plain_steps, plain_failed = _sum(plain, kinds)
    breaking = [_condition(tallies, names, kinds) for names in _explaining(tallies, kinds)]
    drawn = sorted({c for t in tallies for c in t.conditions if not is_plain(c)})
    return Conditions(
        verdict,
        _verdict_of(plain),
        label,
        plain_steps,
        plain_failed,
        breaking,
        [_condition(tallies, (name,), frozenset(STEP_KINDS)) for name in drawn],
        list(tallies),
    )


def _under(tallies: Iterable[StepTally], names: Sequence[str]) -> list[StepTally]:
    return [t for t in tallies if all(name in t.conditions for name in names)]


def _condition(tallies: Sequence[StepTally], names: Sequence[str], kinds: frozenset[str]) -> Condition:
    """``names`` together (``when a later turn reuses a call id and tool results carry no name``), with the steps
    drawn under all of them."""
    steps, failed = _sum(_under(tallies, names), kinds)
    text = " and ".join(words(name).removeprefix("when ") if n else words(name) for n, name in enumerate(names))
    return Condition(kind_of(names[0]), text, steps, failed)


def _excess(left: Sequence[StepTally], name: str, kinds: frozenset[str]) -> tuple[float, int, int]:
    """(failures beyond those expected, steps, failures) of the steps under ``name``. Expected, kind by kind: as
    many as the steps of that kind drawn without it fail at; for a kind whose every step has it (two assistant turns
    back to back is every assistant step), the rate of the steps of any counted kind without it; with none: as many
    as fail."""
    pooled, pooled_failed = _sum((t for t in left if name not in t.conditions), kinds)
    expected, steps, failed = 0.0, 0, 0
    for kind in kinds:
        inside, inside_failed = _sum((t for t in left if name in t.conditions), frozenset({kind}))
        rest, rest_failed = _sum((t for t in left if name not in t.conditions), frozenset({kind}))
        if not rest:
            rest, rest_failed = (pooled, pooled_failed) if pooled else (inside, inside_failed)
        expected += inside * rest_failed / rest if rest else 0.0
        steps, failed = steps + inside, failed + inside_failed
    return failed - expected, steps, failed


def _explaining(tallies: Sequence[StepTally], kinds: frozenset[str]) -> list[tuple[str, ...]]:
    """The conditions the failures come with, most telling first: the condition whose steps fail most beyond the
    rate of the steps of the same kind drawn without it (so that a condition common among user steps is not named
    because user steps fail); joined by the conditions that come with all its failures where together they fail
    more often (a reused call id and a nameless result); then, among the steps they leave, the next, until none is
    left. A condition that fails only alongside one already named is not named again; one every step of its kind
    has tells nothing."""
    left = [t for t in tallies if t.kind in kinds]
    named: list[tuple[str, ...]] = []
    while True:
        best, best_key = None, None
        for name in sorted({c for t in left for c in t.conditions}):
            excess, steps, failed = _excess(left, name, kinds)
            key = (-excess / steps if steps else 0.0, -failed, name)
            if excess > 1e-9 and (best_key is None or key < best_key):
                best, best_key = name, key
        if best is None:
            return named
        together = [best]
        failing = [set(t.conditions) for t in _under(left, together) if t.failed]
        others = sorted(set.intersection(*failing) - {best}, key=lambda c: (is_plain(c), c)) if failing else []
        for other in others:  # harness shapes and rare forms first, then the forms of the plain loop
            before, after = _sum(_under(left, together), kinds), _sum(_under(left, [*together, other]), kinds)
            if after[1] * before[0] > before[1] * after[0]:
                together.append(other)
        named.append(tuple(together))
        left = [t for t in left if t not in _under(left, together)]


Result = VariantResult | ParseResult


def report_conditions(
    variants: Sequence[VariantResult], pick: Callable[[VariantResult], Result | None]
) -> Conditions | None:
    """A model's conditions over its variants: ``pick`` chooses each variant's result (the variant itself for the
    perfect inverse; one engine's parse result, once per engine: :mod:`tito_audit.audit.parse_step.engine_verdicts`).
    The plain loop runs under the first variant (the default settings, or the pinned ones); the settings whose verdict
    is worse than that one's are conditions of their own; the first variant's forms and shapes are the model's where its
    verdict is the model's."""
    chosen = [
        (variant, result)
        for variant in variants
        if (result := pick(variant)) is not None and result.conditions is not None
    ]
    if not chosen:
        return None
    verdict = worst_verdict([result.verdict for _, result in chosen])
    label, kinds = counted_kinds(verdict)
    _, base = chosen[0]
    assert base.conditions is not None
    base_tallies = base.conditions.tallies
    plain_steps, plain_failed = _sum(_plain(base_tallies), kinds)
    settings = []
    for variant, result in chosen[1:]:
        if VERDICT_ORDER.index(result.verdict) > VERDICT_ORDER.index(base.verdict):
            steps, failed = _sum(result.conditions.tallies if result.conditions else [], kinds)
            if result.verdict == UNSUPPORTED:
                steps = failed = 0
            settings.append(Condition(SETTING, f"with {variant.name}", steps, failed))
    forms = base.conditions.breaking if base.verdict == verdict else []
    plain = _verdict_of(_plain(base_tallies))
    settings.sort(key=lambda c: (-c.failed / c.steps if c.steps else 0, -c.failed, c.name))
    return Conditions(verdict, plain, label, plain_steps, plain_failed, settings + list(forms), base.conditions.drawn)
