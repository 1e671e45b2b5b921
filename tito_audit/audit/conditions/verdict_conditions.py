"""When a verdict breaks (docs/contract.md, Verdicts: "Conditions"), from the steps as they were walked, tagged
(:mod:`tito_audit.audit.conditions.step_conditions`) and walked again with each condition undone
(:mod:`tito_audit.audit.checks.undo_reruns`).

A verdict is the worst step over every drawn form, shape and setting. Beside it:

- **the plain loop's verdict**: the same rule (:func:`tito_audit.audit.verdict.verdict_for`) over every step, a
  failing step counting as holding where it holds once its departures from the plain loop (harness shapes, rare
  forms) are undone (and, for a model, under its first setting): the steps whose break survives every undoing are
  the plain loop's;
- **the conditions that cause its failures**: each form, shape or setting such that some failing step of the kind
  that decides the verdict (tool steps for ``broken``; the others for ``ready-tool-only``) holds once it is undone,
  with how many of the failing steps drawn under it do. A condition whose undoing leaves every failing step failing
  is not when the verdict breaks, however often it comes with the failures.

Example (GigaChat3.1 with SGLang's parser): ``broken`` — plain loop ``ready``; breaks when two assistant turns run
back to back (10 of 10 failing tool steps hold without it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from tito_audit.audit.conditions.step_conditions import SETTING, is_plain, kind_of, tag, words
from tito_audit.audit.result_conditions import Condition, Conditions, StepTally
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


def tally_steps(tallies: dict[tuple, list[int]]) -> list[StepTally]:
    """Running ``(kind, conditions, held without, plain holds) -> [steps, failed]`` totals (the keys of
    :meth:`tito_audit.audit.checks.undo_reruns.WalkedStep.key`) as :class:`StepTally` rows, in a stable order."""
    return [
        StepTally(kind, list(tags), steps, failed, list(tried), list(held), plain_holds)
        for (kind, tags, tried, held, plain_holds), (steps, failed) in sorted(tallies.items())
    ]


def _sum(tallies: Iterable[StepTally], kinds: frozenset[str]) -> tuple[int, int]:
    chosen = [t for t in tallies if t.kind in kinds]
    return sum(t.steps for t in chosen), sum(t.failed for t in chosen)


def _held(tallies: Iterable[StepTally], condition: str, kinds: frozenset[str]) -> tuple[int, int]:
    """(the failing steps of ``kinds`` walked again with ``condition`` undone, those of them that hold)."""
    chosen = [t for t in tallies if t.kind in kinds and condition in t.tried]
    return sum(t.failed for t in chosen), sum(t.failed for t in chosen if condition in t.held_without)


def _in_plain_loop(tallies: Sequence[StepTally]) -> list[StepTally]:
    """The tallies as the plain loop has them: a failing step that holds once its departures are undone holds."""
    return [replace(t, failed=0) if t.plain_holds else t for t in tallies]


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
    plain = _in_plain_loop(tallies)
    plain_steps, plain_failed = _sum(plain, kinds)
    drawn = sorted({c for t in tallies for c in t.conditions if not is_plain(c)})
    return Conditions(
        verdict,
        _verdict_of(plain),
        label,
        plain_steps,
        plain_failed,
        _causes(tallies, kinds),
        [_drawn(tallies, name) for name in drawn],
        list(tallies),
    )


def _drawn(tallies: Sequence[StepTally], name: str) -> Condition:
    """``name`` with the steps of every kind drawn under it, and how many fail."""
    steps, failed = _sum((t for t in tallies if name in t.conditions), frozenset(STEP_KINDS))
    return Condition(kind_of(name), words(name), steps, failed)


def _causes(tallies: Sequence[StepTally], kinds: frozenset[str]) -> list[Condition]:
    """Each form, shape or rare form some failing step of ``kinds`` holds without, most such steps first: with the
    steps of ``kinds`` drawn under it, those failing, and those of them that hold once it is undone."""
    found = []
    for name in sorted({c for t in tallies if t.kind in kinds for c in t.held_without if kind_of(c) != SETTING}):
        steps, failed = _sum((t for t in tallies if name in t.conditions), kinds)
        tried, held = _held(tallies, name, kinds)
        found.append(Condition(kind_of(name), words(name), steps, failed, held, tried))
    return sorted(found, key=_most_held)


def _most_held(condition: Condition) -> tuple[float, float, str]:
    return (-condition.held, -condition.held / condition.tried if condition.tried else 0.0, condition.name)


Result = VariantResult | ParseResult


def report_conditions(
    variants: Sequence[VariantResult], pick: Callable[[VariantResult], Result | None]
) -> Conditions | None:
    """A model's conditions over its variants: ``pick`` chooses each variant's result (the variant itself for the
    perfect inverse; one engine's parse result, once per engine: :mod:`tito_audit.audit.parse_step.engine_verdicts`).
    The plain loop runs under the first variant (the default settings, or the pinned ones); a setting whose verdict is
    worse than that one's is a cause where some of its failing steps hold under the first setting (a setting the
    template refuses tool conversations under is named with no step); the first variant's forms and shapes are the
    model's where its verdict is the model's."""
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
    plain = _in_plain_loop(base.conditions.tallies)
    plain_steps, plain_failed = _sum(plain, kinds)
    settings = []
    for variant, result in chosen[1:]:
        if VERDICT_ORDER.index(result.verdict) <= VERDICT_ORDER.index(base.verdict) or result.conditions is None:
            continue
        if result.verdict == UNSUPPORTED:
            settings.append(Condition(SETTING, f"with {variant.name}", 0, 0))
            continue
        tallies = result.conditions.tallies
        steps, failed = _sum(tallies, kinds)
        tried, held = _held(tallies, tag(SETTING, f"with {variant.name}"), kinds)
        if held:
            settings.append(Condition(SETTING, f"with {variant.name}", steps, failed, held, tried))
    forms = base.conditions.breaking if base.verdict == verdict else []
    settings.sort(key=_most_held)
    breaking = settings + list(forms)
    return Conditions(verdict, _verdict_of(plain), label, plain_steps, plain_failed, breaking, base.conditions.drawn)
