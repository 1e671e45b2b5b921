"""``tito-audit patch MODEL -o FILE``: a prefix-stable template for the causes with a mechanical fix, audited
before it is written."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tito_audit.cli.app import app
from tito_audit.cli.options import GroupDefaults, ModelArg, ModelSource, Sampling, with_option_groups
from tito_audit.cli.outcomes import finish
from tito_audit.cli.wiring import audit_options, audit_with_progress, load
from tito_audit.formatters.patch import render_patch, render_refusals
from tito_audit.repair import patch_and_verify

OutputOpt = Annotated[Path, typer.Option("-o", "--output", help="Write the patched template here.")]
DiffOpt = Annotated[Path | None, typer.Option("--diff", help="Write the unified diff here (default: OUTPUT.diff).")]
QuickSampling = Annotated[Sampling, GroupDefaults(count=48)]


@app.command("patch")
@with_option_groups
def patch_command(
    model: ModelArg,
    output: OutputOpt,
    source: ModelSource,
    sampling: QuickSampling,
    diff_path: DiffOpt = None,
) -> None:
    """Propose a prefix-stable template for the causes with a mechanical fix, audited before it is written."""
    loaded = load(model, source)
    console = Console()
    outcome = patch_and_verify(
        loaded, audit_options(sampling), lambda model, options: audit_with_progress(model, options, console, True)
    )
    render_refusals(outcome, console)
    if not outcome.patch.changed:
        raise finish(False)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(outcome.patch.patched, encoding="utf-8")
    diff_file = diff_path or output.with_name(output.name + ".diff")
    diff_file.write_text(outcome.patch.unified_diff(output.name), encoding="utf-8")
    render_patch(outcome, [output, diff_file], console)
    raise finish(outcome.good)
