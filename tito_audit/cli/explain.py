"""``tito-audit explain MODEL``: every distinct cause with its evidence and the template lines behind it."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from tito_audit.cli.app import app
from tito_audit.cli.options import (
    GroupDefaults,
    JsonOutOpt,
    ModelArg,
    ModelSource,
    Sampling,
    TemplateSettings,
    with_option_groups,
)
from tito_audit.cli.outcomes import exit_code_for
from tito_audit.outputs import write_outputs

CaseOpt = Annotated[int | None, typer.Option("--case", min=1, help="Explain one failing case in full (its number).")]
QuickSampling = Annotated[Sampling, GroupDefaults(count=48)]
"""Half the audit's conversations by default: enough to meet every cause, twice as fast."""


@app.command("explain")
@with_option_groups
def explain_command(
    model: ModelArg,
    source: ModelSource,
    sampling: QuickSampling,
    settings: TemplateSettings,
    case: CaseOpt = None,
    json_path: JsonOutOpt = None,
) -> None:
    """Every distinct cause with its evidence and the template lines that produce it (or one case in full).

    Exit 0 when the deciding verdict (the engine's parser's when one ran, else the template's) is ready or
    ready-tool-only, 1 when it is worse, 2 when it could not run (docs/errors.md)."""
    from tito_audit.cli.wiring import audit_options, audit_with_progress, load
    from tito_audit.formatters import explain as explain_format
    from tito_audit.model.load_folder import codec_for
    from tito_audit.repair.explain import explain_report

    loaded = load(model, source)
    console = Console()
    report = audit_with_progress(loaded, audit_options(sampling, settings), console, show=True)
    explained = explain_report(report, loaded, codec_for(loaded), case)
    if json_path is not None:
        write_outputs([("--json", json_path, explain_format.to_json(explained, report.verdict, report.parsers))])
    explain_format.render_explanations(
        report, explained.explanations, explained.causes, explained.cases, console, full=case is not None
    )
    raise typer.Exit(exit_code_for(report))
