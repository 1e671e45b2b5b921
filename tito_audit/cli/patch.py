"""``tito-audit patch MODEL -o FILE``: a verified fix of the model's own template (or the setting that makes one
unnecessary), audited before it is written."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from tito_audit.cli.app import app
from tito_audit.cli.options import (
    GroupDefaults,
    ModelArg,
    ModelSource,
    Sampling,
    TemplateSettings,
    with_option_groups,
)
from tito_audit.cli.outcomes import exit_code_for, finish
from tito_audit.errors import EXIT_OK, BadInputError
from tito_audit.outputs import write_outputs

if TYPE_CHECKING:
    from tito_audit.audit.results import AuditReport

OutputOpt = Annotated[Path, typer.Option("-o", "--output", metavar="FILE", help="Write the patched template here.")]
DiffOpt = Annotated[
    Path | None, typer.Option("--diff", metavar="FILE", help="Write the unified diff here (default: OUTPUT.diff).")
]
TrainingOpt = Annotated[
    Path | None,
    typer.Option(
        "--training",
        metavar="FILE",
        help="Write the training form (generation blocks around what the model samples, for assistant-only loss) "
        "here (default: OUTPUT with .training before its suffix).",
    ),
]
QuickSampling = Annotated[Sampling, GroupDefaults(count=48)]


@app.command("patch")
@with_option_groups
def patch_command(
    model: ModelArg,
    output: OutputOpt,
    source: ModelSource,
    sampling: QuickSampling,
    settings: TemplateSettings,
    diff_path: DiffOpt = None,
    training_path: TrainingOpt = None,
) -> None:
    """Propose a prefix-stable template (a small, verified edit of the model's own) or the setting that makes
    one unnecessary; with engines' parsers (--parser), say what the way out reaches behind each engine too.

    The fix is searched with the template's perfect inverse (a template edit cannot change what a parser does); the
    way out is then audited with each engine's parser that applies, and the deciding verdict (the named engine's,
    or the worst) gives the exit code, as it does for audit and check (0 when it is ready or ready-tool-only;
    docs/errors.md)."""
    from tito_audit.cli.wiring import audit_options, audit_with_progress, load, model_words
    from tito_audit.formatters.patch import render_fix, render_no_fix, render_setting, render_training
    from tito_audit.repair.way_out import FIX, SETTING, find_way_out, remembering, way_out_in_loop

    loaded = load(model, source)
    if loaded.template_source is None:
        raise BadInputError(f"{loaded.resolved.model_id} {loaded.renders_through}: there is no template to patch")
    training_file = training_path or output.with_name(f"{output.stem}.training{output.suffix or '.jinja'}")
    diff_file = diff_path or output.with_name(output.name + ".diff")
    if training_file.resolve() in (output.resolve(), diff_file.resolve()):
        raise BadInputError(f"--training {training_file}: the same file as -o or --diff (the serving form)")
    console = Console()
    options = audit_options(sampling, settings)

    def audit_shown(model_to_audit, audit_settings):
        return audit_with_progress(model_to_audit, audit_settings, console, True)

    run_audit = remembering(audit_shown)

    before = run_audit(loaded, options)
    way = find_way_out(loaded, before, replace(options, parser="template"), run_audit)
    training = way.training
    trained: list[tuple[str, Path, str | bytes]] = []
    if training is not None and training.offered and training.source is not None:
        trained.append(("--training", training_file, training.source))
    if way.kind == SETTING and way.recommendation is not None and way.fix is None:
        render_setting(way, console, model_words(model, source, settings))
        write_outputs(trained)  # the model's own template serves; only its training form is written
        render_training(training, [p for _, p, _ in trained], console)
        raise _in_loop_exit(way_out_in_loop(way, loaded, before, options, run_audit), console)
    if way.kind != FIX or way.fix is None or way.fix.patched_source is None:
        render_no_fix(way, console)
        raise finish(False)
    # both files or neither: a template without its diff (or a diff of a template not written) misleads
    write_outputs([("-o", output, way.fix.patched_source), ("--diff", diff_file, way.fix.diff(output.name)), *trained])
    in_loop = way_out_in_loop(way, loaded, before, options, run_audit)
    render_fix(way.fix, [output, diff_file], console, in_loop)
    render_training(training, [p for _, p, _ in trained], console)
    raise _in_loop_exit(in_loop, console)


def _in_loop_exit(in_loop: AuditReport | None, console: Console) -> typer.Exit:
    """The way out's exit: with engines' parsers audited, their deciding verdict says it (each is shown); without
    one, the way out reached a good verdict with the template's perfect inverse: 0."""
    from tito_audit.formatters.patch import render_in_loop

    if in_loop is None:
        return typer.Exit(EXIT_OK)
    render_in_loop(in_loop, console)
    return typer.Exit(exit_code_for(in_loop))
