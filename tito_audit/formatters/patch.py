"""Terminal output of ``tito-audit patch``: the edits, the verdicts before and after, the no-change proof."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from tito_audit.formatters.terminal import verdict_text
from tito_audit.repair import PatchOutcome
from tito_audit.results import READY


def render_refusals(outcome: PatchOutcome, console: Console) -> None:
    for cause, reason in outcome.patch.refused.items():
        console.print(f"[yellow]not fixed[/yellow] {cause}: {reason}", highlight=False)
    if not outcome.patch.changed:
        console.print(
            f"no known mechanical fix applies (verdict {outcome.before.verdict}; "
            f"causes: {', '.join(outcome.causes) or 'none'})"
        )


def render_patch(outcome: PatchOutcome, written: list[Path], console: Console) -> None:
    assert outcome.after is not None and outcome.proof is not None
    for edit in outcome.patch.edits:
        console.print(
            f"[cyan]{edit.fix}[/cyan] line {edit.line}: {edit.before.strip()}  →  {edit.after.strip()}", highlight=False
        )
    table = Table(header_style="bold")
    for column in ("variant", "before", "after", "why not ready after the patch"):
        table.add_column(column, overflow="fold")
    for old, new in zip(outcome.before.variants, outcome.after.variants, strict=False):
        why = "" if new.verdict == READY else new.verdict_reason
        table.add_row(old.name, verdict_text(old.verdict), verdict_text(new.verdict), why)
    console.print(table)
    proof = outcome.proof
    console.print(
        f"no-change proof {'holds' if proof.holds else 'FAILS'}: {proof.identical} of {proof.compared} renders "
        f"without an earlier assistant turn are byte-identical; {proof.changed_elsewhere} renders with one changed "
        "(where the fix applies)",
        highlight=False,
    )
    for where in proof.differing:
        console.print(f"  differs: {where}", highlight=False)
    console.print("wrote " + " and ".join(str(p) for p in written))
