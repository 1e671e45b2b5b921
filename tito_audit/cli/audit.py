"""``tito-audit audit MODEL``: simulated TITO rollouts, the five checks, a verdict per template variant."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from tito_audit.cli.app import app
from tito_audit.cli.options import (
    ConversationInputs,
    ModelArg,
    ModelSource,
    ReportOutputs,
    Sampling,
    TemplateSettings,
    with_option_groups,
)
from tito_audit.cli.outcomes import exit_code_for
from tito_audit.outputs import check_outputs, write_outputs

ExamplesOpt = Annotated[
    int | None,
    typer.Option("--examples", min=1, help="Keep only N failures per (check, category, causes) group (default: all)."),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only the verdict line.")]


@app.command("audit")
@with_option_groups
def audit_command(
    model: ModelArg,
    source: ModelSource,
    sampling: Sampling,
    settings: TemplateSettings,
    inputs: ConversationInputs,
    outputs: ReportOutputs,
    examples: ExamplesOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Audit one model: simulated TITO rollouts, the five checks, a verdict per template variant."""
    from tito_audit.cli.wiring import (
        add_conversation_inputs,
        audit_options,
        audit_with_progress,
        fail_if_refused_everything,
        load,
        model_words,
    )
    from tito_audit.formatters.interface import FormatContext
    from tito_audit.formatters.terminal import render_report, verdict_text
    from tito_audit.repair.explanations import attach_explanations

    chosen = outputs.chosen()
    check_outputs([(report_format.option, path) for report_format, path in chosen])
    console = Console()
    options = audit_options(sampling, settings, max_examples_per_group=examples)
    add_conversation_inputs(options, inputs)
    loaded = load(model, source, options.parser)
    report = audit_with_progress(loaded, options, console, show=not quiet)
    words = model_words(model, source, settings)
    attach_explanations(report, loaded)
    context = FormatContext(model_words=words)
    write_outputs([(f.option, path, f.render(report, context)) for f, path in chosen])
    fail_if_refused_everything(report)
    if quiet:
        others = [f"{v.verdict} with {v.parser}" for v in report.parsers if v.verdict != report.verdict]
        with_parser = f" ({'; '.join(others)})" if others else ""
        console.print(verdict_text(report.verdict), f"{report.model.model_id}{with_parser}")
    else:
        render_report(report, console, words)
    raise typer.Exit(exit_code_for(report))
