"""Terminal output of ``tito-audit patch``: the way out, the edits, the verdicts before and after, the proof."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tito_audit.audit.deciding import deciding_verdict, good_verdict
from tito_audit.audit.results import READY, AuditReport
from tito_audit.formatters.conditions_lines import conditions_line
from tito_audit.formatters.fix_report import edit_windows
from tito_audit.formatters.terminal import verdict_text
from tito_audit.formatters.training_section import USE
from tito_audit.model.variants import format_kwarg
from tito_audit.repair.fixes.search import UNFIXED, FixOutcome, causes_of
from tito_audit.repair.training_form import TrainingForm
from tito_audit.repair.way_out import WayOut


def render_setting(way: WayOut, console: Console, model_words: Sequence[str] | None = None) -> None:
    assert way.recommendation is not None
    console.print(f"[bold cyan]{way.recommendation.line()}[/bold cyan]", highlight=False)
    console.print("a setting suffices: no patch proposed (pass it as --kwarg or in your chat template call)")
    if model_words:
        pinned = [
            word for name, value in way.recommendation.kwargs.items() for word in ("--kwarg", format_kwarg(name, value))
        ]
        command = shlex.join(["tito-audit", "audit", *model_words, *pinned])
        console.print(f"audit it with the setting: {command}", highlight=False, soft_wrap=True, markup=False)


def render_no_fix(way: WayOut, console: Console) -> None:
    fix = way.fix
    remaining = sorted(causes_of(fix.after if fix is not None and fix.after is not None else fix.before)) if fix else []
    for cause in remaining:
        console.print(f"[yellow]not fixed[/yellow] {cause}: {UNFIXED.get(cause, 'no known fix')}", highlight=False)
    verdict = fix.before.verdict if fix is not None else "?"
    console.print(
        f"no known mechanical fix applies (verdict {verdict}; causes: {', '.join(remaining) or 'none'})"
        + (f": {fix.reason}" if fix is not None and fix.reason else ""),
        highlight=False,
    )
    if way.recommendation is not None:
        console.print(f"[cyan]{way.recommendation.line()}[/cyan]", highlight=False)


def render_fix(fix: FixOutcome, written: list[Path], console: Console, in_loop: AuditReport | None = None) -> None:
    """The fix, its edits, the verdicts before and after (after: with the template's perfect inverse, and with each
    engine's parser when ``in_loop`` audited the patched template with them: a column per engine), the no-change
    proof."""
    assert fix.after is not None and fix.proof is not None
    console.print("[bold green]fix:[/bold green] " + "; ".join(fix.labels()), highlight=False)
    for applied in fix.applied:
        console.print(f"  [cyan]{applied.rule.name}[/cyan]: {applied.rule.changes}", highlight=False)
        console.print(f"    at inference: {applied.rule.at_inference}", highlight=False)
    for line in edit_windows(fix):
        console.print(f"  {line}", highlight=False, soft_wrap=True)
    parsers = [engine.parser for engine in in_loop.parsers] if in_loop is not None else []
    parsed = {v.name: {parse.parser: parse for parse in v.parses} for v in in_loop.variants} if in_loop else {}
    table = Table(header_style="bold")
    table.add_column("variant", no_wrap=True)
    for column in ["before", "after", *(f"after, with {parser}" for parser in parsers)]:
        table.add_column(column)
    after = {v.name: v for v in fix.after.variants}
    why_not: list[str] = []
    for old in fix.before.variants:
        new = after.get(old.name)
        parses = parsed.get(old.name, {})
        cells: list[str | Text] = [old.name, verdict_text(old.verdict), verdict_text(new.verdict) if new else "-"]
        cells += [verdict_text(parses[p].verdict) if p in parses else "-" for p in parsers]
        table.add_row(*cells)
        if new is not None and new.verdict != READY:
            why_not.append(f"  {old.name}: {new.verdict_reason}")
        why_not += [
            f"  {old.name}, with {parse.parser}: {parse.verdict_reason}"
            for parse in parses.values()
            if parse.verdict != READY
        ]
    console.print(table)
    if why_not:
        console.print("why not ready after the patch:", highlight=False)
        for line in why_not:
            console.print(line, highlight=False)
    console.print(fix.proof.summary(), highlight=False)
    for where in fix.proof.differing:
        console.print(f"  differs: {where}", highlight=False)
    console.print("wrote " + " and ".join(str(p) for p in written))


def render_in_loop(in_loop: AuditReport, console: Console) -> None:
    """What the way out reaches in the loop behind each engine audited (its parser verdict, when it breaks, what is
    left there), with the template's perfect inverse beside, and which verdict decides the exit code (the one rule,
    :mod:`tito_audit.audit.deciding`; docs/errors.md)."""
    for engine in in_loop.parsers:
        console.print(Text.assemble(f"the way out, with {engine.parser}: ", verdict_text(engine.verdict)))
        conditions = conditions_line(engine.conditions)
        if conditions:
            console.print(f"  when it breaks: {conditions}", highlight=False, soft_wrap=True)
        if engine.verdict == READY:
            continue
        parses = [parse for v in in_loop.variants for parse in v.parses if parse.parser == engine.parser]
        left = sorted({cause for parse in parses for failure in parse.failures for cause in failure.causes})
        if left:
            console.print(
                f"  left with {engine.parser}: {', '.join(left)}"
                + (f" (the parse changes: {', '.join(engine.fields)})" if engine.fields else "")
                + ": the parser's doing, which no template fix here addresses (docs/audited.md, parse-lossy)",
                highlight=False,
                soft_wrap=True,
            )
    console.print(Text.assemble("with the template's perfect inverse: ", verdict_text(in_loop.verdict)))
    loop, verdict = deciding_verdict(in_loop)
    which = "the worst of the engines audited" if len(in_loop.parsers) > 1 else "the engine audited"
    console.print(
        f"the exit code follows the verdict with {loop} ({verdict}, {which}): "
        + ("0" if good_verdict(verdict) else "1")
        + "; --parser ENGINE judges that engine's loop alone, --parser template the template alone (docs/errors.md)",
        highlight=False,
        soft_wrap=True,
    )


def render_training(training: TrainingForm | None, written: list[Path], console: Console) -> None:
    """The training form: where it was written and how it was verified, or why there is none."""
    if training is None:
        return
    if not training.offered or not written:
        console.print(f"[yellow]no training form[/yellow]: {training.reason}", highlight=False)
        return
    console.print(f"[bold green]training form:[/bold green] {written[0]}: it {training.evidence()}", highlight=False)
    console.print(f"  form: {training.placement()}", highlight=False, soft_wrap=True)
    console.print(
        "  serve with the template without generation blocks (other Jinja engines, llama.cpp's among them, refuse "
        f"{{% generation %}}); train with this one: {USE}",
        highlight=False,
        soft_wrap=True,
    )
