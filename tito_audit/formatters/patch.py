"""Terminal output of ``tito-audit patch``: the way out, the edits, the verdicts before and after, the proof."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from tito_audit.audit.results import READY
from tito_audit.formatters.fix_report import edit_windows
from tito_audit.formatters.terminal import verdict_text
from tito_audit.formatters.training_section import USE
from tito_audit.repair.fixes.search import UNFIXED, FixOutcome, causes_of
from tito_audit.repair.training_form import TrainingForm
from tito_audit.repair.way_out import WayOut


def render_setting(way: WayOut, console: Console) -> None:
    assert way.recommendation is not None
    console.print(f"[bold cyan]{way.recommendation.line()}[/bold cyan]", highlight=False)
    console.print("a setting suffices: no patch proposed (pass it as --kwarg or in your chat template call)")


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


def render_fix(fix: FixOutcome, written: list[Path], console: Console) -> None:
    assert fix.after is not None and fix.proof is not None
    console.print("[bold green]fix:[/bold green] " + "; ".join(fix.labels()), highlight=False)
    for applied in fix.applied:
        console.print(f"  [cyan]{applied.rule.name}[/cyan]: {applied.rule.changes}", highlight=False)
        console.print(f"    at inference: {applied.rule.at_inference}", highlight=False)
    for line in edit_windows(fix):
        console.print(f"  {line}", highlight=False, soft_wrap=True)
    table = Table(header_style="bold")
    for column in ("variant", "before", "after", "why not ready after the patch"):
        table.add_column(column, overflow="fold")
    after = {v.name: v for v in fix.after.variants}
    for old in fix.before.variants:
        new = after.get(old.name)
        why = "" if new is None or new.verdict == READY else new.verdict_reason
        table.add_row(old.name, verdict_text(old.verdict), verdict_text(new.verdict) if new else "-", why)
    console.print(table)
    console.print(fix.proof.summary(), highlight=False)
    for where in fix.proof.differing:
        console.print(f"  differs: {where}", highlight=False)
    console.print("wrote " + " and ".join(str(p) for p in written))


def render_training(training: TrainingForm | None, written: list[Path], console: Console) -> None:
    """The training form: where it was written and how it was verified, or why there is none."""
    if training is None:
        return
    if not training.offered or not written:
        console.print(f"[yellow]no training form[/yellow]: {training.reason}", highlight=False)
        return
    console.print(f"[bold green]training form:[/bold green] {written[0]}: it {training.evidence()}", highlight=False)
    console.print(
        "  serve with the template without generation blocks (other Jinja engines, llama.cpp's among them, refuse "
        f"{{% generation %}}); train with this one: {USE}",
        highlight=False,
        soft_wrap=True,
    )
